/*
 * mkx_perf attn: MKX_Ring_attention on device buffers, timed (run with
 * `mpirun -np P mkx_perf attn ...`; one rank is the main case, any number
 * of ranks works, one GPU per rank or several ranks on one GPU under MPS).
 *
 *   mkx_perf attn [--shapes B,S,HQ,HKV,D ...] [--small] [--reps N]
 *                 [--warmup N] [--versus FILE] [--out FILE.md] [--no-lse]
 *                 [--graph] [--help]
 *
 * For each shape and causal = 0, 1: Q, K, V, O and LSE in cudaMalloc'd
 * memory (random bf16 in [-1, 1], uploaded once, a different seed per
 * rank), scale 1/sqrt(D) (scale = 0), LSE written unless --no-lse, the
 * communicator's options from the MKX_* environment only.  --warmup calls
 * (default 2), then --reps timed calls (default 10) on one non-blocking
 * stream, each after a stream synchronisation and an MPI barrier, between
 * two CUDA events.  A staged call synchronises and computes on the host:
 * the second event is recorded after it returns, so its time is the
 * call's whole time.  Reported: the median of each rank, the slowest rank
 * (MPI_Allreduce MAX), and TFLOP/s of the whole attention,
 *     4 * B * HQ * (p*S)^2 * D  (causal: half)  / time,
 * where S is the sequence per rank (the whole sequence is p*S on p ranks),
 * and that rate as a fraction of the MKX GEMM engine's timed in the same run
 * ("of engine", the compute bound); the column "MKX path" names the path the
 * timed calls took (ops/path.h, counted on rank 0).  --graph: also a plan of
 * the same call (MKX_Ring_attention_init) whose MKX_Start is captured once
 * into a CUDA graph and replayed the same way: columns "graph ms" and "MKX /
 * graph" (the call's time over the replay's: above 1, what a graph saves of
 * launches and host work; "-" where the path may not be captured).
 *
 * Shapes B,S,HQ,HKV,D (batch, sequence per rank, query heads, key/value
 * heads, head dimension; HQ a multiple of HKV): by default the
 * shapes 4,4096,16,16,128  4,8192,16,16,128  4,16384,16,16,128
 * 1,16384,32,8,128  4,8192,16,16,64; --small: 1,1024,4,4,128 2,2048,8,2,64
 * (for slow paths); --shapes replaces the default list (with --small: the
 * small list, then these).
 *
 * --versus FILE, on one rank: lines of tests/perf/torch_sdpa.py
 *     sdpa <backend> B S HQ HKV D causal ms tflops
 *     sdpa <backend> B S HQ HKV D causal unavailable <why>
 * (other lines are skipped).  The table gets one column per backend (in
 * the order of the file; "n/a": unavailable there, "-": not in the file),
 * each its TFLOP/s from its ms and the FLOP count above, and "MKX / best",
 * MKX over the fastest backend of the row.
 * On several ranks: lines of tests/perf/torch_ring_attn.py (PyTorch SDPA
 * and an NCCL ring of K/V, serially, one rank per GPU)
 *     ring B S HQ HKV D causal compute_ms ring_ms serial_ms tflops
 *     ring B S HQ HKV D causal unavailable <why>
 * with S the sequence per rank (other lines are skipped; a line
 * "# torch_ring_attn.py: P ranks" whose P is not this job's size drops the
 * file with a note).  The table gets "ring TFLOP/s" (from its serial ms and
 * the FLOP count above), "MKX / ring" and "ring serial ms".
 *
 * --out FILE.md appends a section: date (UTC), GPU name, ranks and GPUs,
 * whether ranks share a GPU (GPU UUIDs compared over MPI_Allgather; MPS or
 * time slices as MKX sees it), the MKX_* variables set, the method, and the
 * table; its rows are written as each is measured.
 *
 * Exit: 0; 2 bad arguments; 77 no GPU on some rank (MKX runs the host path
 * there, and this benchmark times device buffers); 1 on any failure of a
 * CUDA, MPI or MKX call (the MKX error string and message are printed).
 */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <errno.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "mkx.h"
#include "core/device.h"
#include "ops/path.h"
#include "perf_job.h"
#include "perf_util.h"

enum { MAX_SHAPES = PERF_MAX_SHAPES, MAX_BACKENDS = 8 };

typedef struct shape {
  int64_t b, s, hq, hkv, d; /* s: sequence per rank */
} shape;

typedef struct opts {
  shape shapes[MAX_SHAPES];
  int ns, reps, warmup, lse, graph;
  const char *versus, *outname;
} opts;

typedef perf_env env;

/* One measurement of torch_sdpa.py, or of torch_ring_attn.py (backend
 * "ring"). */
typedef struct sdpa_line {
  int backend; /* index into baseline.names */
  shape sh;    /* s: the whole sequence (one GPU); ring: per rank */
  int causal, avail;
  double ms; /* ring: the serial loop's */
} sdpa_line;

typedef struct baseline {
  char names[MAX_BACKENDS][32];
  int nb, nl, cap;
  int ranks; /* ring: the ranks its header names (0: none named) */
  sdpa_line *lines;
} baseline;

typedef struct result {
  double ms, tflops; /* slowest rank's median */
  double graph_ms;   /* --graph: the replay's, -1: may not be captured */
  char path[160];    /* the paths the timed calls took (rank 0) */
} result;

static const char attn_usage[] =
    "usage: mpirun -np P mkx_perf attn [--shapes B,S,HQ,HKV,D ...] [--small]\n"
    "         [--reps N] [--warmup N] [--versus FILE] [--out FILE.md]\n"
    "         [--no-lse] [--graph]\n"
    "  MKX_Ring_attention on device buffers (bf16), causal and not: median\n"
    "  of N timed calls (default 10, after 2 warm-up calls), slowest rank,\n"
    "  TFLOP/s of the whole attention, 4*B*HQ*(P*S)^2*D (causal: half) /\n"
    "  time.  S is the sequence per rank.  Default shapes: 4,4096,16,16,128\n"
    "  4,8192,16,16,128 4,16384,16,16,128 1,16384,32,8,128 4,8192,16,16,64;\n"
    "  --small: 1,1024,4,4,128 2,2048,8,2,64 (slow paths).\n"
    "  --versus FILE: on 1 rank, lines of tests/perf/torch_sdpa.py (PyTorch\n"
    "  SDPA on one GPU), set beside MKX with the ratio MKX / best; on P\n"
    "  ranks, lines of tests/perf/torch_ring_attn.py (SDPA + NCCL ring on\n"
    "  the same P GPUs), with MKX / ring.\n"
    "  --out FILE.md: appends the table, with date, GPU and MKX_* options.\n"
    "  --no-lse: LSE = NULL.  --graph: also a plan's start replayed from a\n"
    "  CUDA graph.  tests/perf/perf_attn.c says more.\n";

static const shape default_shapes[] = {{4, 4096, 16, 16, 128},
                                       {4, 8192, 16, 16, 128},
                                       {4, 16384, 16, 16, 128},
                                       {1, 16384, 32, 8, 128},
                                       {4, 8192, 16, 16, 64}};
static const shape small_shapes[] = {{1, 1024, 4, 4, 128}, {2, 2048, 8, 2, 64}};

/* ---- arguments ------------------------------------------------------------ */

static int usage_error(const char *what, const char *arg) {
  return perf_usage_error("mkx_perf attn", attn_usage, what, arg);
}

/* "B,S,HQ,HKV,D": 0, or 2 after a message. */
static int parse_shape(const char *v, void *out) {
  shape *sh = out;
  long long b, s, hq, hkv, d;
  char end;
  if (sscanf(v, "%lld,%lld,%lld,%lld,%lld%c", &b, &s, &hq, &hkv, &d, &end) !=
          5 ||
      b < 1 || s < 1 || hq < 1 || hkv < 1 || d < 1)
    return usage_error("--shapes takes B,S,HQ,HKV,D (positive)", v);
  if (hq % hkv) return usage_error("HQ must be a multiple of HKV", v);
  *sh = (shape){b, s, hq, hkv, d};
  return 0;
}

/* 0: run; 1: --help; 2: bad arguments (said on stderr). */
static int parse_args(int argc, char **argv, opts *o) {
  perf_args a;
  perf_args_init(&a);
  memset(o, 0, sizeof *o);
  o->lse = 1;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    if (!strcmp(argv[i], "--no-lse")) {
      o->lse = 0;
      continue;
    }
    const int r =
        perf_common_arg(argc, argv, &i, &a, "mkx_perf attn", attn_usage);
    if (r == 2) return 2;
    if (r == 0) return usage_error("unknown option", argv[i]);
  }
  o->reps = a.reps, o->warmup = a.warmup, o->graph = a.graph;
  o->versus = a.versus, o->outname = a.outname;
  return perf_shapes(&a, parse_shape, sizeof(shape), small_shapes, 2,
                     default_shapes, 5, o->shapes, MAX_SHAPES, &o->ns);
}

/* ---- torch_sdpa.py's and torch_ring_attn.py's lines ---------------------- */

static int backend_index(baseline *bl, const char *name) {
  for (int i = 0; i < bl->nb; i++)
    if (!strcmp(bl->names[i], name)) return i;
  if (bl->nb == MAX_BACKENDS) return -1;
  snprintf(bl->names[bl->nb], sizeof bl->names[0], "%s", name);
  return bl->nb++;
}

/* A "ring" line of torch_ring_attn.py into the fields of an sdpa line
 * (name "ring", tok the compute ms or "unavailable", *ms the serial ms):
 * the count of fields read, as sscanf's for an sdpa line (8: unavailable,
 * 9: a measurement, else neither). */
static int scan_ring(const char *line, char *name, long long *b, long long *s,
                     long long *hq, long long *hkv, long long *d, int *causal,
                     char *tok, double *ms) {
  double ring, tf;
  int n = sscanf(line, "ring %lld %lld %lld %lld %lld %d %63s %lf %lf %lf", b,
                 s, hq, hkv, d, causal, tok, &ring, ms, &tf);
  strcpy(name, "ring");
  if (n >= 7 && !strcmp(tok, "unavailable")) return 8;
  return n == 10 ? 9 : 0;
}

/* Reads FILE (rank 0): sdpa lines, or with ring set ring lines and the
 * header's rank count; 0, or 1 after a message. */
static int load_versus(const char *path, int ring, baseline *bl) {
  char line[512], name[32], tok[64];
  long long b, s, hq, hkv, d;
  int causal;
  double tf;
  FILE *f = fopen(path, "r");
  memset(bl, 0, sizeof *bl);
  if (!f) {
    fprintf(stderr, "mkx_perf attn: --versus %s: %s\n", path, strerror(errno));
    return 1;
  }
  while (fgets(line, sizeof line, f)) {
    int n, avail, bi, p;
    double ms;
    if (ring && sscanf(line, "# torch_ring_attn.py: %d ranks", &p) == 1)
      bl->ranks = p;
    if (ring)
      n = scan_ring(line, name, &b, &s, &hq, &hkv, &d, &causal, tok, &tf);
    else
      n = sscanf(line, "sdpa %31s %lld %lld %lld %lld %lld %d %63s %lf", name,
                 &b, &s, &hq, &hkv, &d, &causal, tok, &tf);
    avail = n == 9 && strcmp(tok, "unavailable");
    if (!avail && !(n >= 8 && !strcmp(tok, "unavailable"))) continue;
    if ((bi = backend_index(bl, name)) < 0) continue;
    ms = !avail ? 0 : ring ? tf : atof(tok);
    if (bl->nl == bl->cap) {
      bl->cap = bl->cap ? 2 * bl->cap : 64;
      bl->lines = realloc(bl->lines, (size_t)bl->cap * sizeof *bl->lines);
      if (!bl->lines) {
        fprintf(stderr, "mkx_perf attn: out of host memory\n");
        fclose(f);
        return 1;
      }
    }
    bl->lines[bl->nl++] =
        (sdpa_line){bi, {b, s, hq, hkv, d}, causal != 0, avail, ms};
  }
  fclose(f);
  if (bl->nl == 0)
    fprintf(stderr, "mkx_perf attn: no %s lines in %s: no baseline\n",
            ring ? "ring" : "sdpa", path);
  return 0;
}

/* The last line of backend bi for this shape (whole sequence) and mask. */
static const sdpa_line *sdpa_find(const baseline *bl, int bi, const shape *sh,
                                  int causal) {
  const sdpa_line *hit = NULL;
  for (int i = 0; i < bl->nl; i++) {
    const sdpa_line *l = &bl->lines[i];
    if (l->backend == bi && l->causal == causal && l->sh.b == sh->b &&
        l->sh.s == sh->s && l->sh.hq == sh->hq && l->sh.hkv == sh->hkv &&
        l->sh.d == sh->d)
      hit = l;
  }
  return hit;
}

/* ---- output --------------------------------------------------------------- */

/* FLOPs of the whole attention: p ranks of s positions each. */
static double attn_flops(const shape *sh, int p, int causal) {
  double seq = (double)p * (double)sh->s;
  return 4.0 * (double)sh->b * (double)sh->hq * seq * seq * (double)sh->d /
         (causal ? 2.0 : 1.0);
}

/* A rate or a time with as many digits as the slow paths need. */
static void num(char *s, size_t len, double x) {
  if (x >= 100)
    perf_cat(s, len, " %.1f |", x);
  else if (x >= 1)
    perf_cat(s, len, " %.2f |", x);
  else
    perf_cat(s, len, " %.3g |", x);
}

/* --versus with torch_sdpa.py's lines (one rank) */
static int versus_on(const env *e, const opts *o) {
  return o->versus && e->size == 1;
}

/* --versus with torch_ring_attn.py's lines (several ranks) */
static int ring_on(const env *e, const opts *o) {
  return o->versus && e->size > 1;
}

/* The ring line of this shape and mask, or NULL. */
static const sdpa_line *ring_find(const env *e, const opts *o,
                                  const baseline *bl, const shape *sh,
                                  int causal) {
  return ring_on(e, o) ? sdpa_find(bl, 0, sh, causal) : NULL;
}

static void print_row(const env *e, const opts *o, const baseline *bl,
                      const perf_bounds *pb, const shape *sh, int causal,
                      const result *r, FILE *out) {
  char line[600] = "";
  double best = 0;
  perf_cat(line, sizeof line, "| %lld,%lld,%lld,%lld,%lld | %d |",
           (long long)sh->b, (long long)sh->s, (long long)sh->hq,
           (long long)sh->hkv, (long long)sh->d, causal);
  num(line, sizeof line, r->tflops);
  perf_cat(line, sizeof line, " %.0f%% |",
           100.0 * r->tflops / pb->engine_tflops);
  for (int bi = 0; versus_on(e, o) && bi < bl->nb; bi++) {
    const sdpa_line *l = sdpa_find(bl, bi, sh, causal);
    if (!l) {
      perf_cat(line, sizeof line, " - |");
    } else if (!l->avail || l->ms <= 0) {
      perf_cat(line, sizeof line, " n/a |");
    } else {
      double tf = attn_flops(sh, 1, causal) / (l->ms * 1e-3) / 1e12;
      if (tf > best) best = tf;
      num(line, sizeof line, tf);
    }
  }
  if (versus_on(e, o)) {
    if (best > 0)
      perf_cat(line, sizeof line, " %.3f |", r->tflops / best);
    else
      perf_cat(line, sizeof line, " - |");
  }
  const sdpa_line *ring = ring_find(e, o, bl, sh, causal);
  int ring_ok = ring && ring->avail && ring->ms > 0;
  if (ring_on(e, o)) {
    if (ring_ok) {
      double tf = attn_flops(sh, e->size, causal) / (ring->ms * 1e-3) / 1e12;
      num(line, sizeof line, tf);
      perf_cat(line, sizeof line, " %.3f |", r->tflops / tf);
    } else {
      perf_cat(line, sizeof line, ring ? " n/a | - |" : " - | - |");
    }
  }
  num(line, sizeof line, r->ms);
  if (ring_on(e, o)) {
    if (ring_ok)
      num(line, sizeof line, ring->ms);
    else
      perf_cat(line, sizeof line, ring ? " n/a |" : " - |");
  }
  if (o->graph) perf_graph_cells(line, sizeof line, r->ms, r->graph_ms);
  perf_cat(line, sizeof line, " %s |\n", r->path);
  fputs(line, stdout);
  fflush(stdout);
  if (out) fputs(line, out), fflush(out);
}

/* Rank 0: the section's title, method, legend and column heads, on stdout
 * and appended to --out (returned, or NULL). */
static FILE *open_table(const env *e, const opts *o, const baseline *bl,
                        const perf_bounds *pb) {
  char head[4096] = "", envs[1024] = "";
  perf_mkx_environment(envs, sizeof envs);
  perf_table_title(e, head, sizeof head);
  char seq[32] = "S"; /* the whole sequence */
  if (e->size > 1) snprintf(seq, sizeof seq, "%d*S", e->size);
  perf_cat(head, sizeof head,
           "MKX_* environment: %s.\n\n"
           "MKX_Ring_attention on device buffers (cudaMalloc), bf16, random "
           "values in [-1, 1], scale 1/sqrt(D), LSE %s; shape B,S,HQ,HKV,D "
           "with S the sequence per rank (whole sequence %s); median of %d "
           "calls (CUDA events on one stream, each call after an MPI barrier), "
           "%d warm-up, slowest rank; TFLOP/s of the whole attention: "
           "4*B*HQ*(%s)^2*D (causal: half) / time; of engine: that rate over "
           "the MKX GEMM engine's, timed in this run (%.0f TFLOP/s, bf16 "
           "8192^3), the compute bound; MKX path: the path the timed calls "
           "took.",
           envs, o->lse ? "written" : "not asked for (NULL)", seq, o->reps,
           o->warmup, seq, pb->engine_tflops);
  if (o->graph) perf_cat(head, sizeof head, "  %s", perf_graph_legend);
  if (versus_on(e, o))
    perf_cat(head, sizeof head,
             "  Beside it, TFLOP/s of PyTorch SDPA per backend on the same GPU "
             "(`tests/perf/torch_sdpa.py`, lines of `%s`, from its ms and the "
             "same FLOP count; n/a: unavailable there, -: not in the file); "
             "MKX / best: MKX over the fastest backend.",
             o->versus);
  if (ring_on(e, o))
    perf_cat(
        head, sizeof head,
        "  Beside it, what a user runs instead on the same %d GPUs "
        "(`tests/perf/torch_ring_attn.py`, lines of `%s`): PyTorch SDPA "
        "(cuDNN, else flash) of each rank's Q against each K/V chunk in "
        "turn, the partial outputs merged by their LSE in fp32, the chunks "
        "passed to the next rank by NCCL, compute and exchange serially; "
        "ring TFLOP/s from its serial ms and the same FLOP count (n/a: "
        "unavailable there, -: not in the file); MKX / ring: MKX over it.",
        e->size, o->versus);
  perf_cat(head, sizeof head,
           "\n\n| shape | causal | MKX TFLOP/s | of engine |");
  for (int bi = 0; versus_on(e, o) && bi < bl->nb; bi++)
    perf_cat(head, sizeof head, " %s |", bl->names[bi]);
  if (versus_on(e, o)) perf_cat(head, sizeof head, " MKX / best |");
  if (ring_on(e, o))
    perf_cat(head, sizeof head, " ring TFLOP/s | MKX / ring |");
  perf_cat(head, sizeof head, " MKX ms |%s%s MKX path |\n|---|---:|---:|---:|",
           ring_on(e, o) ? " ring serial ms |" : "",
           o->graph ? " graph ms | MKX / graph |" : "");
  for (int bi = 0; versus_on(e, o) && bi < bl->nb; bi++)
    perf_cat(head, sizeof head, "---:|");
  if (versus_on(e, o)) perf_cat(head, sizeof head, "---:|");
  if (ring_on(e, o)) perf_cat(head, sizeof head, "---:|---:|");
  perf_cat(head, sizeof head, "---:|%s%s---|\n", ring_on(e, o) ? "---:|" : "",
           o->graph ? "---:|---:|" : "");
  return perf_table_open(head, o->outname);
}

/* ---- the job -------------------------------------------------------------- */

typedef struct bufs {
  void *q, *k, *v, *o;
  float *lse;
} bufs;

static void bufs_alloc(const env *e, const opts *o, const shape *sh, bufs *b) {
  size_t rows = (size_t)(sh->b * sh->s);
  size_t nq = rows * (size_t)(sh->hq * sh->d),
         nk = rows * (size_t)(sh->hkv * sh->d);
  uint64_t seed = 1000u * (uint64_t)(e->rank + 1);
  memset(b, 0, sizeof *b);
  AK(cudaMalloc(&b->q, nq * 2));
  AK(cudaMalloc(&b->k, nk * 2));
  AK(cudaMalloc(&b->v, nk * 2));
  AK(cudaMalloc(&b->o, nq * 2));
  AK(cudaMemsetAsync(b->o, 0, nq * 2, e->st));
  if (o->lse) AK(cudaMalloc((void **)&b->lse, rows * (size_t)sh->hq * 4));
  perf_fill_bf16(b->q, nq, seed + 1, e->st);
  perf_fill_bf16(b->k, nk, seed + 2, e->st);
  perf_fill_bf16(b->v, nk, seed + 3, e->st);
}

static void bufs_free(bufs *b) {
  AK(cudaFree(b->q));
  AK(cudaFree(b->k));
  AK(cudaFree(b->v));
  AK(cudaFree(b->o));
  AK(cudaFree(b->lse));
}

static void call(const env *e, const shape *sh, int causal, const bufs *b) {
  AM(MKX_Ring_attention(b->q, b->k, b->v, b->o, b->lse, sh->b, sh->s, sh->hq,
                        sh->hkv, sh->d, causal, 0.0, MKX_BF16, e->mkx, e->st));
}

/* One call of bench's case. */
typedef struct call_ctx {
  const shape *sh;
  int causal;
  const bufs *b;
} call_ctx;

static void timed_call(const env *e, const void *ctx) {
  const call_ctx *c = ctx;
  call(e, c->sh, c->causal, c->b);
}

static void bench(const env *e, const opts *o, const shape *sh, int causal,
                  const bufs *b, result *r) {
  const call_ctx c = {sh, causal, b};
  const float med = perf_time_calls(e, o->warmup, o->reps, timed_call, &c,
                                    r->path, sizeof r->path);
  r->ms = med;
  r->tflops = attn_flops(sh, e->size, causal) / (med * 1e-3) / 1e12;
  r->graph_ms = -1;
  if (!o->graph) return;
  MKX_Request req;
  AM(MKX_Ring_attention_init(b->q, b->k, b->v, b->o, b->lse, sh->b, sh->s,
                             sh->hq, sh->hkv, sh->d, causal, 0.0, MKX_BF16,
                             e->mkx, MPI_INFO_NULL, &req));
  r->graph_ms = perf_time_graph(e, o->warmup, o->reps, req);
  AM(MKX_Request_free(&req));
}

int mkx_perf_attn(int argc, char **argv) {
  opts o;
  env e;
  baseline bl;
  int rc = parse_args(argc, argv, &o);
  if (rc == 1) fputs(attn_usage, stdout);
  if (rc) return rc == 1 ? 0 : rc;
  if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
    fprintf(stderr, "mkx_perf attn: MPI_Init failed\n");
    return 1;
  }
  if ((rc = perf_env_init(&e, "mkx_perf attn")) != 0) {
    AI(MPI_Finalize());
    return rc;
  }
  memset(&bl, 0, sizeof bl);
  if (e.rank == 0 && o.versus && load_versus(o.versus, e.size > 1, &bl))
    MPI_Abort(MPI_COMM_WORLD, 2);
  if (e.rank == 0 && ring_on(&e, &o) && bl.ranks && bl.ranks != e.size) {
    fprintf(stderr,
            "mkx_perf attn: --versus %s: the ring ran on %d ranks, this job "
            "has %d: no baseline\n",
            o.versus, bl.ranks, e.size);
    bl.nl = bl.nb = 0;
  }
  perf_bounds pb;
  perf_bounds_measure(&e, &pb);
  FILE *out = e.rank == 0 ? open_table(&e, &o, &bl, &pb) : NULL;
  for (int i = 0; i < o.ns; i++) {
    bufs b;
    bufs_alloc(&e, &o, &o.shapes[i], &b);
    for (int causal = 0; causal < 2; causal++) {
      result r;
      bench(&e, &o, &o.shapes[i], causal, &b, &r);
      if (e.rank == 0)
        print_row(&e, &o, &bl, &pb, &o.shapes[i], causal, &r, out);
    }
    bufs_free(&b);
  }
  if (out && fclose(out) != 0) {
    fprintf(stderr, "mkx_perf attn: --out %s: %s\n", o.outname,
            strerror(errno));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  free(bl.lines);
  perf_env_fini(&e);
  AI(MPI_Finalize());
  return 0;
}
