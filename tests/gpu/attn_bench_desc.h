/* The attention engine's tools (test_attn_engine's bench, attn_timeline):
 * one dense bf16 call of shape {batch, seq, heads_q, heads_kv, head_dim},
 * one chunk, on q, k, v and o; the caller sets the rest (scale, mask,
 * LSE, tile counter, variants). */
#ifndef MKX_TESTS_ATTN_BENCH_DESC_H
#define MKX_TESTS_ATTN_BENCH_DESC_H

#include <string.h>
#include "attention/attn_engine.h"
#include "gemm/gemm_engine.h"

static inline void attn_bench_desc(mkx_attn_desc *d, const int s[5], void *q,
                                   void *k, void *v, void *o) {
  memset(d, 0, sizeof *d);
  d->batch = s[0];
  d->seq_q = d->seq_k = s[1];
  d->heads_q = s[2];
  d->heads_kv = s[3];
  d->head_dim = s[4];
  d->q = q;
  d->k = k;
  d->v = v;
  d->o = o;
  d->dtype = MKX_GEMM_BF16;
  d->nchunks = 1;
}

#endif
