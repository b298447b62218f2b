/* The host side every fused path shares: a pool of symmetric workspaces
 * per communicator, call prologue/epilogue, error mapping; and the
 * tensor-parallel calls' helpers (split rule, split GEMM, rows of the
 * gathered A).  See docs/fused-tp.md for the design. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/comm.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"
#include "ops/op.h"
#include "ops/path.h"
#include "host/op_args.h"

#if HAVE_CUDA
#include "core/cuda_rc.h"
#include "ops/fused/fused.h"
#include "common/modules.h"
#include "gemm/gemm_engine.h"

/* ---- the pool, hung on the communicator's private MPI_Comm ------------- */

/* The pool lives as an MPI attribute of c->mpi: MKX_Comm_free releases the
 * symmetric memory (mem's hook on the communicator) and then frees c->mpi,
 * whose delete callback frees the host side below. */
typedef struct fused_pool {
  mkx_fused_ws *list;
  mkx_symm_buf records; /* start records (kernels/fused/fused.h), made with
                          the first workspace */
  mkx_tp_blas *blas;    /* the split path's cuBLAS handle */
} fused_pool;

static int pool_key = MPI_KEYVAL_INVALID;

static int pool_error(MKX_Comm c, const char *fn);

/* MKX_Comm_get_async_error: a run's timeout on any workspace, reported and
 * the communicator marked (pool_error), else a bad input a run found (once;
 * only here and to a blocking call: a call that stopped on it while its
 * peers, which may not see it yet, go on would stall them); host-mapped
 * words, so no synchronisation. */
static int input_error(mkx_fused_ws *ws, const char *fn, int earlier);
static int get_pool(MKX_Comm c, fused_pool **pool);
static int pool_async_error(MKX_Comm c) {
  const char *fn = "MKX_Comm_get_async_error";
  fused_pool *pool;
  MKX_TRY(pool_error(c, fn));
  MKX_TRY(get_pool(c, &pool));
  for (mkx_fused_ws *ws = pool->list; ws; ws = ws->next)
    MKX_TRY(input_error(ws, fn, 1));
  return MKX_SUCCESS;
}

static void ws_destroy_host(mkx_fused_ws *ws) {
  for (int i = 0; i < MKX_FUSED_SIDES; i++) {
    if (ws->side[i]) MKX_CUDA_RELEASE(cudaStreamDestroy(ws->side[i]));
    if (ws->ev_join[i]) MKX_CUDA_RELEASE(cudaEventDestroy(ws->ev_join[i]));
  }
  if (ws->ev_fork) MKX_CUDA_RELEASE(cudaEventDestroy(ws->ev_fork));
  if (ws->ev_last) MKX_CUDA_RELEASE(cudaEventDestroy(ws->ev_last));
  if (ws->err_host) MKX_CUDA_RELEASE(cudaFreeHost(ws->err_host));
  mkx_symm_buf_free(&ws->buf);
  free(ws);
}

static int pool_delete(MPI_Comm comm, int key, void *attr, void *extra) {
  fused_pool *p = attr;
  (void)comm, (void)key, (void)extra;
  while (p && p->list) {
    mkx_fused_ws *ws = p->list;
    p->list = ws->next;
    ws_destroy_host(ws); /* device memory: already freed by symm_release */
  }
  if (p) mkx_tp_blas_free(p->blas);
  if (p) mkx_symm_buf_free(&p->records);
  free(p);
  return MPI_SUCCESS;
}

static int get_pool(MKX_Comm c, fused_pool **pool) {
  int found = 0;
  if (pool_key == MPI_KEYVAL_INVALID &&
      MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, pool_delete, &pool_key,
                             NULL) != MPI_SUCCESS)
    return mkx_error(MKX_ERR_MPI,
                     "MPI_Comm_create_keyval (fused workspace pool)");
  if (MPI_Comm_get_attr(c->mpi, pool_key, pool, &found) != MPI_SUCCESS)
    return mkx_error(MKX_ERR_MPI, "MPI_Comm_get_attr (fused workspace pool)");
  if (found) return MKX_SUCCESS;
  MKX_TRY(mkx_comm_add_hook(c, &pool_key, NULL, pool_async_error));
  *pool = calloc(1, sizeof **pool);
  if (!*pool) return mkx_error(MKX_ERR_NOMEM, "fused workspace pool");
  if (MPI_Comm_set_attr(c->mpi, pool_key, *pool) != MPI_SUCCESS) {
    free(*pool);
    return mkx_error(MKX_ERR_MPI, "MPI_Comm_set_attr (fused workspace pool)");
  }
  return MKX_SUCCESS;
}

/* ---- helpers ------------------------------------------------------------- */

int mkx_fused_launch_rc(int rc, const char *fn, const char *what) {
  if (rc == 0) return MKX_SUCCESS;
  if (rc > 0) return mkx_cuda_rc((cudaError_t)rc, fn, what);
  return mkx_error(rc == MKX_GEMM_EINVAL ? MKX_ERR_INTERNAL : MKX_ERR_CUDA,
                   "%s: %s failed (engine code %d)", fn, what, rc);
}

int mkx_tp_rs_bn(int64_t n) { return n <= 128 ? 128 : 256; }

int mkx_fused_gemm_type(MKX_Datatype t) {
  return t == MKX_FP16       ? MKX_GEMM_FP16
         : t == MKX_FP32     ? MKX_GEMM_FP32
         : t == MKX_FP8_E4M3 ? MKX_GEMM_E4M3
         : t == MKX_FP8_E5M2 ? MKX_GEMM_E5M2
                             : MKX_GEMM_BF16;
}

const char *mkx_fused_share_why(MKX_Comm c) {
  if (c->share.mode == MKX_SHARE_NONE) return NULL;
  if (c->opt.shared_gpu == MKX_SHARED_STAGED)
    return "ranks of a node share a GPU and option shared_gpu=staged";
  /* a kernel waiting for a peer could hold the SMs the peer's needs */
  if (c->share.unsafe && c->opt.shared_gpu == MKX_SHARED_AUTO)
    return "ranks of a node share a GPU under MPS and a rank has no SMs of "
           "its own (option gpu_partition; shared_gpu=fused takes the fused "
           "paths all the same)";
  return NULL;
}

int mkx_fused_share_ok(MKX_Comm c, const char *fn) {
  const char *why = mkx_fused_share_why(c);
  if (why)
    return mkx_error(MKX_ERR_UNSUPPORTED, "%s: %s (%s)", fn, why,
                     mkx_gpu_share_name(c->share.mode));
  return MKX_SUCCESS;
}

int mkx_fused_node_ok(MKX_Comm c, const char *fn) {
  if (c->place.num_nodes != 1 || c->place.local_size != c->size)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: fused path is single-node "
                     "only (%d nodes)",
                     fn, c->place.num_nodes);
  MKX_TRY(mkx_fused_share_ok(c, fn));
  if (c->size > MKX_FUSED_MAX)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: fused path handles at most "
                     "%d ranks (%d)",
                     fn, MKX_FUSED_MAX, c->size);
  return MKX_SUCCESS;
}

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static int fits(const mkx_fused_ws *ws, const mkx_fused_need *n) {
  return ws->split == n->split && ws->src_cap >= n->src_n &&
         ws->flags_cap >= n->flags_n &&
         ws->bytes - ws->data_off >= n->data_bytes;
}

/* Local resources of a workspace (no communication). */
static int ws_local_init(MKX_Comm c, mkx_fused_ws *ws) {
  const char *fn = "fused workspace";
  /* the error word, then the scales scan's results (8-byte aligned) */
  const size_t err_bytes = MKX_FUSED_ERR_WORDS * sizeof(int),
               scan_bytes = MKX_FUSED_SCAN_MAX * MKX_FUSED_SCAN_BLOCKS *
                            sizeof(long long);
  _Static_assert(MKX_FUSED_ERR_WORDS * sizeof(int) % sizeof(long long) == 0,
                 "the scan's results follow the error word aligned");
  MKX_TRY(
      mkx_cuda_rc(cudaHostAlloc((void **)&ws->err_host, err_bytes + scan_bytes,
                                cudaHostAllocMapped),
                  fn, "cudaHostAlloc"));
  memset(ws->err_host, 0, err_bytes);
  memset((char *)ws->err_host + err_bytes, 0xff, scan_bytes); /* -1: none */
  MKX_TRY(mkx_cuda_rc(
      cudaHostGetDevicePointer((void **)&ws->err_dev, ws->err_host, 0), fn,
      "cudaHostGetDevicePointer"));
  ws->scan_host = (long long *)(ws->err_host + MKX_FUSED_ERR_WORDS);
  ws->scan_dev = (long long *)(ws->err_dev + MKX_FUSED_ERR_WORDS);
  const int sides = c->place.local_size + 1;
  if (sides > MKX_FUSED_SIDES)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: at most %d ranks per node (%d here)", fn,
                     MKX_FUSED_MAX, c->place.local_size);
  for (int i = 0; i < sides; i++) {
    /* on the rank's SM partition, as the calls' own stream (their kernels
     * wait for peers too, and copies may run as kernels) */
    MKX_TRY(mkx_sm_part_stream(c->part, (void **)&ws->side[i]));
    MKX_TRY(mkx_cuda_rc(
        cudaEventCreateWithFlags(&ws->ev_join[i], cudaEventDisableTiming), fn,
        "cudaEventCreate"));
  }
  MKX_TRY(mkx_cuda_rc(
      cudaEventCreateWithFlags(&ws->ev_fork, cudaEventDisableTiming), fn,
      "cudaEventCreate"));
  return mkx_cuda_rc(
      cudaEventCreateWithFlags(&ws->ev_last, cudaEventDisableTiming), fn,
      "cudaEventCreate");
}

/* Flags start at zero (epoch 0): zero the first `bytes` and wait, before
 * the collective registration lets any peer write one here. */
static int zero_flags(void *base, size_t bytes, const char *fn) {
  MKX_TRY(mkx_cuda_rc(cudaMemset(base, 0, bytes), fn, "cudaMemset"));
  return mkx_cuda_rc(cudaDeviceSynchronize(), fn, "cudaDeviceSynchronize");
}

/* Collective: a new workspace with at least `need` (and some slack for the
 * flags, so that small shape changes reuse it). */
static int ws_create(MKX_Comm c, const mkx_fused_need *need,
                     mkx_fused_ws **out) {
  void *base = NULL;
  mkx_fused_ws *ws = calloc(1, sizeof *ws);
  int rc = ws ? MKX_SUCCESS : mkx_error(MKX_ERR_NOMEM, "fused workspace");
  if (ws) {
    ws->comm = c;
    ws->split = need->split;
    ws->src_cap = need->src_n > 4096 ? need->src_n : 4096;
    ws->flags_cap = need->flags_n > 65536 ? need->flags_n : 65536;
    ws->flags_off = round_up(MKX_FUSED_OFF_SRC + 4 * (size_t)ws->src_cap, 1024);
    ws->data_off = round_up(ws->flags_off + 4 * (size_t)ws->flags_cap, 4096);
    ws->bytes = ws->data_off + round_up(need->data_bytes, 4096);
    rc = ws_local_init(c, ws);
  }
  rc = mkx_comm_agree_rc(c, rc, "fused workspace set-up");
  if (rc != MKX_SUCCESS) {
    if (ws) ws_destroy_host(ws);
    return rc;
  }
  rc = mkx_symm_alloc(c, ws->bytes, &base); /* collective, agreed */
  if (rc == MKX_SUCCESS)
    rc = mkx_comm_agree_rc(c, zero_flags(base, ws->data_off, "fused workspace"),
                           "fused workspace zero");
  if (rc == MKX_SUCCESS) rc = mkx_symm_register(c, base, ws->bytes, &ws->buf);
  if (rc != MKX_SUCCESS) {
    if (base && !c->broken) mkx_symm_free(c, base);
    ws_destroy_host(ws);
    return rc;
  }
  mkx_log(MKX_LOG_INFO, "fused calls: new symmetric workspace of %zu bytes",
          ws->bytes);
  *out = ws;
  return MKX_SUCCESS;
}

/* Collective: the communicator's start records, zero before any peer may
 * write one. */
static int records_create(MKX_Comm c, mkx_symm_buf *b) {
  void *base = NULL;
  int rc = mkx_symm_alloc(c, MKX_FUSED_STARTS_BYTES, &base);
  if (rc == MKX_SUCCESS)
    rc = mkx_comm_agree_rc(
        c, zero_flags(base, MKX_FUSED_STARTS_BYTES, "fused start records"),
        "fused start records zero");
  if (rc == MKX_SUCCESS)
    rc = mkx_symm_register(c, base, MKX_FUSED_STARTS_BYTES, b);
  if (rc != MKX_SUCCESS && base && !c->broken) mkx_symm_free(c, base);
  return rc;
}

/* Collective: free a pooled workspace (nothing may still use it). */
static int ws_destroy(MKX_Comm c, mkx_fused_ws *ws) {
  int rc = mkx_comm_agree_rc(c,
                             mkx_cuda_rc(cudaDeviceSynchronize(), "fused call",
                                         "cudaDeviceSynchronize"),
                             "fused workspace release");
  if (rc == MKX_SUCCESS) rc = mkx_symm_free(c, ws->buf.local);
  ws_destroy_host(ws);
  return rc;
}

int mkx_fused_load_kernels(const char *fn) {
  const char *what = "";
  const int rc = mkx_kernels_load_all(&what);
  if (rc == 0) return MKX_SUCCESS;
  char s[96];
  snprintf(s, sizeof s, "loading the library's kernels (%s)", what);
  return mkx_fused_launch_rc(rc, fn, s);
}

/* What a captured call may not make (c->capturing). */
static int made_outside_capture(const char *what) {
  return mkx_error(MKX_ERR_UNSUPPORTED,
                   "a call captured into a CUDA graph needs %s that no "
                   "earlier call left free: make the same call once outside "
                   "the capture first (what it makes is kept for the next), "
                   "or capture MKX_Start of a plan",
                   what);
}

/* The split path's cuBLAS handle, made with the first workspace of a
 * split call that may use it (a start under capture could not). */
static int blas_ready(MKX_Comm c, fused_pool *pool,
                      const mkx_fused_need *need) {
  if (!need->split || c->opt.tp_split_gemm != MKX_SPLIT_GEMM_CUBLAS ||
      pool->blas)
    return MKX_SUCCESS;
  if (c->capturing) return made_outside_capture("a cuBLAS handle");
  return mkx_tp_blas_make(&pool->blas, "fused set-up");
}

int mkx_fused_ws_acquire(MKX_Comm c, const mkx_fused_need *need,
                         mkx_fused_ws **ws) {
  fused_pool *pool;
  MKX_TRY(mkx_device_set(c->device)); /* streams, events, memory: this GPU */
  MKX_TRY(pool_error(c, "fused set-up")); /* before a replace loses it */
  MKX_TRY(get_pool(c, &pool));
  MKX_TRY(blas_ready(c, pool, need));
  mkx_fused_ws **small = NULL;
  for (mkx_fused_ws **p = &pool->list; *p; p = &(*p)->next) {
    if ((*p)->busy || (*p)->split != need->split) continue;
    if (fits(*p, need)) {
      (*p)->busy = 1;
      (*p)->graph = c->capturing;
      *ws = *p;
      return MKX_SUCCESS;
    }
    if (!small) small = p;
  }
  if (c->capturing) return made_outside_capture("a workspace");
  mkx_fused_need grown = *need;
  if (small) { /* replace a free one that is too small: memory stays bounded */
    mkx_fused_ws *old = *small;
    *small = old->next;
    if (old->flags_cap > grown.flags_n) grown.flags_n = old->flags_cap;
    if (old->src_cap > grown.src_n) grown.src_n = old->src_cap;
    if (old->bytes - old->data_off > grown.data_bytes)
      grown.data_bytes = old->bytes - old->data_off;
    MKX_TRY(ws_destroy(c, old));
  }
  /* every rank takes this branch (same pool state): agreed before the
   * collective creation */
  MKX_TRY(mkx_comm_agree_rc(c, mkx_fused_load_kernels("fused set-up"),
                            "loading the library's kernels"));
  if (!pool->records.local) MKX_TRY(records_create(c, &pool->records));
  MKX_TRY(ws_create(c, &grown, ws));
  (*ws)->records = &pool->records;
  (*ws)->busy = 1;
  (*ws)->next = pool->list;
  pool->list = *ws;
  return MKX_SUCCESS;
}

void mkx_fused_ws_release(mkx_fused_ws *ws) {
  if (!ws) return;
  /* given back by a captured call's plan itself (a fallback, or its
   * failure): the graph never had it */
  if (ws->graph && ws->comm->capturing) ws->graph = 0;
  if (!ws->graph) ws->busy = 0;
}

char *mkx_fused_ws_peer(const mkx_fused_ws *ws, int lr) {
  return ws->buf.peer[lr];
}
int *mkx_fused_ws_word(const mkx_fused_ws *ws, int lr, size_t off) {
  return (int *)(mkx_fused_ws_peer(ws, lr) + off);
}
int *mkx_fused_ws_flags(const mkx_fused_ws *ws, int lr) {
  return (int *)(mkx_fused_ws_peer(ws, lr) + ws->flags_off);
}
char *mkx_fused_ws_data(const mkx_fused_ws *ws, int lr) {
  return mkx_fused_ws_peer(ws, lr) + ws->data_off;
}

void mkx_fused_sync_fill(MKX_Comm c, const mkx_fused_ws *ws, int src_n,
                         mkx_fused_sync *s) {
  memset(s, 0, sizeof *s);
  s->rank = c->place.local_rank;
  s->size = c->place.local_size;
  for (int i = 0; i < s->size; i++) s->ws[i] = mkx_fused_ws_peer(ws, i);
  s->src_n = src_n;
  s->timeout_ns = (uint64_t)c->opt.timeout_ms * 1000000ull;
  s->err = ws->err_dev;
  s->ctas = c->share.ctas;
  for (int i = 0; ws->records && ws->records->local && i < s->size; i++)
    s->starts[i] = ws->records->peer[i];
  s->ident = c->run_ident;
}

/* ---- timeouts ------------------------------------------------------------ */

static const char *where_name(int w) {
  switch (w) {
    case MKX_FUSED_AT_BARRIER:
      return "call barrier";
    case MKX_FUSED_AT_AG_TILE:
      return "gathered A tile";
    case MKX_FUSED_AT_RS_TILE:
      return "partial sub-tile";
    case MKX_FUSED_AT_AR_DONE:
      return "reduced rows";
    case MKX_FUSED_AT_LATE:
      return "partials of rows shared by two owners";
    case MKX_FUSED_AT_DRAINED:
      return "end of its reads of the partials";
    case MKX_FUSED_AT_SPLIT_TILE:
      return "another SM's share of a split tile";
    case MKX_FUSED_AT_KV_CHUNK:
      return "key/value chunk (tile = query row block)";
    case MKX_FUSED_AT_MOE_ROWS:
      return "token rows pushed to the experts' owners";
    case MKX_FUSED_AT_MOE_OUT:
      return "expert outputs of the owners";
    case MKX_FUSED_AT_MOE_COUNTS:
      return "every rank's rows per expert";
    case MKX_FUSED_AT_MOE_EXPERT:
      return "an expert's rows from every rank (tile = local expert)";
    case MKX_FUSED_AT_NET_ARRIVE:
      return "its arrival over the network (start of the call)";
    case MKX_FUSED_AT_NET_ROWS:
      return "a chunk of its rows over the network (A rows, partials or sums)";
    case MKX_FUSED_AT_NET_SENT:
      return "the network proxy (room in the ring, or completion)";
    case MKX_FUSED_AT_NODE_PART:
      return "a chunk of its partial for a rank of another node (tile = chunk)";
    case MKX_FUSED_AT_PULLED:
      return "end of its reads of this rank's A and B";
    case MKX_FUSED_AT_MISMATCH:
      return "another plan or call started";
  }
  return "?";
}

/* "rank 3" or "a peer" (-1). */
static void rank_name(int r, char *buf, size_t len) {
  if (r >= 0)
    snprintf(buf, len, "rank %d", r);
  else
    snprintf(buf, len, "a peer");
}

/* The communicator's rank of node rank l: the kernels name a peer of the
 * node's meeting, and the rank that gave up, by their place in the node
 * (the same number on a communicator of one node). */
static int rank_of_local(MKX_Comm c, int l) {
  const int q =
      l < 0 ? -1 : mkx_placement_rank_at(&c->place, c->size, c->place.node, l);
  return q < 0 ? l : q;
}

/* The peer of a wait at `where`, as the communicator numbers it. */
static int waited_rank(MKX_Comm c, int peer, int where) {
  return where == MKX_FUSED_AT_BARRIER ? rank_of_local(c, peer) : peer;
}

/* A run on `ws` failed on the GPU: a bounded wait of this rank ran out, or
 * a peer gave up on the run and told this rank.  The GPU left the error
 * word in host-mapped memory (readable without synchronising).  `fn` is
 * the call reporting it; earlier: the run was an earlier call's.  Kernels
 * name a node-local rank; on the fused path's one node that is the
 * communicator rank (the bootstrap numbers a node's ranks in rank order). */
/* ", tile 5", ", tile (2, 3)" or "" for a wait's tile. */
static void tile_name(int tile, int where, char *buf, size_t len) {
  buf[0] = 0;
  if (tile >= 0 && where == MKX_FUSED_AT_RS_TILE) /* tile_m * 65536 + tile_n */
    snprintf(buf, len, ", tile (%d, %d)", tile / 65536, tile % 65536);
  else if (tile >= 0)
    snprintf(buf, len, ", tile %d", tile);
}

/* "; this rank was waiting for rank 2 (gathered A tile, tile 5)" or "". */
static void own_wait(MKX_Comm c, volatile const int *e, char *buf, size_t len) {
  char who[32], at[32];
  buf[0] = 0;
  if (e[6] <= 0) return;
  rank_name(waited_rank(c, e[4], e[6]), who, sizeof who);
  tile_name(e[5], e[6], at, sizeof at);
  snprintf(buf, len, "; this rank was then waiting for %s (%s%s)", who,
           where_name(e[6]), at);
}

/* At log level debug: this rank's flag words of a failed run (epoch,
 * block count, and per rank the call barrier, pushed, drained and told
 * words), read on a stream of their own so no kernel still waiting holds
 * the read back.  Comparing the ranks' lines shows whose epoch is behind. */
static void dump_sync(mkx_fused_ws *ws) {
  if (mkx_log_level() < MKX_LOG_DEBUG || ws->dumped) return;
  ws->dumped = 1;
  int w[MKX_FUSED_OFF_TOLD / 4 + MKX_FUSED_MAX];
  cudaStream_t s;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
    return (void)cudaGetLastError();
  const int me = ws->comm->place.local_rank, n = ws->comm->place.local_size;
  cudaError_t e = cudaMemcpyAsync(w, mkx_fused_ws_peer(ws, me), sizeof w,
                                  cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  MKX_CUDA_RELEASE(cudaStreamDestroy(s));
  if (e != cudaSuccess) return (void)cudaGetLastError();
  char line[512];
  int len = snprintf(line, sizeof line, "epoch %d count %d;",
                     w[MKX_FUSED_OFF_EPOCH / 4], w[MKX_FUSED_OFF_COUNT / 4]);
  for (int q = 0; q < n && len < (int)sizeof line - 64; q++)
    len += snprintf(
        line + len, sizeof line - len,
        " rank %d: bar %d pushed %d drained %d told %#x;", q,
        w[MKX_FUSED_OFF_BAR / 4 + q], w[MKX_FUSED_OFF_PUSHED / 4 + q],
        w[MKX_FUSED_OFF_DRAINED / 4 + q], w[MKX_FUSED_OFF_TOLD / 4 + q]);
  mkx_log(MKX_LOG_DEBUG, "fused workspace of the failed run: %s", line);
}

/* The head of a failed run's message: "fn", or for an earlier call's run
 * "fn: an earlier MKX_...". */
static void run_head(const mkx_fused_ws *ws, const char *fn, int earlier,
                     char *head, size_t len) {
  if (earlier)
    snprintf(head, len, "%s: an earlier %s", fn, ws->fn ? ws->fn : "call");
  else
    snprintf(head, len, "%s", fn);
}

/* Which run failed: the host may have started many more on the
 * workspace since (calls enqueued ahead of the GPU). */
static void run_which(const mkx_fused_ws *ws, volatile const int *e, char *buf,
                      size_t len) {
  if (e[7] <= ws->starts)
    snprintf(buf, len, "; run %d of the %ld started on its workspace", e[7],
             ws->starts);
  else /* graph replays run without a start */
    snprintf(buf, len, "; run %d on its workspace", e[7]);
}

/* Node rank q's latest start record in this rank's block (the peers write
 * there), read on a stream of its own as dump_sync does; 0 if unreadable. */
static uint64_t start_record(const mkx_fused_ws *ws, int q) {
  uint64_t v = 0;
  cudaStream_t s;
  if (!ws->records || !ws->records->local || q < 0 || q >= MKX_FUSED_MAX)
    return 0;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
    return (void)cudaGetLastError(), 0;
  const char *at = (const char *)ws->records->local +
                   MKX_FUSED_STARTS_OFF_START + sizeof v * (size_t)q;
  cudaError_t e = cudaMemcpyAsync(&v, at, sizeof v, cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  MKX_CUDA_RELEASE(cudaStreamDestroy(s));
  if (e != cudaSuccess) return (void)cudaGetLastError(), 0;
  return v;
}

/* Ranks of the node started different plans or calls at the same run
 * (the prologue's start records): the rank that saw it (err words of
 * MKX_FUSED_ERR_MISMATCH), or one it told (MKX_FUSED_ERR_PEER at
 * MKX_FUSED_AT_MISMATCH: rank err[1] saw rank err[2]'s). */
static int mismatch_error(mkx_fused_ws *ws, const char *head,
                          volatile const int *e, int told) {
  MKX_Comm c = ws->comm;
  const int other = rank_of_local(c, e[told ? 2 : 1]);
  unsigned theirs = (unsigned)e[2], mine = (unsigned)e[4];
  int runs = e[5], their_runs = e[6];
  char saw[64] = "";
  if (told) { /* this rank's own record is in its block too */
    const uint64_t v = start_record(ws, e[2]),
                   me = start_record(ws, c->place.local_rank);
    mine = me ? (unsigned)me : ws->ident, theirs = (unsigned)v;
    runs = (int)(me >> 32), their_runs = (int)(v >> 32);
    snprintf(saw, sizeof saw, " (seen by rank %d)", rank_of_local(c, e[1]));
  }
  char a[96], b[96] = "another plan or call";
  mkx_run_ident_text(mine, a, sizeof a);
  if (theirs) mkx_run_ident_text(theirs, b, sizeof b);
  return mkx_error(MKX_ERR_SHAPE_MISMATCH,
                   "%s: rank %d started %s as its GPU run %d on the "
                   "communicator, rank %d %s as its run %d%s: every rank "
                   "must start the same plan or make the same call",
                   head, c->rank, a, runs, other, b, their_runs, saw);
}

static int check_error(mkx_fused_ws *ws, const char *fn, int earlier) {
  volatile const int *e = ws->err_host;
  const int code = e[0], peer = e[1], tile = e[2], where = e[3];
  if (code != MKX_FUSED_ERR_TIMEOUT && code != MKX_FUSED_ERR_PEER &&
      code != MKX_FUSED_ERR_MISMATCH)
    return MKX_SUCCESS;
  dump_sync(ws);
  char head[96], who[32], waited[32], at[32], mine[192], which[80];
  run_head(ws, fn, earlier, head, sizeof head);
  if (code == MKX_FUSED_ERR_MISMATCH || where == MKX_FUSED_AT_MISMATCH)
    return mismatch_error(ws, head, e, code != MKX_FUSED_ERR_MISMATCH);
  run_which(ws, e, which, sizeof which);
  const long long ms = (long long)ws->comm->opt.timeout_ms;
  if (code == MKX_FUSED_ERR_PEER) {
    rank_name(rank_of_local(ws->comm, peer), who, sizeof who);
    rank_name(waited_rank(ws->comm, tile, where), waited, sizeof waited);
    own_wait(ws->comm, e, mine, sizeof mine);
    return mkx_error(MKX_ERR_PEER,
                     "%s failed on the GPU: %s gave up on it "
                     "after %lld ms (option timeout_ms) waiting for %s (%s), "
                     "so this rank's result is void%s%s",
                     head, who, ms, waited, where_name(where), mine, which);
  }
  rank_name(waited_rank(ws->comm, peer, where), who, sizeof who);
  tile_name(tile, where, at, sizeof at);
  return mkx_error(MKX_ERR_TIMEOUT,
                   "%s timed out on the GPU after %lld ms "
                   "(option timeout_ms) waiting for %s (%s%s)%s",
                   head, ms, who, where_name(where), at, which);
}

/* The bad input a run on `ws` found on the GPU (fused/fused.h,
 * MKX_FUSED_ERR_INPUT), reported once: the record is cleared after it is
 * read (the GPU writes one only into a clear record, so none is lost to the
 * clearing), and the communicator stays usable. */
static int input_error(mkx_fused_ws *ws, const char *fn, int earlier) {
  volatile int *e = ws->err_host + MKX_FUSED_ERR_INPUT;
  int rec[MKX_FUSED_ERR_WORDS - MKX_FUSED_ERR_INPUT];
  if (e[0] <= 0) return MKX_SUCCESS; /* none, or -1: being written */
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  for (int i = 0; i < MKX_FUSED_ERR_WORDS - MKX_FUSED_ERR_INPUT; i++)
    rec[i] = e[i];
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  e[0] = 0;
  char head[96];
  run_head(ws, fn, earlier, head, sizeof head);
  if (ws->input_error) return ws->input_error(rec, head);
  return mkx_error(rec[0], "%s failed on the GPU: bad input (code %d)", head,
                   rec[0]);
}

/* A run on any workspace of the communicator failed: report it (a
 * workspace may be reused or replaced by a call of another shape) and
 * mark the communicator unusable, since the ranks' epochs are now out of
 * step and a later call would pair mismatched runs. */
static int pool_error(MKX_Comm c, const char *fn) {
  fused_pool *pool;
  MKX_TRY(get_pool(c, &pool));
  for (mkx_fused_ws *ws = pool->list; ws; ws = ws->next)
    MKX_TRY(mkx_comm_break(c, check_error(ws, fn, 1)));
  return MKX_SUCCESS;
}

/* Option blocking: wait for this run and return its own status. */
static int finish_blocking(mkx_fused_ws *ws, cudaStream_t st) {
  MKX_TRY(mkx_cuda_rc(cudaStreamSynchronize(st), ws->fn,
                      "cudaStreamSynchronize (option blocking)"));
  MKX_TRY(mkx_comm_break(ws->comm, check_error(ws, ws->fn, 0)));
  return input_error(ws, ws->fn, 0);
}

int mkx_fused_after_last(mkx_fused_ws *ws, const char *fn, MKX_Stream st) {
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  MKX_TRY(mkx_cuda_rc(cudaStreamIsCapturing((cudaStream_t)st, &cap), fn,
                      "cudaStreamIsCapturing"));
  /* A call on another stream than the last one must not overtake it: it
   * would reuse the workspace under the previous call's feet.  (Inside a
   * capture the graph's own order is the user's to keep.) */
  if (ws->used && ws->last_stream != st && cap == cudaStreamCaptureStatusNone)
    MKX_TRY(mkx_cuda_rc(cudaStreamWaitEvent((cudaStream_t)st, ws->ev_last, 0),
                        fn, "cudaStreamWaitEvent"));
  return MKX_SUCCESS;
}

static int begin(MKX_Comm c, mkx_fused_ws *ws, const char *fn, MKX_Stream st) {
  MKX_TRY(pool_error(c, fn));
  ws->fn = fn;
  ws->starts++;
  ws->ident = c->run_ident;
  MKX_TRY(mkx_fused_after_last(ws, fn, st));
  return MKX_SUCCESS;
}

int mkx_fused_begin(MKX_Comm c, mkx_fused_ws *ws, const char *fn, MKX_Stream st,
                    int src_n, mkx_path path) {
  mkx_fused_sync s;
  MKX_TRY(begin(c, ws, fn, st));
  mkx_path_count(path);
  mkx_log(MKX_LOG_DEBUG, "%s: %s path", fn, mkx_path_name(path));
  mkx_fused_sync_fill(c, ws, src_n, &s);
  return mkx_fused_launch_rc(mkx_fused_prologue(&s, (cudaStream_t)st), fn,
                             "prologue kernel");
}

int mkx_fused_begin_met(MKX_Comm c, mkx_fused_ws *ws, const char *fn,
                        MKX_Stream st, mkx_path path) {
  MKX_TRY(begin(c, ws, fn, st));
  mkx_path_count(path);
  mkx_log(MKX_LOG_DEBUG, "%s: %s path, its kernels meeting the peers", fn,
          mkx_path_name(path));
  return MKX_SUCCESS;
}

int mkx_fused_begin_split(MKX_Comm c, mkx_fused_ws *ws, const char *fn,
                          MKX_Stream st) {
  return mkx_fused_begin_met(c, ws, fn, st, MKX_PATH_TP_SPLIT);
}

void mkx_tp_ag_rows_of(MKX_Comm c, const struct mkx_agreed *g,
                       mkx_tp_ag_rows *r) {
  memset(r, 0, sizeof *r);
  r->M = g->total;
  for (int q = 0; q < c->size; q++) r->bnd[q + 1] = r->bnd[q] + g->local[q];
  r->row0 = r->bnd[c->rank];
  r->row1 = r->bnd[c->rank + 1];
  r->tiles_m = (r->M + 127) / 128;
  r->own_t0 = (r->row0 + 127) / 128;
  r->own_t1 = r->row1 == r->M ? r->tiles_m : r->row1 / 128;
  if (r->row1 == r->row0 || r->own_t1 < r->own_t0) r->own_t1 = r->own_t0;
}

void mkx_tp_gemm_of_ag(const mkx_ag_gemm_args *x, const void *a, int64_t M,
                       mkx_gemm_desc *d) {
  memset(d, 0, sizeof *d);
  d->m = M, d->n = x->n, d->k = x->k;
  d->a = a, d->lda = x->k;
  d->b = x->B, d->ldb = x->ldb, d->b_kmajor = x->transb == MKX_TRANS;
  d->c = x->C, d->ldc = x->ldc;
  d->ab_type = mkx_fused_gemm_type(x->dtype);
  d->c_type = mkx_fused_gemm_type(x->ctype);
}

void mkx_tp_gemm_of_red(const mkx_rs_ar_args *x, void *c, int c_type,
                        mkx_gemm_desc *d) {
  memset(d, 0, sizeof *d);
  d->m = x->M, d->n = x->n, d->k = x->k_local;
  d->a = x->A, d->lda = x->lda;
  d->b = x->B, d->ldb = x->ldb, d->b_kmajor = x->transb == MKX_TRANS;
  d->c = c, d->ldc = x->n;
  d->ab_type = mkx_fused_gemm_type(x->dtype);
  d->c_type = c_type;
}

int mkx_tp_split_blas(MKX_Comm c, const mkx_gemm_desc *g) {
  /* cuBLAS has no fp16 x fp16 -> bf16 (nor bf16 -> fp16): the engine */
  return c->opt.tp_split_gemm == MKX_SPLIT_GEMM_CUBLAS &&
         (g->c_type == MKX_GEMM_FP32 || g->c_type == g->ab_type);
}

int mkx_tp_split_gemm(MKX_Comm c, const mkx_gemm_desc *g, cudaStream_t st,
                      const char *fn) {
  fused_pool *pool;
  if (!mkx_tp_split_blas(c, g)) {
    mkx_gemm_desc capped = *g; /* a fair share of a GPU shared under MPS */
    capped.num_ctas = c->share.ctas;
    return mkx_fused_launch_rc(mkx_gemm_run(&capped, st), fn, "GEMM");
  }
  MKX_TRY(get_pool(c, &pool));
  if (!pool->blas) MKX_TRY(mkx_device_set(c->device)); /* the handle's GPU */
  return mkx_tp_blas_gemm(&pool->blas, g, st, fn);
}

int mkx_fused_end(mkx_fused_ws *ws, MKX_Stream st) {
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  MKX_TRY(mkx_cuda_rc(cudaStreamIsCapturing((cudaStream_t)st, &cap),
                      "fused call", "cudaStreamIsCapturing"));
  /* Inside a capture nothing runs yet: no event, and option blocking has
   * nothing to wait for (a synchronise would end the capture). */
  if (cap != cudaStreamCaptureStatusNone) return MKX_SUCCESS;
  ws->used = 1;
  ws->last_stream = st;
  MKX_TRY(mkx_cuda_rc(cudaEventRecord(ws->ev_last, (cudaStream_t)st),
                      "fused call", "cudaEventRecord"));
  return ws->comm->opt.blocking ? finish_blocking(ws, (cudaStream_t)st)
                                : MKX_SUCCESS;
}

#else
typedef int mkx_fused_ws_unused; /* ISO C: not an empty unit */
#endif
