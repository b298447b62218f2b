/* MKX_Info_print: what mkx_info shows, also callable from applications. */
#include <stdio.h>
#include "core/comm.h"
#include "core/comm_net.h"
#include "core/device.h"
#include "core/error.h"

static void print_features(FILE *f) {
  fprintf(f, "Build features:\n");
  fprintf(f, "  CUDA kernels   %s\n",
          HAVE_CUDA ? "yes (" MKX_NVCC_GENCODE ")" : "no (host path only)");
  fprintf(f, "  BLAS           %s\n", MKX_BLAS_NAME);
  fprintf(f, "  hwloc          %s\n", HAVE_HWLOC ? "yes" : "no");
  fprintf(f, "  verbs          %s\n", HAVE_VERBS ? "yes" : "no");
  fprintf(f, "  EFA (efadv)    %s\n", HAVE_EFA ? "yes" : "no");
}

static void print_placement(MKX_Comm c, FILE *f) {
  char name[160] = "host path (no GPU)";
  fprintf(f, "This rank:\n");
  fprintf(f, "  rank %d of %d, node %d of %d, local rank %d of %d\n", c->rank,
          c->size, c->place.node, c->place.num_nodes, c->place.local_rank,
          c->place.local_size);
  if (c->device >= 0 && mkx_device_name(c->device, name, sizeof name))
    snprintf(name, sizeof name, "device %d (name unavailable)", c->device);
  fprintf(f, "  GPU            %s\n", name);
  fprintf(f, "  topology       %s\n", c->topo_desc);
  if (c->device >= 0)
    fprintf(f,
            "  SMs            %d of %d for this rank (%s, %d rank(s) on "
            "this GPU)%s; fused kernels take %d CTAs\n",
            c->share.ctx_sms, c->share.dev_sms,
            mkx_gpu_share_name(c->share.mode), c->share.ranks,
            c->share.unsafe ? ", not every rank has SMs of its own" : "",
            c->share.ctas ? c->share.ctas : c->share.dev_sms);
  if (c->device < 0 || c->share.mode != MKX_SHARE_MPS) return;
  fprintf(f, "  partition      %s", mkx_gpu_part_name(c->share.part));
  if (c->share.part == MKX_PART_GREEN)
    fprintf(f, ": group %d of %d (%d SMs each)", c->share.index, c->share.ranks,
            c->share.ctx_sms);
  fprintf(f, "\n");
}

int MKX_Info_print(MKX_Comm comm, void *file) {
  FILE *f = file ? (FILE *)file : stdout;
  mkx_options opt;
  mkx_error_clear();
  fprintf(f, "MKX %d.%d.%d\n", MKX_VERSION_MAJOR, MKX_VERSION_MINOR,
          MKX_VERSION_PATCH);
  print_features(f);
  if (comm != NULL) MKX_TRY(mkx_comm_check(comm));
  if (comm != NULL) {
    opt = comm->opt;
  } else {
    int rc = mkx_comm_options_load(&opt, MPI_INFO_NULL);
    if (rc != MKX_SUCCESS) return rc;
  }
  fprintf(f, "Options (environment variable, MPI_Info key, current value):\n");
  mkx_options_print(&opt, f);
  if (comm != NULL) print_placement(comm, f);
  return MKX_SUCCESS;
}
