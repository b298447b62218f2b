/* MKX_Gemm_reduce_scatter / MKX_Gemm_allreduce: fused single-node GPU
 * path.  The engine computes this rank's partial A_r B_r, peers' rows
 * first, into a local staging buffer; the copy engines move each finished
 * chunk into its owner's receive slot (stream memory waits on the GEMM's
 * per-chunk counts), so the SMs never wait on NVLink.  Where the node's
 * ranks share one GPU (option tp_push) the epilogue stores the peers' rows
 * straight into their owners' slots instead: there a store is a local
 * memory write, while the copy engines, shared by every rank, were the
 * bottleneck (each copy reads and writes the rows once more).  The own rows come
 * last: their epilogue adds the peers' partials (same order every run) and
 * rounds once into C.  Allreduce: the same epilogue stores the rounded own
 * rows into every peer's C too.  Tile rows shared by two owners
 * go through a small kernel after the GEMM.  Kernels: kernels/tp/gemm_rs.cu.
 * Small products take the split path instead (option tp_overlap): the plain
 * engine GEMM into the workspace, then one kernel that sums each owner's
 * rows of every rank's partial over NVLink (kernels/tp/split.cu). */
#include <stdlib.h>
#include <string.h>
#include "core/error.h"
#include "core/log.h"
#include "host/dtype.h"
#include "ops/op.h"

#if HAVE_CUDA
#include "ops/fused/fused.h"
#include "gemm/gemm_engine.h"

typedef struct rs_ar_plan {
  mkx_fused_ws *ws;
  int allreduce, p_type, split, push_sm, pull;
  size_t pes, ces; /* bytes per partial / C element */
  int64_t bnd[MKX_FUSED_MAX + 1], count_max;
  mkx_tp_rs_layout L;
  size_t slots_off, stage_off, late_off; /* in the workspace's data */
  mkx_symm_buf creg;                     /* allreduce: every rank's C */
  int64_t peer_ldc[MKX_FUSED_MAX];
  mkx_symm_buf areg, breg; /* pull: every rank's A and B */
  int64_t peer_lda[MKX_FUSED_MAX], peer_ldb[MKX_FUSED_MAX],
      peer_k[MKX_FUSED_MAX];
  int fp8;              /* split path: the fp8 GEMM into the partial */
  mkx_tp_fp8_host host; /* this rank's count of scales */
} rs_ar_plan;

static const char *fn_name(int allreduce) {
  return allreduce ? "MKX_Gemm_allreduce" : "MKX_Gemm_reduce_scatter";
}
static int is16(MKX_Datatype t) { return t == MKX_BF16 || t == MKX_FP16; }

static int check(MKX_Comm c, const mkx_rs_ar_args *a, int allreduce,
                 int captured) {
  const char *fn = fn_name(allreduce);
  MKX_TRY(mkx_fused_node_ok(c, fn));
  if (mkx_is_fp8(a->dtype))
    return mkx_tp_fp8_check(fn, allreduce ? MKX_TP_OP_AR : MKX_TP_OP_RS, a,
                            a->M, captured);
  if (!is16(a->dtype) || (!is16(a->ctype) && a->ctype != MKX_FP32))
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: fused path takes bf16/fp16 "
                     "A, B and bf16/fp16/fp32 C only",
                     fn);
  const char *why =
      c->opt.fused_pad
          ? NULL
          : mkx_tp_adapt_misfit(allreduce ? MKX_TP_OP_AR : MKX_TP_OP_RS, a);
  if (why)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: fused path: %s (option "
                     "fused_pad=yes copies such operands)",
                     fn, why);
  if (a->M >= (1ll << 31) || a->n >= (1ll << 31) - 8 ||
      a->k_local >= (1ll << 31) - 8)
    return mkx_error(MKX_ERR_UNSUPPORTED, "%s: sizes >= 2^31", fn);
  return MKX_SUCCESS;
}

static int gpu_check(MKX_Comm c, const mkx_rs_ar_args *a, int allreduce,
                     const struct mkx_agreed *g) {
  if (c->place.num_nodes > 1)
    return mkx_hier_gpu_check(c, allreduce ? MKX_TP_OP_AR : MKX_TP_OP_RS, a, g);
  return check(c, a, allreduce, g->captured);
}
int mkx_rs_gpu_check(MKX_Comm c, const void *args, const struct mkx_agreed *g) {
  return gpu_check(c, args, 0, g);
}
int mkx_ar_gpu_check(MKX_Comm c, const void *args, const struct mkx_agreed *g) {
  return gpu_check(c, args, 1, g);
}

/* Allreduce: map every rank's C and learn its leading dimension. */
static int register_c(MKX_Comm c, const mkx_rs_ar_args *a, rs_ar_plan *p) {
  MKX_TRY(mkx_tp_node_values(c, &a->ldc, 1, p->peer_ldc));
  return mkx_tp_map_matrix(c, a->C, a->M, a->n, a->ldc, MKX_Type_size(a->ctype),
                           &p->creg);
}

/* Pull: map every rank's A and B and learn their shapes. */
static int register_ab(MKX_Comm c, const mkx_rs_ar_args *a, rs_ar_plan *p) {
  const int64_t mine[3] = {a->lda, a->ldb, a->k_local};
  int64_t all[3 * MKX_FUSED_MAX];
  MKX_TRY(mkx_tp_node_values(c, mine, 3, all));
  for (int lq = 0; lq < c->place.local_size; lq++) {
    p->peer_lda[lq] = all[3 * lq];
    p->peer_ldb[lq] = all[3 * lq + 1];
    p->peer_k[lq] = all[3 * lq + 2];
  }
  const size_t es = MKX_Type_size(a->dtype);
  const int bt = a->transb == MKX_TRANS;
  MKX_TRY(mkx_tp_map_matrix(c, a->A, a->M, a->k_local, a->lda, es, &p->areg));
  return mkx_tp_map_matrix(c, a->B, bt ? a->n : a->k_local,
                           bt ? a->k_local : a->n, a->ldb, es, &p->breg);
}

static size_t align256(size_t x) { return (x + 255) / 256 * 256; }

/* Partials travel in C's type (option tp_partials=out, the default: the
 * precision of cuBLAS followed by NCCL) or in fp32. */
static int partial_type(MKX_Comm c, const mkx_rs_ar_args *a) {
  if (a->ctype == MKX_FP32 || c->opt.tp_partials == MKX_PARTIALS_FP32)
    return MKX_GEMM_FP32;
  return mkx_fused_gemm_type(a->ctype);
}

/* Data of the workspace: receive slots (one per source, of the largest
 * block), the staging of every row but the smallest block, late rows. */
static size_t layout_data(MKX_Comm c, const mkx_rs_ar_args *a, rs_ar_plan *p) {
  const int64_t count_min = p->bnd[c->size] - p->bnd[c->size - 1];
  p->count_max = p->bnd[1] - p->bnd[0]; /* block 0 is the largest */
  p->slots_off = 0;
  p->stage_off =
      align256((size_t)c->size * (size_t)p->count_max * (size_t)a->n * p->pes);
  p->late_off = p->stage_off +
                align256((size_t)(a->M - count_min) * (size_t)a->n * p->pes);
  return p->late_off + (size_t)p->L.nlate * 128 * (size_t)a->n * 4;
}

/* The workspace of either path; split: it holds this rank's whole
 * partial. */
static int acquire(MKX_Comm c, const mkx_rs_ar_args *a, rs_ar_plan *p,
                   int split) {
  mkx_fused_need need = {1, 0, p->pull ? 0 : layout_data(c, a, p), 0};
  if (split)
    need = (mkx_fused_need){0, 0, (size_t)a->M * (size_t)a->n * p->pes, 1};
  p->split = split;
  return mkx_fused_ws_acquire(c, &need, &p->ws);
}

/* Pull: the peers must map this rank's A and B; where some rank's cannot
 * be (the registration's failure is agreed) every rank moves partials
 * instead, with a workspace of the size that takes. */
static int pull_or_push(MKX_Comm c, const mkx_rs_ar_args *a, rs_ar_plan *p) {
  int rc = register_ab(c, a, p);
  if (rc == MKX_SUCCESS || c->broken) return rc;
  mkx_log(MKX_LOG_INFO,
          "%s: A or B cannot be mapped into the node's peers (%s): partials "
          "move instead",
          fn_name(p->allreduce), MKX_Get_last_error());
  mkx_symm_buf_free(&p->areg);
  mkx_symm_buf_free(&p->breg);
  mkx_fused_ws_release(p->ws);
  p->pull = 0;
  return acquire(c, a, p, 0);
}

static int plan(MKX_Comm c, const mkx_rs_ar_args *a, int allreduce,
                mkx_path path, void **out) {
  const int split = path == MKX_PATH_TP_SPLIT;
  rs_ar_plan *p = calloc(1, sizeof *p);
  if (!p) return mkx_error(MKX_ERR_NOMEM, "%s: plan", fn_name(allreduce));
  p->allreduce = allreduce;
  for (int q = 0; q < c->size; q++) {
    int64_t first, count;
    MKX_Block_range(a->M, c->size, q, &first, &count);
    p->bnd[q] = first;
    p->bnd[q + 1] = first + count;
  }
  p->p_type = partial_type(c, a);
  p->pes = p->p_type == MKX_GEMM_FP32 ? 4 : 2;
  p->push_sm = c->opt.tp_push == MKX_PUSH_SM ||
               (c->opt.tp_push == MKX_PUSH_AUTO && c->share.node_gpu);
  p->pull = path == MKX_PATH_TP_PULL;
  p->ces = MKX_Type_size(a->ctype);
  mkx_tp_rs_layout_make(a->M, a->n, c->size, p->bnd, mkx_tp_rs_bn(a->n), &p->L);
  p->fp8 = mkx_is_fp8(a->dtype);
  int rc = p->fp8 ? mkx_tp_fp8_host_make(
                        &p->host, allreduce ? MKX_TP_OP_AR : MKX_TP_OP_RS, a, 0,
                        fn_name(allreduce))
                  : MKX_SUCCESS;
  if (rc == MKX_SUCCESS) rc = acquire(c, a, p, split);
  /* The overlapped allreduce stores into the peers' C: a C the peers
   * cannot map (say, carved by the driver out of a block that another
   * mapped buffer of this rank lies in) takes the split path, which maps
   * no user buffer.  The registration's failure is agreed, so every rank
   * switches. */
  if (rc == MKX_SUCCESS && allreduce && !p->split) {
    rc = register_c(c, a, p);
    if (rc != MKX_SUCCESS && !c->broken) {
      mkx_log(MKX_LOG_INFO,
              "%s: C cannot be mapped into the node's peers "
              "(%s): split path",
              fn_name(1), MKX_Get_last_error());
      mkx_fused_ws_release(p->ws);
      p->pull = 0;
      rc = acquire(c, a, p, 1);
    } else if (rc != MKX_SUCCESS) {
      mkx_fused_ws_release(p->ws);
    }
  }
  if (rc == MKX_SUCCESS && p->pull) rc = pull_or_push(c, a, p);
  if (rc != MKX_SUCCESS) {
    mkx_tp_fp8_host_free(&p->host);
    free(p);
    return rc;
  }
  *out = p;
  return MKX_SUCCESS;
}

int mkx_rs_ar_gpu_plan(MKX_Comm c, int op, const void *args, mkx_path path,
                       void **out) {
  return plan(c, args, op == MKX_TP_OP_AR, path, out);
}

/* fp8 takes no adapter: mkx_tp_fp8_check */
unsigned mkx_rs_gpu_local(MKX_Comm c, const void *args,
                          const struct mkx_agreed *g) {
  if (mkx_is_fp8(((const mkx_rs_ar_args *)args)->dtype)) return 0;
  return mkx_tp_adapt_local(c, MKX_TP_OP_RS, args, g) ? MKX_GPU_LOCAL_ADAPT : 0;
}
unsigned mkx_ar_gpu_local(MKX_Comm c, const void *args,
                          const struct mkx_agreed *g) {
  if (mkx_is_fp8(((const mkx_rs_ar_args *)args)->dtype)) return 0;
  return mkx_tp_adapt_local(c, MKX_TP_OP_AR, args, g) ? MKX_GPU_LOCAL_ADAPT : 0;
}
void mkx_rs_ar_gpu_free(MKX_Comm c, void *plan) {
  rs_ar_plan *p = plan;
  (void)c;
  if (!p) return;
  mkx_fused_ws_release(p->ws);
  mkx_symm_buf_free(&p->creg);
  mkx_symm_buf_free(&p->areg);
  mkx_symm_buf_free(&p->breg);
  mkx_tp_fp8_host_free(&p->host);
  free(p);
}

static char *data_of(const rs_ar_plan *p, int local_rank, size_t off) {
  return mkx_fused_ws_data(p->ws, local_rank) + off;
}
static int run_gemm(MKX_Comm c, const rs_ar_plan *p, const mkx_rs_ar_args *a,
                    cudaStream_t st) {
  const int me = c->place.local_rank;
  mkx_tp_rs_desc d;
  memset(&d, 0, sizeof d);
  d.m = a->M;
  d.n = a->n;
  d.k = a->k_local;
  d.a = a->A;
  d.lda = a->lda;
  d.b = a->B;
  d.ldb = a->ldb;
  d.b_kmajor = a->transb == MKX_TRANS;
  d.ab_type = mkx_fused_gemm_type(a->dtype);
  d.p_type = p->p_type;
  d.c_type = mkx_fused_gemm_type(a->ctype);
  d.size = c->size;
  d.rank = c->rank;
  d.allreduce = p->allreduce;
  memcpy(d.bnd, p->bnd, sizeof d.bnd);
  d.layout = p->L;
  d.stage = data_of(p, me, p->stage_off);
  d.slots = data_of(p, me, p->slots_off);
  d.slot_stride = p->count_max * a->n;
  d.late = (float *)data_of(p, me, p->late_off);
  d.c = a->C;
  d.ldc = a->ldc;
  d.c_row0 = p->allreduce ? 0 : p->bnd[c->rank];
  d.counters = mkx_fused_ws_word(p->ws, me, MKX_FUSED_OFF_COUNTERS);
  d.arrived = mkx_fused_ws_word(p->ws, me, MKX_FUSED_OFF_ARRIVED);
  d.epoch = mkx_fused_ws_word(p->ws, me, MKX_FUSED_OFF_EPOCH);
  mkx_fused_sync_fill(c, p->ws, 0, &d.sync);
  for (int q = 0; p->allreduce && q < c->size; q++) {
    const int lq = c->place.local_rank_of[q];
    d.peer_c[q] = p->creg.peer[lq];
    d.peer_ldc[q] = p->peer_ldc[lq];
    d.peer_done[q] = mkx_fused_ws_word(p->ws, lq, MKX_FUSED_OFF_DONE);
  }
  d.push_sm = p->push_sm;
  for (int q = 0; p->push_sm && q < c->size; q++) {
    const int lq = c->place.local_rank_of[q];
    d.peer_slot[q] = data_of(p, lq, p->slots_off) + (size_t)c->rank *
                                                        (size_t)p->count_max *
                                                        (size_t)a->n * p->pes;
    d.peer_counters[q] = mkx_fused_ws_word(p->ws, lq, MKX_FUSED_OFF_COUNTERS);
  }
  return mkx_fused_launch_rc(mkx_tp_rs_gemm(&d, st), fn_name(p->allreduce),
                             "GEMM with staged partials");
}

static int cuda_rc(cudaError_t e, const rs_ar_plan *p, const char *what) {
  return mkx_cuda_rc(e, fn_name(p->allreduce), what);
}

/* Copy engine, one step: wait for the GEMM's count of a chunk, copy it,
 * copy the epoch (src[0], written by the prologue: graph-safe) into the
 * destination's flag after it (stream order). */
static int wait_count(const rs_ar_plan *p, int me, int q, int ch,
                      cudaStream_t s) {
  int *cnt = mkx_fused_ws_word(p->ws, me, MKX_FUSED_OFF_COUNTERS) +
             q * MKX_FUSED_MAXCH + ch;
  return mkx_fused_launch_rc(
      mkx_fused_stream_wait_geq(s, cnt, mkx_tp_rs_chunk_subtiles(&p->L, q, ch)),
      fn_name(p->allreduce), "stream wait on a chunk count");
}
static int copy_flag(const rs_ar_plan *p, int me, int *dst, cudaStream_t s) {
  const int *src = mkx_fused_ws_word(p->ws, me, MKX_FUSED_OFF_SRC);
  return cuda_rc(
      cudaMemcpyAsync(dst, src, sizeof(int), cudaMemcpyDeviceToDevice, s), p,
      "copy of a ready flag");
}

/* This rank's partials of owner q's chunks into q's slot [rank]. */
static int push_partials(MKX_Comm c, const rs_ar_plan *p, int q, int64_t n,
                         cudaStream_t s) {
  const int me = c->place.local_rank, lq = c->place.local_rank_of[q];
  const int64_t own = p->bnd[c->rank + 1] - p->bnd[c->rank];
  const size_t row = (size_t)n * p->pes;
  for (int ch = 0; ch < p->L.nchunk[q]; ch++) {
    int64_t r0, r1;
    mkx_tp_rs_chunk_rows(&p->L, p->bnd[c->size], p->bnd, q, ch, &r0, &r1);
    const int64_t srow = r0 >= p->bnd[c->rank] ? r0 - own : r0;
    const int64_t drow = c->rank * p->count_max + (r0 - p->bnd[q]);
    MKX_TRY(wait_count(p, me, q, ch, s));
    MKX_TRY(cuda_rc(
        cudaMemcpyAsync(data_of(p, lq, p->slots_off) + (size_t)drow * row,
                        data_of(p, me, p->stage_off) + (size_t)srow * row,
                        (size_t)(r1 - r0) * row, cudaMemcpyDeviceToDevice, s),
        p, "copy of partial rows"));
    MKX_TRY(copy_flag(p, me,
                      mkx_fused_ws_word(p->ws, lq, MKX_FUSED_OFF_ARRIVED) +
                          c->rank * MKX_FUSED_MAXCH + ch,
                      s));
  }
  return MKX_SUCCESS;
}

/* Side stream i serves rank + i.  Allreduce: the GEMM's epilogue stores the
 * own rows into q's C and sets q's done[me]; with no clean own rows it
 * never would, so the side stream does. */
static int copy_engines(MKX_Comm c, const rs_ar_plan *p,
                        const mkx_rs_ar_args *a) {
  mkx_fused_ws *ws = p->ws;
  const int me = c->place.local_rank;
  for (int i = 1; i < c->size; i++) {
    cudaStream_t s = ws->side[i];
    const int q = (c->rank + i) % c->size, lq = c->place.local_rank_of[q];
    MKX_TRY(cuda_rc(cudaStreamWaitEvent(s, ws->ev_fork, 0), p, "fork wait"));
    MKX_TRY(push_partials(c, p, q, a->n, s));
    if (p->allreduce && p->L.nchunk[c->rank] == 0)
      MKX_TRY(copy_flag(
          p, me, mkx_fused_ws_word(p->ws, lq, MKX_FUSED_OFF_DONE) + me, s));
    MKX_TRY(cuda_rc(cudaEventRecord(ws->ev_join[i], s), p, "join"));
  }
  return MKX_SUCCESS;
}

static int join(MKX_Comm c, const rs_ar_plan *p, cudaStream_t st) {
  for (int i = 1; i < c->size; i++)
    MKX_TRY(
        cuda_rc(cudaStreamWaitEvent(st, p->ws->ev_join[i], 0), p, "join wait"));
  return MKX_SUCCESS;
}

static int run_late(MKX_Comm c, const rs_ar_plan *p, const mkx_rs_ar_args *a,
                    cudaStream_t st) {
  mkx_tp_late_desc d;
  memset(&d, 0, sizeof d);
  d.m = a->M;
  d.n = a->n;
  d.rank = c->rank;
  memcpy(d.bnd, p->bnd, sizeof d.bnd);
  d.nlate = p->L.nlate;
  memcpy(d.late_tm, p->L.late_tm, sizeof d.late_tm);
  for (int q = 0; q < c->size; q++) {
    const int lq = c->place.local_rank_of[q];
    d.late[q] = (const float *)data_of(p, lq, p->late_off);
    if (p->allreduce) {
      d.peer_c[q] = p->creg.peer[lq];
      d.peer_ldc[q] = p->peer_ldc[lq];
    }
  }
  d.c_type = mkx_fused_gemm_type(a->ctype);
  d.allreduce = p->allreduce;
  d.c = a->C;
  d.ldc = a->ldc;
  d.c_row0 = p->allreduce ? 0 : p->bnd[c->rank];
  mkx_fused_sync_fill(c, p->ws, 0, &d.sync);
  return mkx_fused_launch_rc(mkx_tp_rs_late(&d, st), fn_name(p->allreduce),
                             "late rows kernel");
}

/* The split path: the partial into the workspace (the engine, or cuBLAS:
 * option tp_split_gemm; fp8: the engine's fp8 GEMM with this rank's
 * scales), then the one-shot sum. */
static int run_split(MKX_Comm c, const rs_ar_plan *p, const mkx_rs_ar_args *a,
                     cudaStream_t st) {
  const char *fn = fn_name(p->allreduce);
  mkx_gemm_desc g;
  mkx_tp_gemm_of_red(a, data_of(p, c->place.local_rank, 0), p->p_type, &g);
  if (p->fp8) {
    const mkx_gemm_scales s = mkx_tp_fp8_engine_scales(&a->sc, a->k_local);
    MKX_TRY(mkx_tp_fp8_gemm(c, &g, &s, st, fn));
  } else {
    MKX_TRY(mkx_tp_split_gemm(c, &g, st, fn));
  }
  mkx_tp_split_red_desc d;
  memset(&d, 0, sizeof d);
  d.m = a->M;
  d.n = a->n;
  d.r0 = p->allreduce ? 0 : p->bnd[c->rank];
  d.r1 = p->allreduce ? a->M : p->bnd[c->rank + 1];
  for (int q = 0; q < c->size; q++) /* rank order: the order of the sum */
    d.part[q] = data_of(p, c->place.local_rank_of[q], 0);
  d.p_type = p->p_type;
  d.c_type = mkx_fused_gemm_type(a->ctype);
  d.c = a->C;
  d.ldc = a->ldc;
  d.c_row0 = d.r0;
  mkx_fused_sync_fill(c, p->ws, 0, &d.sync);
  return mkx_fused_launch_rc(mkx_tp_split_reduce(&d, st), fn,
                             "sum of the partials");
}

/* A graph may replay the stores into the peers' C, and the loads from
 * their A and B, long after this call: those mappings must outlive the
 * plan. */
static int pin_if_captured(MKX_Comm c, const rs_ar_plan *p, cudaStream_t st) {
  const mkx_symm_buf *maps[] = {&p->creg, &p->areg, &p->breg};
  return mkx_tp_pin_if_captured(c, st, fn_name(p->allreduce), maps, 3);
}

/* SM pushes: the GEMM stores and counts the peers' rows itself; an
 * allreduce rank without clean own rows tells its peers at once (no own
 * sub-tile would). */
static int push_sm(MKX_Comm c, const rs_ar_plan *p, const mkx_rs_ar_args *a,
                   cudaStream_t st) {
  const int me = c->place.local_rank;
  MKX_TRY(run_gemm(c, p, a, st));
  for (int q = 0; p->allreduce && p->L.nchunk[c->rank] == 0 && q < c->size;
       q++) {
    const int lq = c->place.local_rank_of[q];
    if (q != c->rank)
      MKX_TRY(copy_flag(
          p, me, mkx_fused_ws_word(p->ws, lq, MKX_FUSED_OFF_DONE) + me, st));
  }
  return MKX_SUCCESS;
}

/* Pull: this rank's rows over the whole K from every rank's A and B, then
 * a meet, after which no rank reads a peer's operands (they may change)
 * and every C is whole. */
static int pull(MKX_Comm c, const rs_ar_plan *p, const mkx_rs_ar_args *a,
                cudaStream_t st) {
  const int me = c->rank;
  mkx_tp_pull_desc d;
  memset(&d, 0, sizeof d);
  d.size = c->size;
  d.rank = me;
  d.m = a->M;
  d.n = a->n;
  d.row0 = p->bnd[me];
  d.rows = p->bnd[me + 1] - p->bnd[me];
  for (int q = 0; q < c->size; q++) {
    const int lq = c->place.local_rank_of[q];
    d.a[q] = p->areg.peer[lq];
    d.b[q] = p->breg.peer[lq];
    d.lda[q] = p->peer_lda[lq];
    d.ldb[q] = p->peer_ldb[lq];
    d.k[q] = p->peer_k[lq];
    if (p->allreduce && q != me)
      d.peer_c[q] = (char *)p->creg.peer[lq] +
                    (size_t)d.row0 * (size_t)p->peer_ldc[lq] * p->ces;
    d.peer_ldc[q] = p->peer_ldc[lq];
  }
  d.b_kmajor = a->transb == MKX_TRANS;
  d.ab_type = mkx_fused_gemm_type(a->dtype);
  d.c_type = mkx_fused_gemm_type(a->ctype);
  d.bn = mkx_tp_rs_bn(a->n);
  d.c = (char *)a->C +
        (p->allreduce ? (size_t)d.row0 * (size_t)a->ldc * p->ces : 0);
  d.ldc = a->ldc;
  d.allreduce = p->allreduce;
  d.told = mkx_fused_ws_word(p->ws, c->place.local_rank, MKX_FUSED_OFF_TOLD);
  /* it waits for no one, so it may hold every SM the rank has: nothing of
   * this rank's can be queued behind it that it waits for */
  d.ctas = c->share.ctx_sms;
  const char *fn = fn_name(p->allreduce);
  MKX_TRY(mkx_fused_launch_rc(mkx_tp_rs_pull(&d, st), fn,
                              "GEMM on the peers' operands"));
  return mkx_tp_pull_end(c, p->ws, fn, st);
}

/* Copy engines: forked before the GEMM, they run alongside it. */
static int push_copy(MKX_Comm c, const rs_ar_plan *p, const mkx_rs_ar_args *a,
                     cudaStream_t st) {
  MKX_TRY(cuda_rc(cudaEventRecord(p->ws->ev_fork, st), p, "fork"));
  MKX_TRY(run_gemm(c, p, a, st));
  return copy_engines(c, p, a);
}

int mkx_rs_ar_gpu_start(MKX_Comm c, void *plan, const void *args,
                        MKX_Stream stream) {
  rs_ar_plan *p = plan;
  const mkx_rs_ar_args *a = args;
  const char *fn = fn_name(p->allreduce);
  cudaStream_t st = (cudaStream_t)stream;
  if (p->split) {
    if (p->fp8)
      MKX_TRY(mkx_tp_fp8_scales_ok(c, &p->host, &a->sc, p->ws, fn, st));
    MKX_TRY(mkx_fused_begin_split(c, p->ws, fn, stream));
    MKX_TRY(run_split(c, p, a, st));
    return mkx_fused_end(p->ws, stream);
  }
  MKX_TRY(mkx_fused_begin(c, p->ws, fn, stream, 1,
                          p->pull ? MKX_PATH_TP_PULL : MKX_PATH_TP_OVERLAP));
  if (p->allreduce || p->pull) MKX_TRY(pin_if_captured(c, p, st));
  if (p->pull) {
    MKX_TRY(pull(c, p, a, st));
    return mkx_fused_end(p->ws, stream);
  }
  MKX_TRY(p->push_sm ? push_sm(c, p, a, st) : push_copy(c, p, a, st));
  if (p->L.nlate > 0) MKX_TRY(run_late(c, p, a, st));
  if (!p->push_sm) MKX_TRY(join(c, p, st));
  if (p->allreduce && c->size > 1) {
    mkx_fused_sync s;
    mkx_fused_sync_fill(c, p->ws, 0, &s);
    MKX_TRY(mkx_fused_launch_rc(mkx_tp_ar_wait(&s, p->L.nlate > 0, st), fn,
                                "allreduce wait"));
  }
  return mkx_fused_end(p->ws, stream);
}
#else
typedef int mkx_rs_ar_gpu_unused; /* ISO C: not an empty unit */
#endif
