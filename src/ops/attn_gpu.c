/* MKX_Ring_attention's GPU paths: the attention engine
 * (kernels/attention) on one rank's buffers, and the ring of one node.
 *
 * The ring: every rank's K and V chunk travels, by the copy engine (no
 * SMs), into its slot of every other rank's symmetric workspace, the
 * chunk's ready flag after it (the call's epoch, copied from the
 * workspace's src[] word so that graph replays carry the epoch of their
 * own run).  Meanwhile the engine on the user's stream computes on its
 * own chunk, then on the others in ring order (self-1, self-2, ...: rank
 * r pushes to r+1 first), each once its flag is up.  Every query row keeps
 * one softmax state in registers across all chunks, so no partial result
 * is rounded or merged through memory.  The workspace holds every rank's
 * K and V (p chunks each): memory for the whole key sequence, in exchange
 * for no step-by-step merge.
 *
 * Workspace data (this rank's, same layout on every rank):
 *   [0, p*chunk)            K of rank c at c*chunk ([batch][seq][heads_kv]
 *                           [head_dim], rank `self`'s slot unused)
 *   [p*chunk, 2*p*chunk)    V, likewise
 *   counter                 the engine's tile counter (own runs only)
 * flags[c] = epoch once rank c's K and V have landed here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/log.h"
#include "ops/op.h"
#include "ops/path.h"

#if HAVE_CUDA
#include "ops/attn_gpu.h"
#include "ops/tp_host.h"
#include "attention/attn_engine.h"

static const char *const FN = "MKX_Ring_attention";

typedef struct attn_plan {
  mkx_tp_ws *ws;
  int ring;           /* several ranks */
  size_t chunk;       /* bytes of one rank's K (and of its V) */
  size_t counter_off; /* the tile counter, in the workspace's data */
} attn_plan;

/* The engine's description of a call on this rank (ring pointers: NULL
 * without a plan, which is enough for the checks). */
static void desc_of(MKX_Comm c, const mkx_attn_args *a, const attn_plan *p,
                    mkx_attn_desc *d) {
  memset(d, 0, sizeof *d);
  d->batch = a->batch;
  d->seq_q = d->seq_k = a->seq_local;
  d->heads_q = a->heads_q;
  d->heads_kv = a->heads_kv;
  d->head_dim = a->head_dim;
  d->q = a->Q;
  d->k = a->K;
  d->v = a->V;
  d->o = a->O;
  d->lse = a->LSE;
  d->dtype = mkx_tp_gemm_type(a->dtype);
  d->causal = a->causal;
  d->scale = (float)a->scale;
  d->layout = a->layout;
  d->nchunks = 1;
  d->block_n = c->opt.attn_block_n == MKX_ATTN_BLOCK_128 ? 128
               : c->opt.attn_block_n == MKX_ATTN_BLOCK_192 && a->head_dim <= 64
                   ? 192
                   : 0;
  if (!p) return;
  const int me = c->place.local_rank;
  char *data = mkx_tp_ws_data(p->ws, me);
  d->tile_counter = (int *)(data + p->counter_off);
  if (!p->ring) return;
  d->nchunks = c->size;
  d->self = c->rank;
  d->k_ring = data;
  d->v_ring = data + (size_t)c->size * p->chunk;
  d->ready = mkx_tp_ws_flags(p->ws, me);
  d->ready_target = (const int *)(mkx_tp_ws_peer(p->ws, me) + MKX_TP_OFF_EPOCH);
}

int mkx_attn_gpu_check(MKX_Comm c, const void *args, const mkx_agreed *g) {
  const mkx_attn_args *a = args;
  (void)g;
  if (a->dtype != MKX_BF16 && a->dtype != MKX_FP16)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: GPU path takes bf16 and fp16 "
                     "only",
                     FN);
  if (c->size > 1) MKX_TRY(mkx_tp_node_ok(c, FN));
  mkx_attn_desc d;
  const char *why = NULL;
  desc_of(c, a, NULL, &d);
  if (!mkx_attn_supported(&d, &why))
    return mkx_error(MKX_ERR_UNSUPPORTED, "%s: GPU path: %s", FN, why);
  const int64_t kv = a->batch * a->seq_local * a->heads_kv * a->head_dim;
  if (kv >= (1ll << 31) / c->size)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: GPU path: every rank's K "
                     "together has 2^31 elements or more",
                     FN);
  return MKX_SUCCESS;
}

int mkx_attn_gpu_plan(MKX_Comm c, int op, const void *args, const mkx_agreed *g,
                      void **plan) {
  const mkx_attn_args *a = args;
  (void)op, (void)g;
  attn_plan *p = calloc(1, sizeof *p);
  if (!p) return mkx_error(MKX_ERR_NOMEM, "%s: plan", FN);
  p->ring = c->size > 1;
  p->chunk = (size_t)(a->batch * a->seq_local * a->heads_kv * a->head_dim) *
             MKX_Type_size(a->dtype);
  p->counter_off = p->ring ? 2 * (size_t)c->size * p->chunk : 0;
  /* agreed values only: every rank's pool takes the same decision */
  mkx_tp_need need = {1, c->size, p->counter_off + 256, 0};
  int rc = mkx_tp_ws_acquire(c, &need, &p->ws);
  if (rc != MKX_SUCCESS) {
    free(p);
    return rc;
  }
  *plan = p;
  return MKX_SUCCESS;
}

void mkx_attn_gpu_free(MKX_Comm c, void *plan) {
  attn_plan *p = plan;
  (void)c;
  if (!p) return;
  mkx_tp_ws_release(p->ws);
  free(p);
}

/* This rank's K and V into its slot of rank q's workspace, then the
 * epoch into q's flag of this rank, on stream s (stream order: the flag
 * after the data). */
static int push_chunk(MKX_Comm c, const attn_plan *p, const mkx_attn_args *a,
                      int q, cudaStream_t s) {
  const int lq = c->place.local_rank_of[q], me = c->place.local_rank;
  char *data = mkx_tp_ws_data(p->ws, lq);
  char *k = data + (size_t)c->rank * p->chunk;
  char *v = data + ((size_t)c->size + (size_t)c->rank) * p->chunk;
  MKX_TRY(mkx_cuda_rc(
      cudaMemcpyAsync(k, a->K, p->chunk, cudaMemcpyDeviceToDevice, s), FN,
      "copy of K"));
  MKX_TRY(mkx_cuda_rc(
      cudaMemcpyAsync(v, a->V, p->chunk, cudaMemcpyDeviceToDevice, s), FN,
      "copy of V"));
  const int *epoch = (const int *)(mkx_tp_ws_peer(p->ws, me) + MKX_TP_OFF_SRC);
  return mkx_cuda_rc(
      cudaMemcpyAsync(mkx_tp_ws_flags(p->ws, lq) + c->rank, epoch, sizeof(int),
                      cudaMemcpyDeviceToDevice, s),
      FN, "copy of a ready flag");
}

/* One side stream per peer, forked from and joined back into st. */
static int push_peers(MKX_Comm c, const attn_plan *p, const mkx_attn_args *a,
                      cudaStream_t st) {
  mkx_tp_ws *ws = p->ws;
  MKX_TRY(mkx_cuda_rc(cudaEventRecord(ws->ev_fork, st), FN, "fork"));
  for (int i = 1; i < c->size; i++) {
    cudaStream_t s = ws->side[i];
    MKX_TRY(
        mkx_cuda_rc(cudaStreamWaitEvent(s, ws->ev_fork, 0), FN, "fork wait"));
    MKX_TRY(push_chunk(c, p, a, (c->rank + i) % c->size, s));
    MKX_TRY(mkx_cuda_rc(cudaEventRecord(ws->ev_join[i], s), FN, "join"));
  }
  return MKX_SUCCESS;
}

int mkx_attn_gpu_start(MKX_Comm c, void *plan, const void *args,
                       MKX_Stream stream) {
  attn_plan *p = plan;
  const mkx_attn_args *a = args;
  cudaStream_t st = (cudaStream_t)stream;
  mkx_attn_desc d;
  mkx_tp_sync sync;
  MKX_TRY(mkx_tp_begin(c, p->ws, FN, stream, 1,
                       p->ring ? MKX_PATH_ATTN_RING : MKX_PATH_ATTN));
  if (p->ring) MKX_TRY(push_peers(c, p, a, st));
  desc_of(c, a, p, &d);
  mkx_tp_sync_fill(c, p->ws, 1, &sync);
  d.sync = &sync;
  MKX_TRY(mkx_tp_launch_rc(mkx_attn_run(&d, st), FN, "attention kernel"));
  for (int i = 1; p->ring && i < c->size; i++)
    MKX_TRY(mkx_cuda_rc(cudaStreamWaitEvent(st, p->ws->ev_join[i], 0), FN,
                        "join wait"));
  return mkx_tp_end(p->ws, stream);
}

static const mkx_path_ops attn_one = {MKX_PATH_ATTN, mkx_attn_gpu_plan,
                                      mkx_attn_gpu_start, mkx_attn_gpu_free};
static const mkx_path_ops attn_ring = {MKX_PATH_ATTN_RING, mkx_attn_gpu_plan,
                                       mkx_attn_gpu_start, mkx_attn_gpu_free};

int mkx_attn_gpu_choose(MKX_Comm c, const void *args, const mkx_agreed *g,
                        mkx_path_choice *out) {
  (void)args, (void)g;
  out->op = 0;
  out->ops = c->size > 1 ? &attn_ring : &attn_one;
  if (c->size > 1)
    snprintf(out->why, sizeof out->why,
             "%d ranks of one node: key/value "
             "chunks by the copy engine",
             c->size);
  else
    snprintf(out->why, sizeof out->why, "one rank");
  return MKX_SUCCESS;
}
#else
typedef int mkx_attn_gpu_unused; /* ISO C: not an empty unit */
#endif
