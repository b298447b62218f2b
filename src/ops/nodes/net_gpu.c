/* What the calls driven by the GPU across nodes share
 * (net_gpu.h). */
#include <string.h>
#include "core/error.h"

#if HAVE_CUDA
#include "core/comm_net.h"
#include "ops/nodes/net_gpu.h"

_Static_assert(MKX_COMM_NET_GPU_DWORDS >=
                   MKX_NET_WORD_SUM2 + MKX_FUSED_NET_MAXCH,
               "the device words hold two sums' chunk counts and the "
               "forward's words");

const char *mkx_net_ring_why_not(MKX_Comm c) {
  if (c->one_queue)
    return "CUDA_DEVICE_MAX_CONNECTIONS=1 on a rank (every stream in one "
           "hardware queue)";
  if (!mkx_comm_net_gpu(c)) return "no network ring mapped for the GPU";
  if (c->size > 32) return "driven by the GPU on at most 32 ranks";
  return NULL;
}

const char *mkx_net_fits_comm(MKX_Comm c) {
  if (c->opt.hier_gemm != MKX_HIER_GEMM_PROXY &&
      c->opt.hier_gemm != MKX_HIER_GEMM_AUTO)
    return "option hier_gemm is not proxy or auto";
  if (c->one_queue) return mkx_net_ring_why_not(c);
  if (c->place.num_nodes != c->size && !c->place.equal_nodes)
    return "nodes of unequal sizes";
  if (c->place.num_nodes != c->size && mkx_fused_share_why(c))
    return mkx_fused_share_why(c);
  if (c->size > MKX_FUSED_MAX) return "driven by the GPU on at most 8 ranks";
  if (!mkx_comm_net_gpu(c)) return "no network ring mapped for the GPU";
  return NULL;
}

uint32_t mkx_net_region_index(MKX_Comm c) {
  return c->opt.net_gpu_region == MKX_NET_REGION_AUTO &&
                 c->place.local_size > 1 && mkx_comm_net_stages_device(c)
             ? MKX_COMM_NET_GPU_HOST_REGION
             : MKX_COMM_NET_GPU_REGION;
}

void mkx_net_desc_fill(MKX_Comm c, mkx_fused_ws *ws, uint64_t *words,
                       mkx_fused_net_desc *d) {
  memset(d, 0, sizeof *d);
  mkx_proxy_gpu_dev(mkx_comm_net_gpu(c), &d->proxy);
  d->epoch = words;
  d->last_seq = words + 1;
  d->rank = c->rank;
  d->size = c->size;
  d->slot0 = mkx_comm_net_gpu_slot(c, 0);
  d->words = MKX_COMM_NET_GPU_WORDS;
  d->region = mkx_net_region_index(c);
  d->row_bytes = 1;
  d->chunk_tiles = 1;
  mkx_fused_sync_fill(c, ws, 0, &d->sync);
}

int mkx_net_plan_init(MKX_Comm c, size_t bytes, const mkx_fused_need *ws,
                      mkx_net_plan *n) {
  memset(n, 0, sizeof *n);
  n->bytes = bytes;
  mkx_fused_need need = {ws->src_n > 1 ? ws->src_n : 1,
                         ws->flags_n > 1 ? ws->flags_n : 1,
                         ws->data_bytes > 4096 ? ws->data_bytes : 4096, 0};
  n->src_n = (int)need.src_n;
  MKX_TRY(mkx_fused_ws_acquire(c, &need, &n->ws));
  void *base = NULL;
  n->index = mkx_net_region_index(c);
  const int rc = mkx_comm_net_gpu_region(c, n->index, bytes, &base, &n->words);
  if (rc != MKX_SUCCESS) {
    mkx_fused_ws_release(n->ws);
    n->ws = NULL;
    return rc;
  }
  n->region = base;
  return MKX_SUCCESS;
}

int mkx_net_plan_load(MKX_Comm c, mkx_net_plan *n, mkx_fused_net_desc *d,
                      const char *fn) {
  mkx_net_desc_fill(c, n->ws, n->words, d);
  MKX_TRY(mkx_fused_launch_rc(mkx_fused_prologue_load(), fn,
                              "loading the prologue"));
  return mkx_fused_launch_rc(mkx_fused_net_load(), fn, "loading its kernels");
}

void mkx_net_plan_fini(mkx_net_plan *n) {
  mkx_fused_ws_release(n->ws);
  n->ws = NULL;
}

int mkx_net_call_begin(MKX_Comm c, mkx_net_plan *n, MKX_Stream st,
                       const char *fn, mkx_fused_net_desc *d) {
  MKX_TRY(mkx_comm_net_gpu_after(c, st));
  void *base = NULL;
  MKX_TRY(mkx_comm_net_gpu_region(c, n->index, n->bytes, &base, &n->words));
  n->region = base;
  MKX_TRY(mkx_fused_begin(c, n->ws, fn, st, n->src_n, MKX_PATH_HIER_PROXY));
  mkx_net_desc_fill(c, n->ws, n->words, d);
  return mkx_tuner_begin(n->tune, (cudaStream_t)st, fn);
}

unsigned mkx_net_column_peers(MKX_Comm c) {
  unsigned m = 0;
  for (int q = 0; q < c->size; q++)
    if (c->place.node_of_rank[q] != c->place.node &&
        c->place.local_rank_of[q] == c->place.local_rank)
      m |= 1u << q;
  return m;
}

int mkx_net_fork(const mkx_fused_ws *ws, int side, cudaStream_t st,
                 const char *fn) {
  MKX_TRY(mkx_cuda_rc(cudaEventRecord(ws->ev_fork, st), fn, "fork"));
  return mkx_cuda_rc(cudaStreamWaitEvent(ws->side[side], ws->ev_fork, 0), fn,
                     "fork wait");
}

int mkx_net_join(const mkx_fused_ws *ws, int side, cudaStream_t st,
                 const char *fn) {
  MKX_TRY(mkx_cuda_rc(cudaEventRecord(ws->ev_join[side], ws->side[side]), fn,
                      "join"));
  return mkx_cuda_rc(cudaStreamWaitEvent(st, ws->ev_join[side], 0), fn,
                     "join wait");
}

int mkx_net_fwd_start(MKX_Comm c, mkx_fused_ws *ws, int side,
                      mkx_fused_net_desc *n, uint64_t *words,
                      mkx_fused_net_fwd_desc *f, mkx_tuner *t, cudaStream_t st,
                      const char *fn) {
  n->fwd_done = words + MKX_NET_WORD_FWD_DONE;
  f->net = *n;
  f->ndst = c->place.local_size;
  for (int i = 0; i < f->ndst; i++) {
    f->dst[i] = mkx_fused_ws_data(ws, i);
    f->flags[i] = mkx_fused_ws_flags(ws, i);
  }
  f->flag_epoch =
      mkx_fused_ws_word(ws, c->place.local_rank, MKX_FUSED_OFF_EPOCH);
  f->count = (unsigned *)(words + MKX_NET_WORD_FWD_COUNT);
  f->max_blocks = t->ctas;
  MKX_TRY(mkx_net_fork(ws, side, st, fn));
  MKX_TRY(mkx_tuner_role_begin(t, ws->side[side], fn));
  MKX_TRY(mkx_fused_launch_rc(mkx_fused_net_fwd(f, ws->side[side]), fn,
                              "network forward"));
  return mkx_tuner_role_end(t, ws->side[side], fn);
}

int mkx_net_fwd_join(const mkx_fused_ws *ws, int side, cudaStream_t st,
                     const char *fn) {
  enum cudaStreamCaptureStatus cap;
  MKX_TRY(mkx_cuda_rc(cudaStreamIsCapturing(st, &cap), fn,
                      "cudaStreamIsCapturing"));
  return cap == cudaStreamCaptureStatusNone ? MKX_SUCCESS
                                            : mkx_net_join(ws, side, st, fn);
}

int mkx_net_call_end(MKX_Comm c, mkx_net_plan *n, MKX_Stream st, const char *fn,
                     const mkx_fused_net_desc *d) {
  MKX_TRY(mkx_fused_launch_rc(mkx_fused_net_end(d, (cudaStream_t)st), fn,
                              "network drain"));
  MKX_TRY(mkx_comm_net_gpu_mark(c, st));
  MKX_TRY(mkx_tuner_end(n->tune, (cudaStream_t)st, fn));
  return mkx_fused_end(n->ws, st);
}
#else
typedef int mkx_net_gpu_unused; /* ISO C: not an empty unit */
#endif
