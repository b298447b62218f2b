/* Pinned areas and exchanges of MoE calls on several nodes (moe_net.h). */
#include <stdlib.h>
#include <string.h>
#include "core/comm_net.h"
#include "core/error.h"

#if HAVE_CUDA
#include "core/cuda_rc.h"
#include "ops/moe/moe_net.h"

static int net_key = MPI_KEYVAL_INVALID;

static int net_delete(MPI_Comm comm, int key, void *attr, void *extra) {
  mkx_moe_net *n = attr;
  (void)comm, (void)key, (void)extra;
  if (!n) return MPI_SUCCESS;
  if (n->done) {
    (void)cudaEventSynchronize(n->done);
    MKX_CUDA_RELEASE(cudaEventDestroy(n->done));
  }
  if (!n->lost) { /* a timed-out exchange may still hold them */
    if (n->mine) MKX_CUDA_RELEASE(cudaFreeHost(n->mine));
    if (n->theirs) MKX_CUDA_RELEASE(cudaFreeHost(n->theirs));
  }
  free(n);
  return MPI_SUCCESS;
}

int mkx_moe_net_get(MKX_Comm c, mkx_moe_net **n, const char *fn) {
  int found = 0;
  if (net_key == MPI_KEYVAL_INVALID &&
      MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, net_delete, &net_key,
                             NULL) != MPI_SUCCESS)
    return mkx_error(MKX_ERR_MPI, "%s: MPI_Comm_create_keyval", fn);
  if (MPI_Comm_get_attr(c->mpi, net_key, n, &found) != MPI_SUCCESS)
    return mkx_error(MKX_ERR_MPI, "%s: MPI_Comm_get_attr", fn);
  if (found) return MKX_SUCCESS;
  *n = calloc(1, sizeof **n);
  if (!*n) return mkx_error(MKX_ERR_NOMEM, "%s: pinned areas", fn);
  int rc =
      mkx_cuda_rc(cudaEventCreateWithFlags(&(*n)->done, cudaEventDisableTiming),
                  fn, "event");
  if (rc == MKX_SUCCESS &&
      MPI_Comm_set_attr(c->mpi, net_key, *n) != MPI_SUCCESS)
    rc = mkx_error(MKX_ERR_MPI, "%s: MPI_Comm_set_attr", fn);
  if (rc != MKX_SUCCESS) {
    if ((*n)->done) MKX_CUDA_RELEASE(cudaEventDestroy((*n)->done));
    free(*n);
    *n = NULL;
  }
  return rc;
}

/* One mapped pinned area of `bytes` in place of *host (NULL: none yet). */
static int grow(char **host, void **dev, size_t *cap, size_t bytes,
                const char *fn, const char *what) {
  if (bytes <= *cap) return MKX_SUCCESS;
  if (*host) MKX_CUDA_RELEASE(cudaFreeHost(*host));
  *host = NULL, *dev = NULL, *cap = 0;
  MKX_TRY(
      mkx_cuda_rc(cudaHostAlloc((void **)host, bytes,
                                cudaHostAllocMapped | cudaHostAllocPortable),
                  fn, what));
  const int rc = mkx_cuda_rc(cudaHostGetDevicePointer(dev, *host, 0), fn, what);
  if (rc != MKX_SUCCESS) {
    MKX_CUDA_RELEASE(cudaFreeHost(*host));
    *host = NULL;
    return rc;
  }
  *cap = bytes;
  return MKX_SUCCESS;
}

int mkx_moe_net_reserve(MKX_Comm c, mkx_moe_net *n, size_t mine, size_t theirs,
                        const char *fn) {
  int rc = n->lost ? mkx_error(MKX_ERR_PEER,
                               "%s: an earlier exchange between nodes timed "
                               "out",
                               fn)
                   : MKX_SUCCESS;
  /* the host writes them too, and may free them below */
  if (rc == MKX_SUCCESS)
    rc = mkx_cuda_rc(cudaEventSynchronize(n->done), fn, "earlier call's end");
  /* at least 16 bytes: the GPU's addresses stay valid for empty areas */
  if (rc == MKX_SUCCESS)
    rc = grow(&n->mine, &n->mine_dev, &n->mine_cap, mine > 16 ? mine : 16, fn,
              "pinned send area");
  if (rc == MKX_SUCCESS)
    rc = grow(&n->theirs, &n->theirs_dev, &n->theirs_cap,
              theirs > 16 ? theirs : 16, fn, "pinned receive area");
  return mkx_comm_agree_rc(c, rc, fn);
}

int mkx_moe_net_exchange(MKX_Comm c, mkx_moe_net *n, const char *from,
                         const int64_t *send, char *to, const int64_t *recv,
                         size_t row_bytes, const char *fn) {
  const int P = c->size;
  const void **sp = calloc((size_t)P, sizeof *sp);
  void **rp = calloc((size_t)P, sizeof *rp);
  size_t *sl = calloc((size_t)P, sizeof *sl),
         *rl = calloc((size_t)P, sizeof *rl);
  int rc = sp && rp && sl && rl ? MKX_SUCCESS
                                : mkx_error(MKX_ERR_NOMEM, "%s: exchange", fn);
  size_t so = 0, ro = 0;
  for (int q = 0; rc == MKX_SUCCESS && q < P; q++) {
    sl[q] = (size_t)send[q] * row_bytes;
    rl[q] = (size_t)recv[q] * row_bytes;
    sp[q] = from + so;
    rp[q] = to + ro;
    so += sl[q];
    ro += rl[q];
  }
  if (rc == MKX_SUCCESS)
    rc = mkx_comm_net_exchange(c, (const void *const *)sp, sl,
                               (void *const *)rp, rl);
  if (rc == MKX_ERR_TIMEOUT) n->lost = 1;
  free(sp), free(rp), free(sl), free(rl);
  return rc;
}

int mkx_moe_net_mark(mkx_moe_net *n, cudaStream_t st, const char *fn) {
  return mkx_cuda_rc(cudaEventRecord(n->done, st), fn, "end of the call");
}
#else
typedef int mkx_moe_net_unused; /* ISO C: not an empty unit */
#endif
