/*
 * mpirun -np P mkx_perf tiles [--shape MxNxK]... [--chunk ROWS] [--reps N]
 *                             [--warmup N] [--out FILE]
 *
 * Data tiles (include/mkx_tiles.h) against MKX's fused calls, in one job
 * on the same GPUs (one node), bf16, B stored N x K:
 *   AllGather+GEMM  fused: MKX_Allgather_gemm (a plan);
 *                   tiles: MKX_Allgather_tiles feeding MKX_Tiles_gemm
 *                   (cuBLAS in chunks of --chunk rows, each after a wait
 *                   for its rows);
 *                   serial: the same AllGather, then one cuBLAS GEMM once
 *                   every row is there (one chunk of M rows).
 *   GEMM+RS         fused: MKX_Gemm_reduce_scatter (a plan);
 *                   tiles: MKX_Tiles_gemm producing the partial in chunks,
 *                   each signalled, while MKX_Reduce_scatter_tiles on
 *                   another stream sums each tile as every rank's is done;
 *                   serial: the GEMM, then the ReduceScatter of the tiles.
 *   gemm: the same cuBLAS GEMM alone (one chunk, its input there, no
 *   communication): the bound of tiles with cuBLAS; comm: the AllGather
 *   or the ReduceScatter alone (every partial signalled at once).
 * Reported: medians (ms, slowest rank) and tiles/fused, tiles/serial,
 * tiles/gemm, and comm's rate (GB/s: the bytes this rank reads and
 * writes).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mkx_tiles.h"
#include "perf_job.h"
#include "perf_tp_ops.h"
#include "perf_util.h"

#define MAX_SHAPES 8

static const char usage[] =
    "usage: mpirun -np P mkx_perf tiles [--shape MxNxK]... [--chunk ROWS] "
    "[--reps N] [--warmup N] [--out FILE]\n";

typedef struct tiles_opts {
  int64_t shapes[MAX_SHAPES][3];
  int ns, reps, warmup;
  int64_t chunk;
  const char *outname;
} tiles_opts;

static int parse(int argc, char **argv, tiles_opts *o) {
  memset(o, 0, sizeof *o);
  o->reps = 10, o->warmup = 2, o->chunk = 1024;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help")) return 1;
    if (!v) return perf_usage_error("mkx_perf tiles", usage, "no value", a);
    if (!strcmp(a, "--shape")) {
      if (o->ns == MAX_SHAPES || !perf_tp_shape(v, o->shapes[o->ns]))
        return perf_usage_error("mkx_perf tiles", usage, "bad --shape", v);
      o->ns++;
    } else if (!strcmp(a, "--chunk")) {
      if ((o->chunk = atoll(v)) < 1)
        return perf_usage_error("mkx_perf tiles", usage, "bad --chunk", v);
    } else if (!strcmp(a, "--reps")) {
      if ((o->reps = atoi(v)) < 1)
        return perf_usage_error("mkx_perf tiles", usage, "bad --reps", v);
    } else if (!strcmp(a, "--warmup")) {
      if ((o->warmup = atoi(v)) < 0)
        return perf_usage_error("mkx_perf tiles", usage, "bad --warmup", v);
    } else if (!strcmp(a, "--out")) {
      o->outname = v;
    } else {
      return perf_usage_error("mkx_perf tiles", usage, "unknown option", a);
    }
    i++;
  }
  if (!o->ns) {
    const int64_t d[2][3] = {{8192, 8192, 8192}, {4096, 4096, 4096}};
    memcpy(o->shapes, d, sizeof d);
    o->ns = 2;
  }
  return 0;
}

/* One shape's operands, plans and tile sets. */
typedef struct tiles_ctx {
  int op; /* OP_AG or OP_RS */
  int64_t M, N, K;
  int64_t chunk; /* rows per GEMM chunk of the timed variant */
  perf_tp_bufs b;
  void *gathered;  /* AG: every rank's copy of the gathered A */
  MKX_Tiles a, p;  /* AG: the gathered A; RS: this rank's A and partial */
  int variant;     /* TILED, SERIAL, GEMM_ONLY or COMM_ONLY */
  cudaStream_t ps; /* RS: the producer's stream */
  cudaEvent_t fork, join;
} tiles_ctx;

enum { TILED, SERIAL, GEMM_ONLY, COMM_ONLY };

static void call_fused(const perf_env *e, const void *ctx) {
  AM(MKX_Start(((const tiles_ctx *)ctx)->b.req, e->st));
}

static void call_ag(const perf_env *e, const void *v) {
  const tiles_ctx *x = v;
  AM(MKX_Tiles_begin(x->a, e->st));
  if (x->variant == GEMM_ONLY) /* the rows as if gathered: no copy */
    AM(MKX_Tiles_signal(x->a, e->rank, 0, x->M, 0, x->K, e->st));
  else
    AM(MKX_Allgather_tiles(x->b.A, x->K, x->a, e->st));
  if (x->variant == COMM_ONLY) return;
  AM(MKX_Tiles_gemm(x->a, e->rank, x->b.B, x->N, x->K, MKX_TRANS, x->b.C, x->N,
                    MKX_BF16, NULL, x->variant == TILED ? x->chunk : x->M,
                    e->st));
}

static void call_rs(const perf_env *e, const void *v) {
  const tiles_ctx *x = v;
  AM(MKX_Tiles_begin(x->a, e->st));
  /* an epoch of the partial's set signals every element of it: none
   * where the GEMM runs alone */
  if (x->variant != GEMM_ONLY) AM(MKX_Tiles_begin(x->p, e->st));
  /* this rank's A is there: its tiles complete for the GEMM's waits */
  AM(MKX_Tiles_signal(x->a, e->rank, 0, x->M, 0, x->b.k_loc, e->st));
  if (x->variant == COMM_ONLY) {
    AM(MKX_Tiles_signal(x->p, e->rank, 0, x->M, 0, x->N, e->st));
    AM(MKX_Reduce_scatter_tiles(x->p, x->b.C, x->N, e->st));
    return;
  }
  if (x->variant != TILED) {
    AM(MKX_Tiles_gemm(x->a, e->rank, x->b.B, x->N, x->b.k_loc, MKX_TRANS,
                      x->b.P, x->N, MKX_BF16,
                      x->variant == SERIAL ? x->p : NULL, x->M, e->st));
    if (x->variant == SERIAL)
      AM(MKX_Reduce_scatter_tiles(x->p, x->b.C, x->N, e->st));
    return;
  }
  AK(cudaEventRecord(x->fork, e->st));
  AK(cudaStreamWaitEvent(x->ps, x->fork, 0));
  /* the producer first (docs/tiles.md: a waiting stream holds its queue) */
  AM(MKX_Tiles_gemm(x->a, e->rank, x->b.B, x->N, x->b.k_loc, MKX_TRANS, x->b.P,
                    x->N, MKX_BF16, x->p, x->chunk, x->ps));
  AM(MKX_Reduce_scatter_tiles(x->p, x->b.C, x->N, e->st));
  AK(cudaEventRecord(x->join, x->ps));
  AK(cudaStreamWaitEvent(e->st, x->join, 0));
}

/* Bytes a rank reads and writes in the communication alone (bf16). */
static double comm_bytes(const tiles_ctx *x, int size) {
  const double rows = (double)x->M / size;
  if (x->op == OP_AG) return rows * (double)x->K * 2 * 2 * size;
  return rows * (double)x->N * 2 * (size + 1);
}

static void ctx_make(const perf_env *e, int op, const int64_t s[3],
                     int64_t chunk, tiles_ctx *x) {
  memset(x, 0, sizeof *x);
  x->op = op, x->M = s[0], x->N = s[1], x->K = s[2], x->chunk = chunk;
  perf_tp_alloc(op, x->M, x->N, x->K, e->size, e->rank, op == OP_RS, &x->b);
  perf_tp_plan(e->mkx, op, x->M, x->N, x->K, &x->b, &x->b.req);
  if (op == OP_AG) {
    x->gathered = perf_dalloc((size_t)(x->M * x->K) * 2);
    AM(MKX_Tiles_create(x->gathered, x->M, x->K, x->K, 128, x->K, MKX_BF16,
                        MKX_ROW_MAJOR, e->mkx, &x->a));
  } else {
    AM(MKX_Tiles_create(x->b.A, x->M, x->b.k_loc, x->b.k_loc, 128, x->b.k_loc,
                        MKX_BF16, MKX_ROW_MAJOR, e->mkx, &x->a));
    AM(MKX_Tiles_create(x->b.P, x->M, x->N, x->N, 128, 1024, MKX_BF16,
                        MKX_ROW_MAJOR, e->mkx, &x->p));
    AK(cudaStreamCreateWithFlags(&x->ps, cudaStreamNonBlocking));
    AK(cudaEventCreateWithFlags(&x->fork, cudaEventDisableTiming));
    AK(cudaEventCreateWithFlags(&x->join, cudaEventDisableTiming));
  }
}

static void ctx_free(tiles_ctx *x) {
  AM(MKX_Tiles_free(&x->a));
  if (x->p) AM(MKX_Tiles_free(&x->p));
  if (x->ps) AK(cudaStreamDestroy(x->ps));
  if (x->fork) AK(cudaEventDestroy(x->fork));
  if (x->join) AK(cudaEventDestroy(x->join));
  AK(cudaFree(x->gathered));
  perf_tp_free(&x->b);
}

static FILE *open_table(const perf_env *e, const tiles_opts *o) {
  char head[3072] = "", envs[1024] = "";
  perf_mkx_environment(envs, sizeof envs);
  perf_table_title(e, head, sizeof head);
  perf_cat(head, sizeof head, "MKX_* environment: %s.\n\n", envs);
  perf_cat(head, sizeof head,
           "bf16, B stored N x K, data tiles of 128 rows; medians of %d (ms, "
           "slowest rank).  fused: MKX's call (a plan); tiles: "
           "MKX_Allgather_tiles feeding MKX_Tiles_gemm (cuBLAS in chunks of "
           "%lld rows), or MKX_Tiles_gemm's chunks feeding "
           "MKX_Reduce_scatter_tiles on another stream; serial: the same "
           "calls with the GEMM in one chunk, after the AllGather or before "
           "the ReduceScatter; gemm: the same cuBLAS GEMM alone, in one "
           "chunk, without communication; comm: the AllGather or the "
           "ReduceScatter alone, and its rate (GB/s: the bytes a rank reads "
           "and writes; AllGather: its block into every copy; "
           "ReduceScatter: every copy of its block, and its output).\n\n"
           "| call | M | N | K | fused | tiles | serial | gemm | comm | "
           "tiles/fused | tiles/serial | tiles/gemm | comm GB/s | fused path "
           "|\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
           "---|\n",
           o->reps, (long long)o->chunk);
  return perf_table_open(head, o->outname);
}

int mkx_perf_tiles(int argc, char **argv) {
  tiles_opts o;
  const int prc = parse(argc, argv, &o);
  if (prc == 1) fputs(usage, stdout);
  if (prc) return prc == 1 ? 0 : prc;
  if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
    fprintf(stderr, "mkx_perf tiles: MPI_Init failed\n");
    return 1;
  }
  perf_env e;
  int rc = perf_env_init(&e, "mkx_perf tiles");
  if (rc == 0) {
    FILE *out = e.rank == 0 ? open_table(&e, &o) : NULL;
    for (int op = OP_AG; op <= OP_RS; op++)
      for (int s = 0; s < o.ns; s++) {
        tiles_ctx x;
        ctx_make(&e, op, o.shapes[s], o.chunk, &x);
        perf_call_fn f = op == OP_AG ? call_ag : call_rs;
        char paths[256], scratch[256];
        const float fused = perf_time_calls(&e, o.warmup, o.reps, call_fused,
                                            &x, paths, sizeof paths);
        float t[4];
        for (x.variant = TILED; x.variant <= COMM_ONLY; x.variant++)
          t[x.variant] = perf_time_calls(&e, o.warmup, o.reps, f, &x, scratch,
                                         sizeof scratch);
        const float tiles = t[TILED], serial = t[SERIAL], gemm = t[GEMM_ONLY];
        const double gb = comm_bytes(&x, e.size) / 1e6 / t[COMM_ONLY];
        int async = MKX_SUCCESS;
        AM(MKX_Tiles_get_async_error(x.a, &async));
        AM(async);
        if (e.rank == 0) {
          char line[512];
          snprintf(line, sizeof line,
                   "| %s | %lld | %lld | %lld | %.3f | %.3f | %.3f | %.3f | "
                   "%.3f | %.3f | %.3f | %.3f | %.0f | %s |\n",
                   op == OP_AG ? "allgather_gemm" : "gemm_rs", (long long)x.M,
                   (long long)x.N, (long long)x.K, fused, tiles, serial, gemm,
                   t[COMM_ONLY], tiles / fused, tiles / serial, tiles / gemm,
                   gb, paths);
          fputs(line, stdout);
          fflush(stdout);
          if (out) fputs(line, out), fflush(out);
        }
        ctx_free(&x);
      }
    if (out && fclose(out) != 0) perror(o.outname);
    perf_env_fini(&e);
  }
  AI(MPI_Finalize());
  return rc;
}
