/* One number from every rank, combined the same way on every rank: the
 * small agreements a collective set-up needs (can every rank take this
 * path, does any rank need that, the largest size asked for). */
#include <stdlib.h>
#include "core/comm.h"
#include "core/error.h"

int mkx_comm_agree_u64(MKX_Comm c, uint64_t mine, mkx_agree_op op,
                       uint64_t *out, const char *what) {
  uint64_t *all = malloc(sizeof *all * (size_t)c->size);
  if (!all) return mkx_error(MKX_ERR_NOMEM, "%s: agreement", what);
  int rc = c->oob.allgather(c->oob.ctx, &mine, all, sizeof mine,
                            c->opt.timeout_ms);
  uint64_t r = all[0];
  for (int q = 1; rc == MKX_SUCCESS && q < c->size; q++) {
    if (op == MKX_AGREE_MAX) r = all[q] > r ? all[q] : r;
    else if (op == MKX_AGREE_AND) r &= all[q];
    else r |= all[q];
  }
  free(all);
  if (rc != MKX_SUCCESS) return mkx_comm_fail(c, rc);
  *out = r;
  return MKX_SUCCESS;
}
