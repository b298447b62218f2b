/* GPU choice: option first, then the only device, then the launcher's
 * local rank (Slurm before Open MPI), then MPI placement, modulo the count;
 * and (built with CUDA) what a CUDA failure's message says, an MPS server
 * gone mid-job among them. */
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "core/options.h"
#include "mkx.h"
#include "../common/check.h"
#if HAVE_CUDA
#include "core/cuda_rc.h"

/* No GPU needed: the runtime names its errors without a driver. */
static void cuda_messages(void) {
  CHECK(mkx_cuda_rc(cudaErrorMpsClientTerminated, "MKX_Allgather_gemm",
                    "launch") == MKX_ERR_CUDA &&
            strstr(MKX_Get_last_error(), "MKX_Allgather_gemm: launch") &&
            strstr(MKX_Get_last_error(), "MPS server is gone"),
        "an MPS client ended by its server: %s", MKX_Get_last_error());
  CHECK(mkx_cuda_rc(cudaErrorMpsMaxClientsReached, NULL, "cudaMalloc") ==
                MKX_ERR_CUDA &&
            strstr(MKX_Get_last_error(), "no room for this rank"),
        "a full MPS server: %s", MKX_Get_last_error());
  CHECK(mkx_cuda_rc(cudaErrorMemoryAllocation, NULL, "cudaMalloc") ==
                MKX_ERR_NOMEM &&
            !strstr(MKX_Get_last_error(), "MPS"),
        "out of memory, not an MPS failure: %s", MKX_Get_last_error());
}
#else
static void cuda_messages(void) {}
#endif

static int pick(int count, int path, int opt, int host_lr, int *dev) {
  char why[128];
  return mkx_device_pick(count, path, opt, host_lr, dev, why, sizeof why);
}

int main(void) {
  int dev;
  const char *vars[] = {"SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK",
                        "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK",
                        "PALS_LOCAL_RANKID"};
  for (int i = 0; i < 5; i++) unsetenv(vars[i]);

  CHECK(pick(0, MKX_PATH_OPT_AUTO, -1, 3, &dev) == MKX_SUCCESS && dev == -1,
        "no GPU: host path");
  CHECK(pick(0, MKX_PATH_OPT_GPU, -1, 3, &dev) == MKX_ERR_UNSUPPORTED,
        "path=gpu without a GPU is an error");
  CHECK(pick(1, MKX_PATH_OPT_AUTO, -1, 5, &dev) == MKX_SUCCESS && dev == 0,
        "one visible device (CUDA_VISIBLE_DEVICES narrowed it): device 0");
  CHECK(pick(4, MKX_PATH_OPT_AUTO, -1, 6, &dev) == MKX_SUCCESS && dev == 2,
        "no launcher variable: MPI placement 6 %% 4 = 2, got %d", dev);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
  CHECK(pick(4, MKX_PATH_OPT_AUTO, -1, 0, &dev) == MKX_SUCCESS && dev == 3,
        "Open MPI local rank 3, got %d", dev);
  setenv("SLURM_LOCALID", "5", 1);
  CHECK(pick(4, MKX_PATH_OPT_AUTO, -1, 0, &dev) == MKX_SUCCESS && dev == 1,
        "Slurm wins over Open MPI: 5 %% 4 = 1, got %d", dev);
  setenv("SLURM_LOCALID", "x", 1);
  CHECK(pick(4, MKX_PATH_OPT_AUTO, -1, 0, &dev) == MKX_SUCCESS && dev == 3,
        "a malformed SLURM_LOCALID is skipped, got %d", dev);
  CHECK(pick(4, MKX_PATH_OPT_AUTO, 1, 0, &dev) == MKX_SUCCESS && dev == 1,
        "option device wins, got %d", dev);
  CHECK(pick(2, MKX_PATH_OPT_AUTO, 2, 0, &dev) == MKX_ERR_INVALID_ARG,
        "option device beyond the visible count is an error");
  CHECK(strstr(MKX_Get_last_error(), "device=2") != NULL,
        "message names the option: %s", MKX_Get_last_error());
  cuda_messages();
  return check_done("test_device_pick");
}
