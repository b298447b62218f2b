/* One number from every rank, combined the same way on every rank: the
 * small agreements a collective set-up needs (did every rank get through
 * a local step, can every rank take this path, does any rank need that,
 * the largest size asked for).  Through the bootstrap's allgather, whose
 * buffers outlive a timeout (boot/oob_mpi.c). */
#include <stdlib.h>
#include "core/comm.h"
#include "core/error.h"

int mkx_comm_exchange(MKX_Comm c, const void *mine, void *all, size_t bytes,
                      const char *what) {
  int rc =
      c->oob.allgather(c->oob.ctx, mine, all, bytes, c->opt.timeout_ms, what);
  if (rc == MKX_ERR_PEER) return mkx_comm_break(c, rc);
  return mkx_comm_exchanged(c, rc);
}

int mkx_comm_agree_u64(MKX_Comm c, uint64_t mine, mkx_agree_op op,
                       uint64_t *out, const char *what) {
  uint64_t *all = malloc(sizeof *all * (size_t)c->size);
  if (!all) return mkx_error(MKX_ERR_NOMEM, "%s: agreement", what);
  int rc = mkx_comm_exchange(c, &mine, all, sizeof mine, what);
  uint64_t r = all[0];
  for (int q = 1; rc == MKX_SUCCESS && q < c->size; q++) {
    if (op == MKX_AGREE_MAX)
      r = all[q] > r ? all[q] : r;
    else if (op == MKX_AGREE_AND)
      r &= all[q];
    else
      r |= all[q];
  }
  free(all);
  MKX_TRY(rc);
  *out = r;
  return MKX_SUCCESS;
}

int mkx_comm_agree_rc(MKX_Comm c, int rc, const char *what) {
  int64_t *all = malloc(sizeof *all * (size_t)c->size);
  if (!all) return mkx_error(MKX_ERR_NOMEM, "%s: agreement", what);
  const int64_t mine = rc;
  int orc = mkx_comm_exchange(c, &mine, all, sizeof mine, what);
  int bad = -1;
  for (int q = 0; orc == MKX_SUCCESS && q < c->size; q++)
    if (all[q] != MKX_SUCCESS && bad < 0) bad = q;
  const int bad_rc = bad >= 0 ? (int)all[bad] : MKX_SUCCESS;
  free(all);
  MKX_TRY(orc);
  if (rc != MKX_SUCCESS) return rc; /* this rank's own message stands */
  if (bad < 0) return MKX_SUCCESS;
  return mkx_error(MKX_ERR_PEER, "%s failed on rank %d (%s)", what, bad,
                   MKX_Error_string(bad_rc));
}
