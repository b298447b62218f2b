/* Ring attention on the host: gather every rank's K and V (one collective,
 * in the user's dtype), then plain softmax attention in double for each
 * (batch, head, query) over the keys it may see. */
#include <math.h>
#include <string.h>
#include "core/error.h"
#include "host/dtype.h"
#include "host/host_ops.h"
#include "host/xfer.h"

typedef struct attn_ctx {
  const mkx_attn_args *a;
  int p, rank;
  const double *kv;        /* [p][2][batch][seq_local][heads_kv][head_dim] */
  double *q, *acc, *score; /* head_dim, head_dim, p * seq_local */
} attn_ctx;

/* K (which 0) or V (which 1) of rank r, batch b, position s, kv head h. */
static const double *kv_row(const attn_ctx *t, int r, int which, int64_t b,
                            int64_t s, int64_t h) {
  const mkx_attn_args *a = t->a;
  int64_t i = (((((int64_t)r * 2 + which) * a->batch + b) * a->seq_local + s) *
                   a->heads_kv +
               h) *
              a->head_dim;
  return t->kv + i;
}

/* Whether the key at rank r's local position s is visible from the query
 * at sequence position qpos (causal: not after it, in the layout). */
static int visible(const attn_ctx *t, int r, int64_t s, int64_t qpos) {
  const mkx_attn_args *a = t->a;
  return !a->causal ||
         mkx_attn_position(a->layout, t->p, r, a->seq_local, s) <= qpos;
}

/* Scores of every visible key, in rank and local order; returns how
 * many. */
static int64_t attn_scores(const attn_ctx *t, int64_t b, int64_t h,
                           int64_t qpos, double *mx) {
  const mkx_attn_args *a = t->a;
  int64_t nvis = 0, S = a->seq_local, D = a->head_dim;
  int64_t g = h / (a->heads_q / a->heads_kv);
  *mx = -INFINITY;
  for (int r = 0; r < t->p; r++)
    for (int64_t s = 0; s < S; s++) {
      if (!visible(t, r, s, qpos)) continue;
      const double *k = kv_row(t, r, 0, b, s, g);
      double dot = 0.0;
      for (int64_t d = 0; d < D; d++) dot += t->q[d] * k[d];
      t->score[nvis] = a->scale * dot;
      if (t->score[nvis] > *mx) *mx = t->score[nvis];
      nvis++;
    }
  return nvis;
}

/* One query row: O and LSE for (b, position i, head h). */
static void attn_row(const attn_ctx *t, int64_t b, int64_t i, int64_t h) {
  const mkx_attn_args *a = t->a;
  int64_t S = a->seq_local, D = a->head_dim;
  int64_t g = h / (a->heads_q / a->heads_kv), nvis, n = 0;
  size_t es = MKX_Type_size(a->dtype);
  size_t off = (size_t)(((b * S + i) * a->heads_q + h) * D) * es;
  double mx, sum = 0.0;
  mkx_convert(a->dtype, (const char *)a->Q + off, 1, MKX_FP64, t->q, 1,
              (size_t)D);
  const int64_t qpos = mkx_attn_position(a->layout, t->p, t->rank, S, i);
  nvis = attn_scores(t, b, h, qpos, &mx);
  memset(t->acc, 0, (size_t)D * sizeof *t->acc);
  for (int r = 0; r < t->p && n < nvis; r++)
    for (int64_t s = 0; s < S && n < nvis; s++) {
      if (!visible(t, r, s, qpos)) continue;
      double w = exp(t->score[n++] - mx);
      const double *v = kv_row(t, r, 1, b, s, g);
      sum += w;
      for (int64_t d = 0; d < D; d++) t->acc[d] += w * v[d];
    }
  for (int64_t d = 0; d < D; d++) /* no visible key: O = 0 */
    t->acc[d] = nvis ? t->acc[d] / sum : 0.0;
  mkx_convert(MKX_FP64, t->acc, 1, a->dtype, (char *)a->O + off, 1, (size_t)D);
  if (a->LSE)
    a->LSE[(b * a->heads_q + h) * S + i] =
        nvis ? (float)(mx + log(sum)) : -INFINITY;
}

int mkx_host_ring_attention(MKX_Comm c, const mkx_attn_args *a,
                            const mkx_agreed *g) {
  int p = c->size;
  size_t es = MKX_Type_size(a->dtype), row_bytes;
  int64_t rows = a->batch * a->seq_local; /* of K, and as many of V */
  size_t half = (size_t)rows * (size_t)(a->heads_kv * a->head_dim);
  mkx_arena ar = {0};
  void *send = NULL, *all = NULL;
  double *kvw = NULL;
  int64_t *rows_of = NULL;
  attn_ctx t = {a, p, c->rank, NULL, NULL, NULL, NULL};
  mkx_xfer x;
  (void)g;
  MKX_TRY(mkx_host_bytes(a->heads_kv, a->head_dim, es, &row_bytes,
                         "ring attention: K row"));
  int rc = mkx_arena_array(&ar, p, 1, sizeof *rows_of, (void **)&rows_of,
                           "row counts");
  for (int q = 0; !rc && q < p; q++) rows_of[q] = 2 * rows;
  if (!rc) rc = mkx_xfer_fit(p, rows_of, row_bytes, "ring attention");
  if (rc) goto out; /* sizes agree, so every rank stops here */
  rc = mkx_arena_array(&ar, 2, (int64_t)half, es, &send, "K and V");
  if (!rc)
    rc = mkx_arena_array(&ar, 2 * (int64_t)p, (int64_t)half, es, &all,
                         "gathered K and V");
  kvw = all; /* fp64 data needs no working copy */
  if (!rc && a->dtype != MKX_FP64)
    rc = mkx_arena_array(&ar, 2 * (int64_t)p, (int64_t)half, sizeof(double),
                         (void **)&kvw, "K and V in double");
  if (!rc)
    rc = mkx_arena_array(&ar, 2 * a->head_dim + p * a->seq_local, 1,
                         sizeof(double), (void **)&t.q, "scratch");
  rc = mkx_comm_agree_rc(c, rc, "ring attention");
  if (rc) goto out;
  memcpy(send, a->K, half * es);
  memcpy((char *)send + half * es, a->V, half * es);
  rc = mkx_xfer_iallgatherv(c, send, all, rows_of, row_bytes, &x,
                            "ring attention: gather K and V");
  if (!rc) rc = mkx_xfer_wait(c, &x, "ring attention: gather K and V");
  if (rc) goto out;
  if ((void *)kvw != all)
    mkx_convert(a->dtype, all, 1, MKX_FP64, kvw, 1, 2 * (size_t)p * half);
  t.kv = kvw;
  t.acc = t.q + a->head_dim;
  t.score = t.acc + a->head_dim;
  for (int64_t b = 0; b < a->batch; b++)
    for (int64_t i = 0; i < a->seq_local; i++)
      for (int64_t h = 0; h < a->heads_q; h++) attn_row(&t, b, i, h);
out:
  mkx_arena_release(&ar, rc);
  return rc;
}
