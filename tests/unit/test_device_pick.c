/* GPU choice: option first, then the only device, then the launcher's
 * local rank (Slurm before Open MPI), then MPI placement, modulo the count;
 * and (built with CUDA) what a CUDA failure's message says, an MPS server
 * gone mid-job among them, and that a failed release in cleanup is a
 * warning naming the call (none while the runtime unloads at exit) that
 * leaves the last error alone. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/device.h"
#include "core/options.h"
#include "mkx.h"
#include "../common/check.h"
#if HAVE_CUDA
#include "core/cuda_rc.h"
#include "core/log.h"

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

/* What mkx_cuda_release_at writes to stderr (at log level warn) for the
 * releases of release_log. */
static void release_log(char *buf, size_t len) {
  char path[] = "/tmp/mkx_release_XXXXXX";
  const int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  if (fd < 0) return;
  fflush(stderr);
  const int saved = dup(2);
  dup2(fd, 2);
  mkx_log_set_level(MKX_LOG_WARN);
  mkx_cuda_release_at(cudaErrorInvalidValue, "cudaFree(p)", "x.c", 7);
  mkx_cuda_release_at(cudaErrorCudartUnloading, "cudaFree(q)", "x.c", 8);
  mkx_cuda_release_at(cudaSuccess, "cudaFree(r)", "x.c", 9);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  const ssize_t n = pread(fd, buf, len - 1, 0);
  buf[n > 0 ? n : 0] = '\0';
  close(fd);
  unlink(path);
}

static void release_warning(void) {
  char before[256], log[1024];
  (void)mkx_cuda_rc(cudaErrorMemoryAllocation, NULL, "cudaMalloc");
  snprintf(before, sizeof before, "%s", MKX_Get_last_error());
  release_log(log, sizeof log);
  CHECK(strstr(log, "warn") && strstr(log, "x.c:7: cudaFree(p) failed") &&
            strstr(log, "cudaErrorInvalidValue"),
        "a failed release is a warning naming it: %s", log);
  CHECK(!strstr(log, "cudaFree(q)") && !strstr(log, "cudaFree(r)"),
        "no warning while the runtime unloads, nor for a release that "
        "succeeded: %s",
        log);
  CHECK(!strcmp(before, MKX_Get_last_error()),
        "the last error left alone: %s, was %s", MKX_Get_last_error(), before);
}
#else
static void cuda_messages(void) {}
static void release_warning(void) {}
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
  release_warning();
  return check_done("test_device_pick");
}
