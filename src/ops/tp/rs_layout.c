/* Which tile rows of a GEMM+ReduceScatter/AllReduce product go which way
 * (kernels/tp/tp.h, mkx_tp_rs_layout).  Every rank computes the same
 * layout from agreed values: the GEMM's tile order and epilogue and the
 * copy engines' chunk copies must agree on it without talking. */
#include <string.h>
#include "tp/tp.h"

#if HAVE_CUDA

enum { TILE = 128, CHUNKS = 8 };

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Owner q's clean tile rows: every row of the tile (below m) is q's.  The
 * last tile row may be short; it is clean when it starts inside q's rows
 * and q's rows run to the end. */
static void clean_rows(int64_t m, const int64_t *bnd, int q, int *a, int *b) {
  if (bnd[q + 1] <= bnd[q]) {
    *a = *b = 0;
    return;
  }
  *a = (int)cdiv(bnd[q], TILE);
  *b = (int)(bnd[q + 1] == m ? cdiv(m, TILE) : bnd[q + 1] / TILE);
  if (*b < *a) *b = *a;
}

static int is_clean(const mkx_tp_rs_layout *L, int size, int tm) {
  for (int q = 0; q < size; q++)
    if (tm >= L->clean_a[q] && tm < L->clean_b[q]) return 1;
  return 0;
}

void mkx_tp_rs_layout_make(int64_t m, int64_t n, int size, const int64_t *bnd,
                           int bn, mkx_tp_rs_layout *L) {
  memset(L, 0, sizeof *L);
  L->tiles_m = (int)cdiv(m, TILE);
  L->tiles_n = (int)cdiv(n, bn);
  L->bn = bn;
  for (int q = 0; q < size; q++) {
    clean_rows(m, bnd, q, &L->clean_a[q], &L->clean_b[q]);
    const int ntr = L->clean_b[q] - L->clean_a[q];
    /* ~8 chunks: the copy engines start early and the last chunk's copy
     * (the tail after the GEMM) stays short */
    L->chunk_tr[q] = ntr > 0 ? (int)cdiv(ntr, CHUNKS) : 1;
    L->nchunk[q] = ntr > 0 ? (int)cdiv(ntr, L->chunk_tr[q]) : 0;
  }
  /* a tile row that is nobody's clean row holds an owner boundary: at most
   * one per boundary, so at most size - 1 of them */
  for (int tm = 0; tm < L->tiles_m && L->nlate < MKX_FUSED_MAX; tm++)
    if (!is_clean(L, size, tm)) L->late_tm[L->nlate++] = tm;
}

void mkx_tp_rs_chunk_rows(const mkx_tp_rs_layout *L, int64_t m,
                          const int64_t *bnd, int q, int c, int64_t *r0,
                          int64_t *r1) {
  int64_t t0 = L->clean_a[q] + (int64_t)c * L->chunk_tr[q];
  int64_t t1 = t0 + L->chunk_tr[q];
  if (t1 > L->clean_b[q]) t1 = L->clean_b[q];
  *r0 = t0 * TILE;
  *r1 = t1 * TILE < m ? t1 * TILE : m;
  if (*r1 > bnd[q + 1]) *r1 = bnd[q + 1];
}

int mkx_tp_rs_chunk_subtiles(const mkx_tp_rs_layout *L, int q, int c) {
  int t0 = L->clean_a[q] + c * L->chunk_tr[q];
  int t1 = t0 + L->chunk_tr[q];
  if (t1 > L->clean_b[q]) t1 = L->clean_b[q];
  return 2 * (t1 - t0) * L->tiles_n; /* both warpgroups count every tile */
}

#else
typedef int mkx_rs_layout_unused; /* ISO C: not an empty unit */
#endif
