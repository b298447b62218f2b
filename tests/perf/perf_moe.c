/*
 * mkx_perf moe: MKX_Moe_layer and MKX_Moe_dispatch_gemm on device buffers,
 * timed (run with `mpirun -np P mkx_perf moe ...`; one rank is the main
 * case, any number of ranks works, one GPU per rank or several ranks on one
 * GPU under MPS).
 *
 *   mkx_perf moe [--shapes T,H,E,K,F ...] [--small] [--reps N] [--warmup N]
 *                [--versus FILE] [--out FILE.md] [--skew] [--graph] [--fp8]
 *                [--help]
 *
 * --fp8 (one rank): also MKX_Moe_layer_scaled with e4m3 tokens and weights
 * stored transposed (MKX_TRANS, DeepSeek's fp8 checkpoints' layout), block
 * scales (1 x 128 of X, 128 x 128 of W1 and W2, random in [2^-6, 2^-5)),
 * out bf16, on the same routing: "fp8 layer ms", its TFLOP/s (the same
 * count), "bf16 / fp8" (the bf16 layer's time over the fp8 layer's) and
 * "fp8 at bound" (the experts' weights read once in fp8 over its time).
 * The fp8 layer runs on the GPU with MKX_MOE_FP8=yes (else staged: the
 * path column says which).
 *
 * --graph: also a plan of each call (MKX_Moe_layer_init,
 * MKX_Moe_dispatch_gemm_init) whose MKX_Start is captured once into a CUDA
 * graph and replayed the same way: per call "graph ms" and "MKX / graph"
 * (the call's time over the replay's; "-" where the path may not be
 * captured: the MoE calls only with MKX_MOE_SYNC=no).
 *
 * Each call's time also against its physical bound: the rank's experts
 * that receive rows, their weights read once at the GPU's HBM bandwidth,
 * or the GEMMs at the MKX engine's rate timed in the same run, whichever
 * is longer ("bound ms", and "at bound" = bound / time).
 *
 * --skew: every token's first expert is expert 0, the others uniformly
 * random (expert 0 then takes 1/K of the rows, the most one expert can with
 * distinct experts per token), for the skewed against uniform time.
 *
 * Shapes T,H,E,K,F: tokens per rank, hidden size, experts in all (a
 * multiple of P), experts per token (top-k, at most E), FFN size of one
 * expert.  By default 4096,7168,256,8,2048 (DeepSeek-V3-like) and
 * 4096,4096,8,2,14336 (Mixtral-like); --small: 1024,2048,8,2,4096 and
 * 512,1024,16,4,512 (for slow paths); --shapes replaces the default list
 * (with --small: the small list, then these).
 *
 * For each shape, on each rank (a different seed per rank), in cudaMalloc'd
 * memory: X (T x H), W1 (E/P x H x 2F) and W2 (E/P x F x H), bf16 in
 * [-1, 1] from perf_fill_bf16 (a random block replicated on the device:
 * setting up weights of several GB stays fast while the values stay random,
 * which the GPU's power draw, and so its clock, depends on); for each token
 * K distinct expert ids, uniformly random (int32), and gate weights, random,
 * positive, summing to 1 (fp32).  MKX_Moe_layer writes out (T x H, bf16).
 * MKX_Moe_dispatch_gemm multiplies by W1 itself (n = 2F: the work of the
 * layer's first GEMM, without a third weight array of W1's size), gate
 * weights given, origin NULL, expert_rows (int64) on the device, and Y with
 * room for T*K*P rows: no rank can receive more (each of the P ranks sends
 * each of its tokens to at most K experts), so the call never truncates.
 * The communicator's options come from the MKX_* environment only.
 * For each call: --warmup calls (default 2), then --reps timed calls
 * (default 10) on one non-blocking stream, each after a stream
 * synchronisation and an MPI barrier, between two CUDA events; the second
 * is recorded after the call returns, so the host work inside a call (the
 * wait for its routing, a staged call's exchange and compute) is in its
 * time.  Reported: the median of each rank, the slowest rank
 * (MPI_Allreduce MAX), in ms and in TFLOP/s of the expert GEMMs per rank,
 *     layer:    2*R*H*2F + 2*R*F*H
 *     dispatch: 2*R*H*2F
 * with R = T*K: every row of a rank's tokens on one rank; on P ranks the
 * rows a rank's experts receive on average (the exact count varies with
 * the routing).  Routing, gathers, SwiGLU, combine and exchanges are in
 * the time, not in the count.  The column "MKX path" names the path the
 * timed calls took (ops/path.h, counted on rank 0; "layer: ..., dispatch:
 * ..." when the two calls took different ones).
 *
 * --versus FILE, on one rank: lines of tests/perf/torch_moe.py
 *     moe T H E K F chain_ms w1_ms w2_ms
 *     moe T H E K F unavailable <why>
 * (other lines are skipped; of several lines of one shape, the last).  The
 * table gets "PyTorch chain ms" (the layer as a PyTorch user writes it
 * around torch._grouped_mm), "its two GEMMs ms" (w1_ms + w2_ms),
 * "chain / MKX layer" (the chain's ms over MKX_Moe_layer's: MKX's
 * speed-up), and the TFLOP/s of torch._grouped_mm for W1 and for W2 from
 * w1_ms and w2_ms with the counts above ("n/a": unavailable there, "-": not
 * in the file).  With --fp8 also its moe8 lines (the chain in fp8 around
 * torch._scaled_grouped_mm): "PyTorch fp8 chain ms" and "fp8 chain / MKX
 * fp8 layer".  On several ranks --versus is ignored, with a note: the
 * script runs on one GPU.
 *
 * --out FILE.md appends a section: date (UTC), GPU name, ranks and GPUs,
 * whether ranks share a GPU (GPU UUIDs compared over MPI_Allgather; MPS or
 * time slices as MKX sees it), the MKX_* variables set, the method, and the
 * table; its rows are written as each is measured.
 *
 * Exit: 0; 2 bad arguments (sizes over 2^24, K over E, E not a multiple of
 * P, a buffer over MKX's 2^40 elements included) or an unreadable --versus
 * file; 77 no GPU on some rank (MKX runs the host path there, and this
 * benchmark times device buffers); 1 on any failure of a CUDA, MPI or MKX
 * call (the MKX error string and message are printed).
 */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <errno.h>
#include <mpi.h>
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

enum { MAX_SHAPES = PERF_MAX_SHAPES };
enum { OP_LAYER, OP_DISPATCH, OP_COUNT };

typedef struct shape {
  int64_t t, h, e, k, f; /* t: tokens per rank; e: experts of the job */
} shape;

typedef struct opts {
  shape shapes[MAX_SHAPES];
  int ns, reps, warmup;
  int skew;  /* --skew: every token's first expert is expert 0 */
  int graph; /* --graph */
  int fp8;   /* --fp8 */
  const char *versus, *outname;
} opts;

typedef perf_env env;

/* One line of torch_moe.py. */
typedef struct moe_line {
  shape sh;
  int fp8; /* a moe8 line: the chain in fp8 */
  int avail;
  double chain_ms, w1_ms, w2_ms;
} moe_line;

typedef struct baseline {
  int nl, cap;
  moe_line *lines;
} baseline;

typedef struct result {
  double ms[OP_COUNT], tflops[OP_COUNT]; /* slowest rank's medians */
  double bound_ms[OP_COUNT];   /* the physical bound (bound_of), slowest rank */
  double graph_ms[OP_COUNT];   /* --graph: the replay's, -1: not captured */
  char path[OP_COUNT][160];    /* the paths the timed calls took (rank 0) */
  double fp8_ms, fp8_bound_ms; /* --fp8 */
  char fp8_path[160];
} result;

static const char moe_usage[] =
    "usage: mpirun -np P mkx_perf moe [--shapes T,H,E,K,F ...] [--small]\n"
    "         [--reps N] [--warmup N] [--versus FILE] [--out FILE.md]\n"
    "  MKX_Moe_layer and MKX_Moe_dispatch_gemm on device buffers (bf16):\n"
    "  median of N timed calls (default 10, after 2 warm-up calls), slowest\n"
    "  rank, TFLOP/s of the expert GEMMs per rank with R = T*K rows: layer\n"
    "  2*R*H*2F + 2*R*F*H, dispatch (by W1, n = 2F) 2*R*H*2F.  T tokens per\n"
    "  rank, H hidden, E experts (a multiple of P), K experts per token, F\n"
    "  FFN size.  Default shapes: 4096,7168,256,8,2048 4096,4096,8,2,14336;\n"
    "  --small: 1024,2048,8,2,4096 512,1024,16,4,512 (slow paths).\n"
    "  --versus FILE: on 1 rank, lines of tests/perf/torch_moe.py (the layer\n"
    "  in PyTorch around torch._grouped_mm on one GPU), set beside MKX with\n"
    "  the ratio chain / MKX layer.\n"
    "  --out FILE.md: appends the table, with date, GPU and MKX_* options.\n"
    "  --skew: every token's first expert is expert 0 (the most one expert\n"
    "  can take with distinct experts per token: 1/K of the rows).\n"
    "  --graph: also each call's plan replayed from a CUDA graph\n"
    "  (MKX_MOE_SYNC=no).\n"
    "  --fp8 (one rank): also the layer in fp8 (e4m3, weights transposed,\n"
    "  block scales) beside the bf16 layer.  tests/perf/perf_moe.c says "
    "more.\n";

static const shape default_shapes[] = {{4096, 7168, 256, 8, 2048},
                                       {4096, 4096, 8, 2, 14336}};
static const shape small_shapes[] = {{1024, 2048, 8, 2, 4096},
                                     {512, 1024, 16, 4, 512}};

/* ---- arguments ----------------------------------------------------------- */

static int usage_error(const char *what, const char *arg) {
  return perf_usage_error("mkx_perf moe", moe_usage, what, arg);
}

/* "T,H,E,K,F": 0, or 2 after a message.  The bound keeps expert ids in
 * int32 and the products of two sizes in int64 (check_shapes bounds the
 * buffers). */
static int parse_shape(const char *v, void *out) {
  shape *sh = out;
  long long t, h, e, k, f;
  char end;
  const long long big = 1LL << 24;
  if (sscanf(v, "%lld,%lld,%lld,%lld,%lld%c", &t, &h, &e, &k, &f, &end) != 5 ||
      t < 1 || h < 1 || e < 1 || k < 1 || f < 1)
    return usage_error("--shapes takes T,H,E,K,F (positive)", v);
  if (t > big || h > big || e > big || k > big || f > big)
    return usage_error("a size of --shapes is over 2^24", v);
  if (k > e) return usage_error("K (experts per token) is over E", v);
  *sh = (shape){t, h, e, k, f};
  return 0;
}

/* 0: run; 1: --help; 2: bad arguments (said on stderr). */
static int parse_args(int argc, char **argv, opts *o) {
  perf_args a;
  perf_args_init(&a);
  memset(o, 0, sizeof *o);
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    if (!strcmp(argv[i], "--skew")) {
      o->skew = 1;
      continue;
    }
    if (!strcmp(argv[i], "--fp8")) {
      o->fp8 = 1;
      continue;
    }
    const int r =
        perf_common_arg(argc, argv, &i, &a, "mkx_perf moe", moe_usage);
    if (r == 2) return 2;
    if (r == 0) return usage_error("unknown option", argv[i]);
  }
  o->reps = a.reps, o->warmup = a.warmup, o->graph = a.graph;
  o->versus = a.versus, o->outname = a.outname;
  return perf_shapes(&a, parse_shape, sizeof(shape), small_shapes, 2,
                     default_shapes, 2, o->shapes, MAX_SHAPES, &o->ns);
}

/* Every shape fits the job of p ranks: E a multiple of p, and no buffer
 * over MKX's 2^40 elements.  0, or 2 after a message on rank 0 (every rank
 * decides alike). */
static int check_shapes(const opts *o, int rank, int p) {
  for (int i = 0; i < o->ns; i++) {
    const shape *sh = &o->shapes[i];
    double el = (double)(sh->e / p), f = (double)sh->f, h = (double)sh->h;
    double rows = (double)sh->t * (double)sh->k * p;
    const char *why = NULL;
    if (sh->e % p)
      why = "E is not a multiple of the ranks";
    else if (el * h * 2 * f > 0x1p40 || rows * 2 * f > 0x1p40 ||
             (double)sh->t * h > 0x1p40)
      why = "a buffer is over 2^40 elements";
    if (!why) continue;
    if (rank == 0)
      fprintf(stderr,
              "mkx_perf moe: shape %lld,%lld,%lld,%lld,%lld on %d rank%s: "
              "%s\n",
              (long long)sh->t, (long long)sh->h, (long long)sh->e,
              (long long)sh->k, (long long)sh->f, p, p > 1 ? "s" : "", why);
    return 2;
  }
  return 0;
}

/* ---- torch_moe.py's lines ------------------------------------------------ */

static int add_line(baseline *bl, const moe_line *l) {
  if (bl->nl == bl->cap) {
    int cap = bl->cap ? 2 * bl->cap : 64;
    moe_line *p = realloc(bl->lines, (size_t)cap * sizeof *p);
    if (!p) return 1;
    bl->lines = p, bl->cap = cap;
  }
  bl->lines[bl->nl++] = *l;
  return 0;
}

/* One line into *l: 1 if it is a moe or moe8 line (measured or
 * unavailable). */
static int scan_line(const char *line, moe_line *l) {
  long long t, h, e, k, f;
  char tok[64];
  double w1, w2;
  const int fp8 = !strncmp(line, "moe8 ", 5);
  if (!fp8 && strncmp(line, "moe ", 4)) return 0;
  int n = sscanf(line + (fp8 ? 5 : 4), "%lld %lld %lld %lld %lld %63s %lf %lf",
                 &t, &h, &e, &k, &f, tok, &w1, &w2);
  if (n < 6) return 0;
  memset(l, 0, sizeof *l);
  l->sh = (shape){t, h, e, k, f};
  l->fp8 = fp8;
  if (!strcmp(tok, "unavailable")) return 1;
  if (n != 8) return 0;
  l->avail = 1, l->chain_ms = atof(tok), l->w1_ms = w1, l->w2_ms = w2;
  return 1;
}

/* Reads FILE (rank 0): 0, or 1 after a message. */
static int load_versus(const char *path, baseline *bl) {
  char line[512];
  moe_line l;
  FILE *f = fopen(path, "r");
  memset(bl, 0, sizeof *bl);
  if (!f) {
    fprintf(stderr, "mkx_perf moe: --versus %s: %s\n", path, strerror(errno));
    return 1;
  }
  while (fgets(line, sizeof line, f))
    if (scan_line(line, &l) && add_line(bl, &l)) {
      fprintf(stderr, "mkx_perf moe: out of host memory\n");
      fclose(f);
      return 1;
    }
  fclose(f);
  if (bl->nl == 0)
    fprintf(stderr, "mkx_perf moe: no moe lines in %s: no baseline\n", path);
  return 0;
}

static const moe_line *find_line(const baseline *bl, const shape *sh, int fp8) {
  const moe_line *hit = NULL;
  for (int i = 0; i < bl->nl; i++) {
    const shape *s = &bl->lines[i].sh;
    if (s->t == sh->t && s->h == sh->h && s->e == sh->e && s->k == sh->k &&
        s->f == sh->f && bl->lines[i].fp8 == fp8)
      hit = &bl->lines[i];
  }
  return hit;
}

/* ---- output -------------------------------------------------------------- */

/* FLOPs of the W1 product (gate and up columns) over a rank's rows. */
static double w1_flops(const shape *sh) {
  return 2.0 * (double)(sh->t * sh->k) * (double)sh->h * 2.0 * (double)sh->f;
}

static double w2_flops(const shape *sh) {
  return 2.0 * (double)(sh->t * sh->k) * (double)sh->f * (double)sh->h;
}

static double op_flops(const shape *sh, int op) {
  return op == OP_LAYER ? w1_flops(sh) + w2_flops(sh) : w1_flops(sh);
}

static double tflops(double flops, double ms) {
  return flops / (ms * 1e-3) / 1e12;
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

static int versus_on(const env *e, const opts *o) {
  return o->versus && e->size == 1;
}

static int fp8_on(const env *e, const opts *o) {
  return o->fp8 && e->size == 1;
}

/* The baseline's columns of one shape. */
static void versus_cells(const baseline *bl, const shape *sh, const result *r,
                         char *s, size_t len) {
  const moe_line *l = find_line(bl, sh, 0);
  if (!l) {
    perf_cat(s, len, " - | - | - | - | - |");
  } else if (!l->avail || l->chain_ms <= 0 || l->w1_ms <= 0 || l->w2_ms <= 0) {
    perf_cat(s, len, " n/a | n/a | - | n/a | n/a |");
  } else {
    num(s, len, l->chain_ms);
    num(s, len, l->w1_ms + l->w2_ms);
    perf_cat(s, len, " %.3f |", l->chain_ms / r->ms[OP_LAYER]);
    num(s, len, tflops(w1_flops(sh), l->w1_ms));
    num(s, len, tflops(w2_flops(sh), l->w2_ms));
  }
}

/* The fp8 baseline's columns of one shape (moe8 lines). */
static void versus8_cells(const baseline *bl, const shape *sh, const result *r,
                          char *s, size_t len) {
  const moe_line *l = find_line(bl, sh, 1);
  if (!l)
    perf_cat(s, len, " - | - |");
  else if (!l->avail || l->chain_ms <= 0)
    perf_cat(s, len, " n/a | - |");
  else {
    num(s, len, l->chain_ms);
    perf_cat(s, len, " %.3f |", l->chain_ms / r->fp8_ms);
  }
}

static void print_row(const env *e, const opts *o, const baseline *bl,
                      const shape *sh, const result *r, FILE *out) {
  char line[800] = "";
  perf_cat(line, sizeof line, "| %lld,%lld,%lld,%lld,%lld |", (long long)sh->t,
           (long long)sh->h, (long long)sh->e, (long long)sh->k,
           (long long)sh->f);
  for (int op = 0; op < OP_COUNT; op++) {
    num(line, sizeof line, r->ms[op]);
    num(line, sizeof line, r->tflops[op]);
  }
  for (int op = 0; op < OP_COUNT; op++) {
    num(line, sizeof line, r->bound_ms[op]);
    perf_cat(line, sizeof line, " %.0f%% |",
             100.0 * r->bound_ms[op] / r->ms[op]);
  }
  if (versus_on(e, o)) versus_cells(bl, sh, r, line, sizeof line);
  for (int op = 0; o->graph && op < OP_COUNT; op++)
    perf_graph_cells(line, sizeof line, r->ms[op], r->graph_ms[op]);
  if (fp8_on(e, o) && r->fp8_ms <= 0) {
    perf_cat(line, sizeof line, " - | - | - | - |");
  } else if (fp8_on(e, o)) {
    num(line, sizeof line, r->fp8_ms);
    num(line, sizeof line, tflops(op_flops(sh, OP_LAYER), r->fp8_ms));
    perf_cat(line, sizeof line, " %.3f | %.0f%% |", r->ms[OP_LAYER] / r->fp8_ms,
             100.0 * r->fp8_bound_ms / r->fp8_ms);
  }
  if (fp8_on(e, o) && versus_on(e, o) && r->fp8_ms > 0)
    versus8_cells(bl, sh, r, line, sizeof line);
  else if (fp8_on(e, o) && versus_on(e, o))
    perf_cat(line, sizeof line, " - | - |");
  if (fp8_on(e, o) && strcmp(r->fp8_path, r->path[OP_LAYER]))
    perf_cat(line, sizeof line, " layer: %s, dispatch: %s, fp8 layer: %s |\n",
             r->path[OP_LAYER], r->path[OP_DISPATCH], r->fp8_path);
  else if (!strcmp(r->path[OP_LAYER], r->path[OP_DISPATCH]))
    perf_cat(line, sizeof line, " %s |\n", r->path[OP_LAYER]);
  else
    perf_cat(line, sizeof line, " layer: %s, dispatch: %s |\n",
             r->path[OP_LAYER], r->path[OP_DISPATCH]);
  fputs(line, stdout);
  fflush(stdout);
  if (out) fputs(line, out), fflush(out);
}

static void table_method(const env *e, const opts *o, const perf_bounds *pb,
                         char *s, size_t len) {
  char envs[1024] = "";
  perf_mkx_environment(envs, sizeof envs);
  perf_cat(
      s, len,
      "MKX_* environment: %s.\n\n"
      "MKX_Moe_layer (SwiGLU experts, out bf16) and MKX_Moe_dispatch_gemm "
      "(by W1, n = 2F, gate weights given, origin NULL, Y with room for "
      "T*K*P rows) on device buffers (cudaMalloc), bf16, random values in "
      "[-1, 1], P = %d rank%s; shape T,H,E,K,F: tokens per rank, hidden, "
      "experts of the job (E/P per rank), experts per token, FFN size; K "
      "distinct experts per token, %s, random positive gate "
      "weights summing to 1; median of %d calls (CUDA events on one stream, "
      "each call after an MPI barrier), %d warm-up, slowest rank; TFLOP/s of "
      "the expert GEMMs per rank with R = T*K rows%s: layer 2*R*H*2F + "
      "2*R*F*H, dispatch 2*R*H*2F; MKX path: the path the timed calls took.",
      envs, e->size, e->size > 1 ? "s" : "",
      o->skew ? "skewed: the first expert 0, the others uniformly random"
              : "uniformly random",
      o->reps, o->warmup,
      e->size > 1 ? " (the average a rank's experts receive)" : "");
  perf_cat(s, len,
           "  Bound: the larger of reading the weights of the rank's experts "
           "that receive rows once at the GPU's HBM bandwidth (%.2f TB/s, "
           "from its memory clock and bus width; layer W1 and W2, dispatch "
           "W1) and the GEMMs' FLOPs at the MKX GEMM engine's rate timed in "
           "this run (%.0f TFLOP/s, bf16 8192^3); at bound: bound / time.",
           pb->hbm_bytes_s / 1e12, pb->engine_tflops);
  if (o->graph) perf_cat(s, len, "  %s", perf_graph_legend);
  if (fp8_on(e, o))
    perf_cat(s, len,
             "  fp8: MKX_Moe_layer_scaled on the same routing with e4m3 X, "
             "W1 and W2 stored transposed (MKX_TRANS), block scales (1 x 128 "
             "of X, 128 x 128 of the weights), out bf16; bf16 / fp8: the "
             "bf16 layer's time over it; fp8 at bound: the experts' weights "
             "read once in fp8 at the HBM bandwidth, or its GEMMs at twice "
             "the engine's bf16 rate, whichever is longer, over its time; "
             "- where the fp8 layer would take the staged path (not timed: "
             "option moe_fp8=no, or operands the GPU path refuses).");
  if (versus_on(e, o))
    perf_cat(
        s, len,
        "  Beside it, the layer as a PyTorch user writes it on the same GPU "
        "(`tests/perf/torch_moe.py`, lines of `%s`): a stable argsort of the "
        "expert ids, the rows gathered, torch._grouped_mm by W1, SwiGLU, "
        "torch._grouped_mm by W2, the gate weights applied and the rows added "
        "back to their tokens in fp32; its two GEMMs timed alone, and their "
        "TFLOP/s with the same counts (n/a: unavailable there, -: not in the "
        "file); chain / MKX layer: the chain's time over MKX_Moe_layer's.",
        o->versus);
  if (fp8_on(e, o) && versus_on(e, o))
    perf_cat(s, len,
             "  PyTorch fp8 chain: the same chain with "
             "torch._scaled_grouped_mm on e4m3 rows and weights, one scale "
             "per row of X and of the activation and per expert and column "
             "of the weights (its moe8 lines; n/a: unavailable there); fp8 "
             "chain / MKX fp8 layer: its time over MKX_Moe_layer_scaled's.");
}

static void table_heads(const env *e, const opts *o, char *s, size_t len) {
  perf_cat(s, len,
           "\n\n| shape T,H,E,K,F | MKX layer ms | MKX layer TFLOP/s "
           "| MKX dispatch ms | MKX dispatch TFLOP/s | layer bound ms "
           "| layer at bound | dispatch bound ms | dispatch at bound |");
  if (versus_on(e, o))
    perf_cat(s, len,
             " PyTorch chain ms | its two GEMMs ms | chain / MKX layer "
             "| torch W1 TFLOP/s | torch W2 TFLOP/s |");
  if (o->graph)
    perf_cat(s, len,
             " layer graph ms | layer MKX / graph | dispatch graph ms "
             "| dispatch MKX / graph |");
  if (fp8_on(e, o))
    perf_cat(s, len,
             " fp8 layer ms | fp8 layer TFLOP/s | bf16 / fp8 | fp8 at bound "
             "|");
  if (fp8_on(e, o) && versus_on(e, o))
    perf_cat(s, len, " PyTorch fp8 chain ms | fp8 chain / MKX fp8 layer |");
  perf_cat(s, len,
           " MKX path |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|");
  if (versus_on(e, o)) perf_cat(s, len, "---:|---:|---:|---:|---:|");
  if (o->graph) perf_cat(s, len, "---:|---:|---:|---:|");
  if (fp8_on(e, o)) perf_cat(s, len, "---:|---:|---:|---:|");
  if (fp8_on(e, o) && versus_on(e, o)) perf_cat(s, len, "---:|---:|");
  perf_cat(s, len, "---|\n");
}

/* Rank 0: the section's title, method, legend and column heads, on stdout
 * and appended to --out (returned, or NULL). */
static FILE *open_table(const env *e, const opts *o, const perf_bounds *pb) {
  char head[8192] = "";
  perf_table_title(e, head, sizeof head);
  table_method(e, o, pb, head, sizeof head);
  table_heads(e, o, head, sizeof head);
  return perf_table_open(head, o->outname);
}

/* ---- the job ------------------------------------------------------------- */

typedef struct bufs {
  void *x, *w1, *w2, *out, *y;
  int32_t *ids;
  float *wts;
  int64_t *expert_rows;
  int64_t y_rows;
} bufs;

static uint64_t next_random(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* For each token K distinct experts, each K-subset equally likely: the
 * first K places of a partial Fisher-Yates shuffle of perm, which stays a
 * permutation of [0, E) from token to token, so it is never reset.  Gate
 * weights in (0, 1], then scaled to sum to 1 as a softmax over the chosen
 * experts would. */
static void make_routing(const shape *sh, uint64_t seed, int skew, int32_t *ids,
                         float *wts, int32_t *perm) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
  for (int64_t x = 0; x < sh->e; x++) perm[x] = (int32_t)x;
  for (int64_t t = 0; t < sh->t; t++) {
    float sum = 0;
    for (int64_t j = 0; j < sh->k; j++) {
      int64_t pick = j + (int64_t)(next_random(&s) % (uint64_t)(sh->e - j));
      if (skew && j == 0) /* expert 0 first, wherever the shuffles put it */
        for (pick = 0; perm[pick] != 0; pick++) continue;
      int32_t keep = perm[j];
      perm[j] = perm[pick], perm[pick] = keep;
      ids[t * sh->k + j] = perm[j];
      wts[t * sh->k + j] = (float)((next_random(&s) >> 40) + 1) / 16777216.0f;
      sum += wts[t * sh->k + j];
    }
    for (int64_t j = 0; j < sh->k; j++) wts[t * sh->k + j] /= sum;
  }
}

static void routing_upload(const env *e, const shape *sh, uint64_t seed,
                           int skew, bufs *b, int *used) {
  size_t n = (size_t)(sh->t * sh->k);
  int32_t *ids = malloc(n * sizeof *ids), *perm = malloc((size_t)sh->e * 4);
  float *wts = malloc(n * sizeof *wts);
  if (!ids || !perm || !wts) {
    fprintf(stderr, "mkx_perf moe: out of host memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  make_routing(sh, seed, skew, ids, wts, perm);
  for (size_t i = 0; i < n; i++) used[ids[i]] = 1;
  AK(cudaMalloc((void **)&b->ids, n * sizeof *ids));
  AK(cudaMalloc((void **)&b->wts, n * sizeof *wts));
  AK(cudaMemcpyAsync(b->ids, ids, n * sizeof *ids, cudaMemcpyHostToDevice,
                     e->st));
  AK(cudaMemcpyAsync(b->wts, wts, n * sizeof *wts, cudaMemcpyHostToDevice,
                     e->st));
  AK(cudaStreamSynchronize(e->st));
  free(ids);
  free(perm);
  free(wts);
}

static void bufs_alloc(const env *e, const shape *sh, int skew, bufs *b,
                       int *used) {
  size_t el = (size_t)(sh->e / e->size);
  size_t nx = (size_t)(sh->t * sh->h), nw1 = el * (size_t)(sh->h * 2 * sh->f),
         nw2 = el * (size_t)(sh->f * sh->h);
  uint64_t seed = 1000u * (uint64_t)(e->rank + 1);
  memset(b, 0, sizeof *b);
  b->y_rows = sh->t * sh->k * e->size;
  AK(cudaMalloc(&b->x, nx * 2));
  AK(cudaMalloc(&b->w1, nw1 * 2));
  AK(cudaMalloc(&b->w2, nw2 * 2));
  AK(cudaMalloc(&b->out, nx * 2));
  AK(cudaMalloc(&b->y, (size_t)b->y_rows * (size_t)(2 * sh->f) * 2));
  AK(cudaMalloc((void **)&b->expert_rows, el * sizeof *b->expert_rows));
  perf_fill_bf16(b->x, nx, seed + 1, e->st);
  perf_fill_bf16(b->w1, nw1, seed + 2, e->st);
  perf_fill_bf16(b->w2, nw2, seed + 3, e->st);
  routing_upload(e, sh, seed + 4, skew, b, used);
}

/* The physical bound of op on this rank (ms): its experts that receive
 * rows from any rank (used[], the job's), their weights read once, or the
 * GEMMs at the engine's rate, whichever takes longer; the slowest rank's. */
static double bound_of(const env *e, const shape *sh, int op, const int *used,
                       const perf_bounds *pb) {
  const int64_t el = sh->e / e->size;
  int64_t active = 0;
  for (int64_t x = e->rank * el; x < (e->rank + 1) * el; x++) active += used[x];
  const double per_expert = (op == OP_LAYER ? 3.0 : 2.0) * (double)sh->h *
                            (double)sh->f * 2.0; /* bf16 bytes */
  const double read_ms = (double)active * per_expert / pb->hbm_bytes_s * 1e3;
  const double gemm_ms = op_flops(sh, op) / (pb->engine_tflops * 1e12) * 1e3;
  double ms = read_ms > gemm_ms ? read_ms : gemm_ms;
  AI(MPI_Allreduce(MPI_IN_PLACE, &ms, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  return ms;
}

static void bufs_free(bufs *b) {
  AK(cudaFree(b->x));
  AK(cudaFree(b->w1));
  AK(cudaFree(b->w2));
  AK(cudaFree(b->out));
  AK(cudaFree(b->y));
  AK(cudaFree(b->expert_rows));
  AK(cudaFree(b->ids));
  AK(cudaFree(b->wts));
}

static void call(const env *e, const shape *sh, int op, const bufs *b) {
  if (op == OP_LAYER)
    AM(MKX_Moe_layer(b->x, sh->t, sh->h, b->ids, b->wts, sh->k, sh->e, b->w1,
                     b->w2, sh->f, b->out, MKX_BF16, e->mkx, e->st));
  else
    AM(MKX_Moe_dispatch_gemm(b->x, sh->t, sh->h, b->ids, b->wts, sh->k, sh->e,
                             b->w1, 2 * sh->f, b->y, b->y_rows, b->expert_rows,
                             NULL, MKX_BF16, e->mkx, e->st));
}

/* One call of bench's case. */
typedef struct call_ctx {
  const shape *sh;
  int op;
  const bufs *b;
} call_ctx;

static void timed_call(const env *e, const void *ctx) {
  const call_ctx *c = ctx;
  call(e, c->sh, c->op, c->b);
}

static void bench(const env *e, const opts *o, const shape *sh, int op,
                  const bufs *b, result *r) {
  const call_ctx c = {sh, op, b};
  const float med = perf_time_calls(e, o->warmup, o->reps, timed_call, &c,
                                    r->path[op], sizeof r->path[op]);
  r->ms[op] = med;
  r->tflops[op] = tflops(op_flops(sh, op), med);
  r->graph_ms[op] = -1;
  if (!o->graph) return;
  MKX_Request req;
  if (op == OP_LAYER)
    AM(MKX_Moe_layer_init(b->x, sh->t, sh->h, b->ids, b->wts, sh->k, sh->e,
                          b->w1, b->w2, sh->f, b->out, MKX_BF16, e->mkx,
                          MPI_INFO_NULL, &req));
  else
    AM(MKX_Moe_dispatch_gemm_init(b->x, sh->t, sh->h, b->ids, b->wts, sh->k,
                                  sh->e, b->w1, 2 * sh->f, b->y, b->y_rows,
                                  b->expert_rows, NULL, MKX_BF16, e->mkx,
                                  MPI_INFO_NULL, &req));
  r->graph_ms[op] = perf_time_graph(e, o->warmup, o->reps, req);
  AM(MKX_Request_free(&req));
}

/* --fp8: the layer's fp8 operands, weights transposed, and their block
 * scales. */
typedef struct bufs8 {
  void *x, *w1, *w2;
  float *sx, *s1, *s2;
} bufs8;

static int64_t blocks(int64_t n) { return (n + 127) / 128; }

static void bufs8_alloc(const env *e, const shape *sh, bufs8 *b) {
  const size_t el = (size_t)(sh->e / e->size);
  const size_t nx = (size_t)(sh->t * sh->h), nw = el * (size_t)(sh->h * sh->f);
  const size_t nsx = (size_t)(sh->t * blocks(sh->h)),
               ns1 = el * (size_t)(blocks(2 * sh->f) * blocks(sh->h)),
               ns2 = el * (size_t)(blocks(sh->h) * blocks(sh->f));
  const uint64_t seed = 2000u * (uint64_t)(e->rank + 1);
  AK(cudaMalloc(&b->x, nx));
  AK(cudaMalloc(&b->w1, 2 * nw));
  AK(cudaMalloc(&b->w2, nw));
  AK(cudaMalloc((void **)&b->sx, nsx * sizeof(float)));
  AK(cudaMalloc((void **)&b->s1, ns1 * sizeof(float)));
  AK(cudaMalloc((void **)&b->s2, ns2 * sizeof(float)));
  perf_fill_e4m3(b->x, nx, seed + 1);
  perf_fill_e4m3(b->w1, 2 * nw, seed + 2);
  perf_fill_e4m3(b->w2, nw, seed + 3);
  perf_fill_scales(b->sx, nsx, 0x1p-6f, seed + 4);
  perf_fill_scales(b->s1, ns1, 0x1p-6f, seed + 5);
  perf_fill_scales(b->s2, ns2, 0x1p-6f, seed + 6);
}

static void bufs8_free(bufs8 *b) {
  AK(cudaFree(b->x));
  AK(cudaFree(b->w1));
  AK(cudaFree(b->w2));
  AK(cudaFree(b->sx));
  AK(cudaFree(b->s1));
  AK(cudaFree(b->s2));
}

typedef struct call8_ctx {
  const shape *sh;
  const bufs *b;
  const bufs8 *b8;
  MKX_Scales s, s2; /* block scales of X and W1, of W2 */
} call8_ctx;

static void timed_call8(const env *e, const void *ctx) {
  const call8_ctx *c = ctx;
  AM(MKX_Moe_layer_scaled(c->b8->x, c->sh->t, c->sh->h, c->b->ids, c->b->wts,
                          c->sh->k, c->sh->e, c->b8->w1, c->b8->w2, c->sh->f,
                          MKX_TRANS, c->b->out, MKX_FP8_E4M3, MKX_BF16, &c->s,
                          &c->s2, e->mkx, e->st));
}

/* The path the fp8 layer takes, from a plan (nothing runs: the staged
 * path would take minutes at these sizes). */
static void path8(const env *e, const call8_ctx *c, char *name, size_t len) {
  MKX_Request req = NULL;
  AM(MKX_Moe_layer_scaled_init(
      c->b8->x, c->sh->t, c->sh->h, c->b->ids, c->b->wts, c->sh->k, c->sh->e,
      c->b8->w1, c->b8->w2, c->sh->f, MKX_TRANS, c->b->out, MKX_FP8_E4M3,
      MKX_BF16, &c->s, &c->s2, e->mkx, MPI_INFO_NULL, &req));
  const char *p = NULL;
  int cap = 0, ctas = 0;
  AM(MKX_Request_get_path(req, &p, &cap, &ctas));
  snprintf(name, len, "%s", p ? p : "?");
  AM(MKX_Request_free(&req));
}

/* The fp8 layer's time (0 where it would run staged), and its bound: the
 * weights of the experts that receive rows read once in fp8, or its GEMMs
 * at twice the engine's bf16 rate (Hopper's fp8 tensor cores), whichever
 * takes longer. */
static void bench8(const env *e, const opts *o, const shape *sh, const bufs *b,
                   const int *used, const perf_bounds *pb, result *r) {
  bufs8 b8;
  bufs8_alloc(e, sh, &b8);
  const call8_ctx c = {sh,
                       b,
                       &b8,
                       {MKX_SCALE_BLOCK, b8.sx, b8.s1, NULL},
                       {MKX_SCALE_BLOCK, NULL, b8.s2, NULL}};
  path8(e, &c, r->fp8_path, sizeof r->fp8_path);
  r->fp8_ms = 0;
  if (strcmp(r->fp8_path, "staged") && strcmp(r->fp8_path, "host"))
    r->fp8_ms = perf_time_calls(e, o->warmup, o->reps, timed_call8, &c,
                                r->fp8_path, sizeof r->fp8_path);
  int64_t active = 0;
  for (int64_t x = 0; x < sh->e; x++) active += used[x];
  const double read_ms = (double)active * 3.0 * (double)sh->h * (double)sh->f /
                         pb->hbm_bytes_s * 1e3,
               gemm_ms = op_flops(sh, OP_LAYER) /
                         (2.0 * pb->engine_tflops * 1e12) * 1e3;
  r->fp8_bound_ms = read_ms > gemm_ms ? read_ms : gemm_ms;
  bufs8_free(&b8);
}

/* Rank 0 with --versus: the baseline, or MPI_Abort (2) if it cannot be
 * read; on several ranks a note instead. */
static void baseline_init(const env *e, const opts *o, baseline *bl) {
  memset(bl, 0, sizeof *bl);
  if (e->rank != 0 || !o->versus) return;
  if (e->size > 1) {
    fprintf(stderr,
            "mkx_perf moe: --versus %s ignored: torch_moe.py runs on one GPU, "
            "this job has %d ranks\n",
            o->versus, e->size);
    return;
  }
  if (load_versus(o->versus, bl)) MPI_Abort(MPI_COMM_WORLD, 2);
}

static void run_all(const env *e, const opts *o, const baseline *bl) {
  perf_bounds pb;
  perf_bounds_measure(e, &pb);
  FILE *out = e->rank == 0 ? open_table(e, o, &pb) : NULL;
  for (int i = 0; i < o->ns; i++) {
    bufs b;
    result r;
    int *used = calloc((size_t)o->shapes[i].e, sizeof *used);
    if (!used) {
      fprintf(stderr, "mkx_perf moe: out of host memory\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(&r, 0, sizeof r);
    bufs_alloc(e, &o->shapes[i], o->skew, &b, used);
    AI(MPI_Allreduce(MPI_IN_PLACE, used, (int)o->shapes[i].e, MPI_INT, MPI_MAX,
                     MPI_COMM_WORLD));
    for (int op = 0; op < OP_COUNT; op++) {
      bench(e, o, &o->shapes[i], op, &b, &r);
      r.bound_ms[op] = bound_of(e, &o->shapes[i], op, used, &pb);
    }
    if (fp8_on(e, o)) bench8(e, o, &o->shapes[i], &b, used, &pb, &r);
    free(used);
    if (e->rank == 0) print_row(e, o, bl, &o->shapes[i], &r, out);
    bufs_free(&b);
  }
  if (out && fclose(out) != 0) {
    fprintf(stderr, "mkx_perf moe: --out %s: %s\n", o->outname,
            strerror(errno));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

int mkx_perf_moe(int argc, char **argv) {
  opts o;
  env e;
  baseline bl;
  int p, rc = parse_args(argc, argv, &o);
  if (rc == 1) fputs(moe_usage, stdout);
  if (rc) return rc == 1 ? 0 : rc;
  if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
    fprintf(stderr, "mkx_perf moe: MPI_Init failed\n");
    return 1;
  }
  perf_cmd = "mkx_perf moe";
  AI(MPI_Comm_rank(MPI_COMM_WORLD, &perf_rank));
  AI(MPI_Comm_size(MPI_COMM_WORLD, &p));
  if ((rc = check_shapes(&o, perf_rank, p)) != 0 ||
      (rc = perf_env_init(&e, "mkx_perf moe")) != 0) {
    AI(MPI_Finalize());
    return rc;
  }
  baseline_init(&e, &o, &bl);
  run_all(&e, &o, &bl);
  free(bl.lines);
  perf_env_fini(&e);
  AI(MPI_Finalize());
  return 0;
}
