/*
 * Host side of every fused path (src/ops/fused/workspace.c): the pool of
 * symmetric workspaces each communicator keeps, call begin and end, and
 * helpers the paths share (mkx_fused_*), with those of the three
 * tensor-parallel calls (mkx_tp_*).  C11; only built with CUDA.
 */
#ifndef MKX_OPS_FUSED_FUSED_H
#define MKX_OPS_FUSED_FUSED_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include "core/comm.h"
#include "core/cuda_rc.h"
#include "mem/symm.h"
#include "ops/path.h"
#include "fused/fused.h"
#include "fused/net.h"
#include "tp/tp.h"
#include "gemm/gemm_engine.h"

/* What a call needs of a workspace (ints of src[] and flags[], data bytes,
 * and which path: the split path's workspaces are kept apart, see tp.h). */
typedef struct mkx_fused_need {
  int64_t src_n, flags_n;
  size_t data_bytes;
  int split;
} mkx_fused_need;

#define MKX_FUSED_SIDES (MKX_FUSED_MAX + 1)

/* One symmetric workspace.  Held by one plan (or one plain call) at a time,
 * so plans never share flags; returned to the communicator's pool after. */
typedef struct mkx_fused_ws {
  mkx_symm_buf buf; /* local base and node peers' mappings */
  size_t bytes, flags_off, data_off;
  int64_t src_cap, flags_cap;
  int dumped; /* its flag words were logged (debug) */
  /* host-mapped error word (MKX_FUSED_ERR_WORDS ints), and after it the
   * fp8 scales scan's results (mkx_fused_scales_scan's first[]) */
  int *err_host, *err_dev;
  long long *scan_host, *scan_dev;
  /* side streams, one per node rank (the copy engines' pushes) and one
   * more (the network forward: side[local_size]); made for the node's
   * ranks only, whatever the communicator's size */
  cudaStream_t side[MKX_FUSED_SIDES];
  cudaEvent_t ev_fork, ev_join[MKX_FUSED_SIDES], ev_last;
  void *last_stream; /* stream of the last call (serialisation) */
  int used, busy, split;
  int graph;     /* handed to a call captured into a CUDA graph: busy
                     until the communicator is freed (replays use it) */
  MKX_Comm comm; /* owner: options, and ranks in messages */
  const mkx_symm_buf *records; /* the communicator's start records
                                  (kernels/fused/fused.h), the pool's */
  unsigned ident; /* the run the host started last (mkx_run_ident) */
  const char *fn; /* the call that last started on it */
  long starts;    /* runs the host started on it (a graph's replays aside) */
  /* the message of a bad input a run found on the GPU
   * (kernels/fused/fused.h, MKX_FUSED_ERR_INPUT): set by the path that
   * records one */
  int (*input_error)(const int *rec, const char *head);
  struct mkx_fused_ws *next;
} mkx_fused_ws;

/* 1 if this communicator can take a single-node fused path, else 0 with a
 * reason in the error state (MKX_ERR_UNSUPPORTED). */
int mkx_fused_node_ok(MKX_Comm c, const char *fn);
/* Why ranks of a node that share a GPU stay off the fused paths, or NULL:
 * option shared_gpu=staged, or under MPS a rank without SMs of its own
 * (share.unsafe) and shared_gpu=auto.  _ok: the same as
 * MKX_ERR_UNSUPPORTED. */
const char *mkx_fused_share_why(MKX_Comm c);
int mkx_fused_share_ok(MKX_Comm c, const char *fn);

/* Collective: a free workspace of the pool that fits `need` (allocating or
 * replacing one where none fits; every rank's pool is in the same state, so
 * every rank takes the same decision).  Marks it busy.  The split path's
 * cuBLAS handle (option tp_split_gemm=cublas) is made here too, never in
 * a start.  While c->capturing (a call captured on every rank, agreed)
 * nothing is made: no free workspace that fits (or no handle) is
 * MKX_ERR_UNSUPPORTED, and the one handed out stays busy for good. */
int mkx_fused_ws_acquire(MKX_Comm c, const mkx_fused_need *need,
                         mkx_fused_ws **ws);
/* Local: back to the pool (the stream keeps ordering its in-flight use),
 * unless a captured call holds it (once its plan is made). */
void mkx_fused_ws_release(mkx_fused_ws *ws);

/* Local pointers into a rank's workspace; mkx_fused_ws_word: the int at
 * byte offset `off` of its header (MKX_FUSED_OFF_*). */
char *mkx_fused_ws_peer(const mkx_fused_ws *ws, int local_rank);
int *mkx_fused_ws_word(const mkx_fused_ws *ws, int local_rank, size_t off);
int *mkx_fused_ws_flags(const mkx_fused_ws *ws, int local_rank);
char *mkx_fused_ws_data(const mkx_fused_ws *ws, int local_rank);

/* The sync descriptor every kernel of a call takes. */
void mkx_fused_sync_fill(MKX_Comm c, const mkx_fused_ws *ws, int src_n,
                         mkx_fused_sync *s);

/* Start of gpu_start: report an earlier timeout on any workspace of the
 * communicator (MKX_ERR_TIMEOUT naming rank and tile), order the call after
 * the last one on another stream, count a start on `path` and enqueue the
 * prologue. */
int mkx_fused_begin(MKX_Comm c, mkx_fused_ws *ws, const char *fn, MKX_Stream st,
                    int src_n, mkx_path path);
/* The same for the split path: no prologue (its kernels meet the peers). */
int mkx_fused_begin_split(MKX_Comm c, mkx_fused_ws *ws, const char *fn,
                          MKX_Stream st);
/* The same counting `path` (a path whose kernels meet the peers too). */
int mkx_fused_begin_met(MKX_Comm c, mkx_fused_ws *ws, const char *fn,
                        MKX_Stream st, mkx_path path);
/* Split rather than overlap a call of M product rows (agreed values only,
 * so every rank decides alike; options shared_gpu, tp_overlap), and why. */
int mkx_tp_split_why(MKX_Comm c, int64_t M, char *why, size_t len);
/* Operands read in place (ops/fused/in_place.c).  Whether the overlapped
 * calls read the node ranks' A and B in place (option tp_pull; agreed
 * values only, so every rank decides alike). */
int mkx_tp_wants_pull(MKX_Comm c);
/* Collective: every rank's n values, out[local rank * n + i]. */
int mkx_tp_node_values(MKX_Comm c, const int64_t *mine, int n, int64_t *out);
/* Collective: this rank's rows x cols matrix (leading dimension ld,
 * elements of es bytes) mapped into its node peers (mkx_symm_register). */
int mkx_tp_map_matrix(MKX_Comm c, const void *p, int64_t rows, int64_t cols,
                      int64_t ld, size_t es, mkx_symm_buf *b);
/* While st is being captured into a CUDA graph: keep the n mappings open
 * until the communicator is freed (the graph may replay any time). */
int mkx_tp_pin_if_captured(MKX_Comm c, cudaStream_t st, const char *fn,
                           const mkx_symm_buf *const *bufs, int n);
/* End of a run that read the ranks' operands in place: meet the node's
 * ranks at `pulled`, after which none reads another's operands. */
int mkx_tp_pull_end(MKX_Comm c, const mkx_fused_ws *ws, const char *fn,
                    cudaStream_t st);
/* Order work on `st` after the last call on `ws` if that ran on another
 * stream (outside graph capture). */
int mkx_fused_after_last(mkx_fused_ws *ws, const char *fn, MKX_Stream st);
/* End of gpu_start: remember the stream for the next call.  With option
 * blocking (and the stream not being captured) wait for the run and return
 * its own status: MKX_ERR_TIMEOUT naming rank and tile, or MKX_ERR_CUDA. */
int mkx_fused_end(mkx_fused_ws *ws, MKX_Stream st);

/* A plain GEMM of a call: AG: the gathered A (M rows, dense, in `a`) times
 * B into C; RS/AR: A times B into a dense partial `c` of c_type. */
struct mkx_ag_gemm_args;
struct mkx_rs_ar_args;
void mkx_tp_gemm_of_ag(const struct mkx_ag_gemm_args *args, const void *a,
                       int64_t M, mkx_gemm_desc *d);
void mkx_tp_gemm_of_red(const struct mkx_rs_ar_args *args, void *c, int c_type,
                        mkx_gemm_desc *d);

/* The split path's GEMM (g as for mkx_gemm_run): the engine, or with
 * option tp_split_gemm=cublas (mkx_tp_split_blas says when) cuBLAS on the
 * communicator's handle, made on first use, freed with the communicator. */
int mkx_tp_split_blas(MKX_Comm c, const mkx_gemm_desc *g);
int mkx_tp_split_gemm(MKX_Comm c, const mkx_gemm_desc *g, cudaStream_t st,
                      const char *fn);
typedef struct mkx_tp_blas mkx_tp_blas;
int mkx_tp_blas_make(mkx_tp_blas **b, const char *fn);
int mkx_tp_blas_gemm(mkx_tp_blas **b, const mkx_gemm_desc *g, cudaStream_t st,
                     const char *fn);
void mkx_tp_blas_free(mkx_tp_blas *b);

/* fp8 operands (src/ops/tp/fp8_gpu.c).  _check: whether the split
 * path's fp8 GEMM g (as mkx_gemm_run_fp8 takes it) fits, else
 * MKX_ERR_UNSUPPORTED saying why (row-major only; no capture with scales)
 * for the call op (MKX_TP_OP_*) of args, AllGather+GEMM of M rows, on one
 * node or several (the same rules on both).
 * A plan's count of this rank's scales of A (na) and B (nb) in the call
 * op of args, and with `values` a host copy of them (_host_make):
 * _scales_ok checks them in st's order before the call enqueues anything
 * (mkx_fused_scales_check: on the GPU in ws, or read back into the copy;
 * collective: MKX_ERR_PEER on the other ranks).  _engine_scales: the
 * engine's form of a row-major call's scales (inner dimension k).  _gemm:
 * the fp8 GEMM on this rank's share of a shared GPU. */
/* fp8 scale arrays of a call on the GPU, each value checked finite and
 * > 0 in st's order before the call enqueues anything
 * (MKX_ERR_INVALID_ARG naming the array and index): without host, on the
 * GPU (mkx_fused_scales_scan into ws's scan area; a few words come back);
 * with host (room for every array's n floats, for callers that use the
 * values), read back whole.  Either waits for st, so under capture
 * MKX_ERR_UNSUPPORTED. */
typedef struct mkx_scale_array {
  const char *name; /* as messages name it, e.g. "scales->a" */
  const float *p;
  int64_t n;
} mkx_scale_array;
/* Only the scan, enqueued on st (ws's scan area, read by the caller's
 * kernels or after st: mkx_fused_scales_scan's first[]). */
int mkx_fused_scales_scan_enqueue(const char *fn, const mkx_scale_array *arr,
                                  int count, const mkx_fused_ws *ws,
                                  cudaStream_t st);
int mkx_fused_scales_check(const char *fn, const mkx_scale_array *arr,
                           int count, const mkx_fused_ws *ws, float *host,
                           cudaStream_t st);

typedef struct mkx_tp_fp8_host {
  float *buf; /* with values: this rank's scales of A, then of B */
  int64_t na, nb;
} mkx_tp_fp8_host;
int mkx_tp_fp8_check(const char *fn, int op, const void *args, int64_t M,
                     int captured);
int mkx_tp_fp8_host_make(mkx_tp_fp8_host *h, int op, const void *args,
                         int values, const char *fn);
/* The dtype and the scales of the call op (MKX_TP_OP_*) of args. */
MKX_Datatype mkx_tp_dtype_of(int op, const void *args);
const MKX_Scales *mkx_tp_scales_of(int op, const void *args);
void mkx_tp_fp8_host_free(mkx_tp_fp8_host *h);
int mkx_tp_fp8_scales_ok(MKX_Comm c, const mkx_tp_fp8_host *h,
                         const MKX_Scales *sc, const mkx_fused_ws *ws,
                         const char *fn, cudaStream_t st);
mkx_gemm_scales mkx_tp_fp8_engine_scales(const MKX_Scales *sc, int64_t k);
/* The same for AllGather+GEMM's gathered A, whose scales are row records
 * (host/scales.h: one per row, or per row and 128 columns) at records. */
mkx_gemm_scales mkx_tp_fp8_gathered_scales(const MKX_Scales *sc, int64_t k,
                                           const float *records);
int mkx_tp_fp8_gemm(MKX_Comm c, const mkx_gemm_desc *g,
                    const mkx_gemm_scales *s, cudaStream_t st, const char *fn);

/* Every kernel of the library loaded (common/modules.h), before anything
 * that lets a peer's kernel wait for this rank's (the device's first
 * workspace, a tile set): no launch may then load a kernel lazily, which
 * waits for the device to drain.  Returns at once after the first. */
int mkx_fused_load_kernels(const char *fn);

/* An engine/launcher return code as an MKX error. */
int mkx_fused_launch_rc(int rc, const char *fn, const char *what);

/* The GEMM engine's code for an MKX type the fused paths take. */
int mkx_fused_gemm_type(MKX_Datatype t);

/* Columns of a GEMM+ReduceScatter tile: fixed from agreed values so that
 * every rank indexes the owners' flags the same way. */
int mkx_tp_rs_bn(int64_t n);

struct mkx_agreed;

/* AllGather+GEMM's rows (agreed m_local of every rank): rank q's rows are
 * [bnd[q], bnd[q + 1]) of the gathered A (M rows, tiles_m tiles of 128),
 * this rank's [row0, row1), and the tiles holding only its rows
 * [own_t0, own_t1) (none: equal; the last may end short at M). */
typedef struct mkx_tp_ag_rows {
  int64_t M, tiles_m, row0, row1, own_t0, own_t1;
  int64_t bnd[MKX_FUSED_MAX + 1];
} mkx_tp_ag_rows;
void mkx_tp_ag_rows_of(MKX_Comm c, const struct mkx_agreed *g,
                       mkx_tp_ag_rows *r);
/* AllGather+GEMM's copies of this rank's rows of A (a) into the node
 * ranks' gathered A (the data of ws) with their ready flags (tp.h,
 * mkx_tp_ag_desc.flags), by the copy engines: push_peers into every node
 * peer's, on side streams forked from st, in chunks of chunk_tiles tiles;
 * join_peers makes st wait for them; push_own_edges into this rank's own,
 * on st, only the rows of tiles shared with a neighbour's rows (the
 * gated GEMM reads the others from a itself), all of them when no tile is
 * its own only. */
int mkx_tp_ag_push_peers(MKX_Comm c, const mkx_fused_ws *ws,
                         const mkx_tp_ag_rows *r, int64_t chunk_tiles,
                         const struct mkx_ag_gemm_args *a, cudaStream_t st);
int mkx_tp_ag_join_peers(MKX_Comm c, const mkx_fused_ws *ws, cudaStream_t st);
int mkx_tp_ag_push_own_edges(MKX_Comm c, const mkx_fused_ws *ws,
                             const mkx_tp_ag_rows *r,
                             const struct mkx_ag_gemm_args *a, cudaStream_t st);

enum { MKX_TP_OP_AG = 0, MKX_TP_OP_RS, MKX_TP_OP_AR };
/* Column-major calls, and (option fused_pad) k, n, leading dimensions or
 * pointers the kernels cannot take: a row-major call on dense temporaries
 * with k and n padded to multiples of 8, operands transposed or copied in
 * and out.  mkx_tp_adapt_local: 1 when this rank's operands need it (the
 * op classes' gpu_local bit MKX_GPU_LOCAL_ADAPT; every rank takes it when
 * any rank does, agreed into g->gpu_adapt with the path, src/ops/run.c). */
int mkx_tp_adapt_local(MKX_Comm c, int op, const void *args,
                       const struct mkx_agreed *g);
/* Why the kernels cannot take these operands without the adapter's
 * copies (column-major transposes apart), or NULL: what option fused_pad
 * lets through. */
const char *mkx_tp_adapt_misfit(int op, const void *args);
int mkx_tp_adapt_plan(MKX_Comm c, int op, const void *args,
                      const struct mkx_agreed *g, void **plan);
int mkx_tp_adapt_start(MKX_Comm c, void *plan, const void *args,
                       MKX_Stream stream);
void mkx_tp_adapt_free(MKX_Comm c, void *plan);
/* Several nodes, option hier_gemm=gpu: the GEMM on the GPU, the host
 * path's hierarchical collectives for the communication (blocking). */
int mkx_hier_gpu_check(MKX_Comm c, int op, const void *args,
                       const struct mkx_agreed *g);
/* Whether option hier_gemm=nvlink's conditions hold (agreed values only);
 * if not, why (for the path choice's log). */
int mkx_hier_nvlink_fits(MKX_Comm c, int op, const void *args,
                         const struct mkx_agreed *g, char *why, size_t len);
int mkx_hier_gpu_plan(MKX_Comm c, int op, const void *args,
                      const struct mkx_agreed *g, void **plan);
int mkx_hier_gpu_start(MKX_Comm c, void *plan, const void *args,
                       MKX_Stream stream);
void mkx_hier_gpu_free(MKX_Comm c, void *plan);
/* The operations' GPU hooks (see src/ops/op.h) and their fused paths'
 * entry points (src/ops/tp/paths.c puts them in the path table).  path:
 * the entry's (MKX_PATH_TP_OVERLAP, _SPLIT, _PULL, or for AllGather+GEMM
 * _ONE_KERNEL, the split path in one kernel). */
int mkx_ag_gemm_gpu_check(MKX_Comm c, const void *args,
                          const struct mkx_agreed *g);
unsigned mkx_ag_gemm_gpu_local(MKX_Comm c, const void *args,
                               const struct mkx_agreed *g);
int mkx_ag_gemm_gpu_plan(MKX_Comm c, const void *args,
                         const struct mkx_agreed *g, mkx_path path,
                         void **plan);
/* Whether a split AllGather+GEMM runs as one kernel (agreed values and the
 * agreed MKX_GPU_LOCAL_NO_ONE_KERNEL bit: alike on every rank). */
int mkx_ag_gemm_one_kernel(MKX_Comm c, const void *args,
                           const struct mkx_agreed *g);
/* Whether AllGather+GEMM can read every rank's rows in place: each rank
 * has some, and each one's but the last are whole tiles (agreed values). */
int mkx_ag_gemm_pull_fits(MKX_Comm c, const struct mkx_agreed *g);
int mkx_ag_gemm_gpu_start(MKX_Comm c, void *plan, const void *args,
                          MKX_Stream stream);
void mkx_ag_gemm_gpu_free(MKX_Comm c, void *plan);
int mkx_rs_gpu_check(MKX_Comm c, const void *args, const struct mkx_agreed *g);
int mkx_ar_gpu_check(MKX_Comm c, const void *args, const struct mkx_agreed *g);
unsigned mkx_rs_gpu_local(MKX_Comm c, const void *args,
                          const struct mkx_agreed *g);
unsigned mkx_ar_gpu_local(MKX_Comm c, const void *args,
                          const struct mkx_agreed *g);
/* op: MKX_TP_OP_RS or MKX_TP_OP_AR. */
int mkx_rs_ar_gpu_plan(MKX_Comm c, int op, const void *args, mkx_path path,
                       void **plan);
int mkx_rs_ar_gpu_start(MKX_Comm c, void *plan, const void *args,
                        MKX_Stream stream);
void mkx_rs_ar_gpu_free(MKX_Comm c, void *plan);

/* The path choice of the three calls (op classes' gpu_choose), and of the
 * fused path alone for a call of M product rows (the adapter's inner
 * call). */
struct mkx_path_choice;
int mkx_ag_gemm_gpu_choose(MKX_Comm c, const void *args,
                           const struct mkx_agreed *g,
                           struct mkx_path_choice *out);
int mkx_rs_gpu_choose(MKX_Comm c, const void *args, const struct mkx_agreed *g,
                      struct mkx_path_choice *out);
int mkx_ar_gpu_choose(MKX_Comm c, const void *args, const struct mkx_agreed *g,
                      struct mkx_path_choice *out);
/* One node: the fused entry of a call of this shape (split, one kernel or
 * overlapped), with the reason in out->why. */
void mkx_tp_choose_fused(MKX_Comm c, int op, const void *args,
                         const struct mkx_agreed *g,
                         struct mkx_path_choice *out);

#endif
