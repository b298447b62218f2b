/*
 * mkx_perf tune: the CTAs of a role beside a fused call's kernels
 * (src/ops/roles.c: the network forward of AllGather+GEMM, the node sums
 * of GEMM+ReduceScatter and GEMM+AllReduce) pinned by hand over a sweep,
 * against today's rule and the adaptive split (option tune=adapt), in one
 * run on the same GPUs, interleaved sample by sample:
 *
 *   mpirun -np P mkx_perf tune --vnode G [--net tcp|shm] [--hier proxy|gpu]
 *          [--op ag|rs|ar|all] [--shape MxNxK]... [--ctas N,N,...]
 *          [--runs N] [--reps N] [--burst N] [--grouped] [--alone [--passes N]]
 *          [--cache PATH] [--out FILE] [--plot FILE]
 *
 * The roles run where a node has several ranks and the GPU drives the
 * network: on virtual nodes of G ranks (--vnode G, over --net, default
 * shm with its cap) or on real nodes (--vnode 0), with hier_gemm=--hier
 * (default proxy).  Communicators, all with those options: `rule` (no
 * more), one per --ctas count (net_fwd_ctas and net_sum_ctas at it,
 * default 1,2,4,8,16) and `adaptive` (tune=adapt, and tune_cache=PATH
 * with --cache).  Shapes (--shape, or M = 512 ... 16384 by 8192 x 8192)
 * are the global GEMM sizes, as in mkx_perf tp.
 *
 * For each call and shape: --runs timed runs of the adaptive plan first
 * (default 10: its search's runs; each run's time is kept), then --reps
 * samples (default 5) of every plan interleaved; medians of the samples,
 * each timed by its slowest rank (the comment line under a row gives
 * their range too).  A sample is --burst runs of one plan back to back (default 4),
 * timed as a whole, per run: the first run of a communicator after
 * another's may pay for the switch (its proxy thread napping, its buffers
 * cold), which single interleaved runs would charge to the split.
 * --grouped: each plan's samples back to back instead, after one untimed
 * sample of it, so that only its communicator's threads have just worked
 * (every recently busy proxy thread keeps polling at a short interval,
 * and several of them at once load the host).  --alone: one communicator
 * alive at a time (each plan's, made for its samples of every shape and
 * freed after them), each plan's samples after an untimed one: no other
 * communicator's proxy and transport threads share the host, as in a job
 * with one communicator; rows are printed once every plan has run.  Such
 * samples vary little within a plan but the machine's speed drifts over a
 * job, so --alone runs --passes passes (default 2), in plan order and back
 * again in turn, each sample kept: a plan's median is over all of its
 * passes' samples (the comment line gives each pass's median too: the
 * drift); the adaptive plan's communicator is made anew in each pass
 * (with --cache it starts from what the pass before wrote) and its first
 * pass's runs are the ones reported.  A row gives each time with the CTAs it used (rank 0's; where the
 * role's CTAs are clamped below a pinned count, the clamped count), the
 * ratios rule/best and adaptive/best, where best is the fastest pinned
 * count, the adaptive plan's first run against best (with a tuner cache
 * from an earlier job: whether that job's split came back) and, with
 * --alone, against the rule plan's first run (a plan's first runs are
 * slower whatever its split: cold against cold), and the first
 * of its runs within 1.03x of best.  A comment line under each row gives
 * the sweep and the adaptive runs.  --plot FILE: an SVG of the sweep, time
 * over best against CTAs (log scale), one panel per call and one line per
 * shape, the rule's and the adaptive's splits marked.
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ops/fused/tuner.h"
#include "perf_job.h"
#include "perf_tp_ops.h"
#include "perf_util.h"

#define MAX_CTAS 12
#define MAX_SHAPES 16
#define MAX_RUNS 64
#define MAX_PASSES 8
#define NEAR_BEST 1.03

static const char tune_usage[] =
    "usage: mpirun -np P mkx_perf tune --vnode G [--net tcp|shm]\n"
    "         [--hier proxy|gpu] [--op ag|rs|ar|all] [--shape MxNxK]...\n"
    "         [--ctas N,N,...] [--runs N] [--reps N] [--burst N] [--grouped]\n"
    "         [--alone [--passes N]] [--cache PATH]\n"
    "         [--out FILE] [--plot FILE.svg]\n"
    "  A role's CTAs pinned over a sweep against today's rule and the\n"
    "  adaptive split (tune=adapt); tests/perf/perf_tune.c documents it.\n";

typedef struct tune_opts {
  perf_tp_conf conf;
  int ops, ns, nc, runs, reps, burst, grouped, alone, passes;
  int64_t shapes[MAX_SHAPES][3];
  int ctas[MAX_CTAS];
  const char *cache, *outname, *plot;
} tune_opts;

/* The plans timed: rule, adaptive, then one per pinned count. */
enum { P_RULE, P_ADAPT, P_PINNED };

/* One call and shape's results (rank 0's view of the splits). */
typedef struct tune_row {
  int op;
  int64_t m, n, k;
  float ms[P_PINNED + MAX_CTAS]; /* medians, slowest rank */
  float lo[P_PINNED + MAX_CTAS], hi[P_PINNED + MAX_CTAS]; /* sample range */
  int used[P_PINNED + MAX_CTAS]; /* the role's CTAs (0: no role ran) */
  int settled;                   /* the adaptive search settled */
  float run[MAX_RUNS];           /* the adaptive plan's first runs */
  float rule_run[2]; /* --alone: the rule plan's first two runs (0: none) */
  float pass_ms[P_PINNED + MAX_CTAS][MAX_PASSES]; /* --alone: per pass */
  int best; /* the fastest pinned plan's index */
} tune_row;

static int usage_error(const char *what, const char *arg) {
  return perf_usage_error("mkx_perf tune", tune_usage, what, arg);
}

static int parse_ctas(const char *v, tune_opts *o) {
  char *end;
  o->nc = 0;
  for (const char *p = v; *p;) {
    const long x = strtol(p, &end, 10);
    if (end == p || x < 1 || x > 1024 || o->nc == MAX_CTAS) return 0;
    o->ctas[o->nc++] = (int)x;
    p = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return 0;
  }
  return o->nc > 0;
}

/* An option with a value; 0, or 2 after a message. */
static int set_value(const char *a, const char *v, tune_opts *o) {
  if (!strcmp(a, "--vnode"))
    o->conf.vnode = strcmp(v, "0") ? v : NULL;
  else if (!strcmp(a, "--net")) {
    if (strcmp(v, "tcp") && strcmp(v, "shm"))
      return usage_error("--net takes tcp or shm", v);
    o->conf.net = v;
  } else if (!strcmp(a, "--hier"))
    o->conf.hier = v;
  else if (!strcmp(a, "--op")) {
    if (!(o->ops = perf_tp_op_mask(v)))
      return usage_error("--op takes ag, rs, ar or all", v);
  } else if (!strcmp(a, "--shape")) {
    if (o->ns == MAX_SHAPES) return usage_error("at most 16 --shape", v);
    if (!perf_tp_shape(v, o->shapes[o->ns]))
      return usage_error("--shape takes MxNxK (positive)", v);
    o->ns++;
  } else if (!strcmp(a, "--ctas")) {
    if (!parse_ctas(v, o))
      return usage_error("--ctas takes 1 to 12 counts in 1..1024, N,N,...", v);
  } else if (!strcmp(a, "--runs")) {
    o->runs = atoi(v);
    if (o->runs < 1 || o->runs > MAX_RUNS)
      return usage_error("--runs takes 1..64", v);
  } else if (!strcmp(a, "--reps")) {
    if ((o->reps = atoi(v)) < 1) return usage_error("--reps takes N >= 1", v);
  } else if (!strcmp(a, "--burst")) {
    o->burst = atoi(v);
    if (o->burst < 1 || o->burst > 64)
      return usage_error("--burst takes 1..64", v);
  } else if (!strcmp(a, "--passes")) {
    o->passes = atoi(v);
    if (o->passes < 1 || o->passes > MAX_PASSES)
      return usage_error("--passes takes 1..8", v);
  } else if (!strcmp(a, "--cache"))
    o->cache = v;
  else if (!strcmp(a, "--out"))
    o->outname = v;
  else if (!strcmp(a, "--plot"))
    o->plot = v;
  else
    return usage_error("unknown option", a);
  return 0;
}

/* 0: run; 1: --help; 2: bad arguments (said on stderr). */
static int parse_args(int argc, char **argv, tune_opts *o) {
  static const int ctas[] = {1, 2, 4, 8, 16};
  static const int64_t ms[] = {512, 1024, 2048, 4096, 8192, 16384};
  memset(o, 0, sizeof *o);
  o->conf = (perf_tp_conf){"auto", NULL, "shm", "proxy"};
  o->ops = 7, o->runs = 10, o->reps = 5, o->nc = 5, o->burst = 4, o->passes = 2;
  memcpy(o->ctas, ctas, sizeof ctas);
  int vnode_given = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    if (!strcmp(argv[i], "--grouped") || !strcmp(argv[i], "--alone")) {
      *(argv[i][2] == 'g' ? &o->grouped : &o->alone) = 1;
      continue;
    }
    if (i + 1 >= argc) return usage_error("missing its value", argv[i]);
    vnode_given |= !strcmp(argv[i], "--vnode");
    const int rc = set_value(argv[i], argv[i + 1], o);
    if (rc) return rc;
    i++;
  }
  if (!vnode_given)
    return usage_error(
        "the roles run on nodes of several ranks: give "
        "--vnode G (virtual nodes) or --vnode 0 (real ones)",
        "--vnode");
  for (size_t i = 0; o->ns == 0 && i < sizeof ms / sizeof ms[0]; i++)
    o->shapes[i][0] = ms[i], o->shapes[i][1] = o->shapes[i][2] = 8192;
  if (o->ns == 0) o->ns = (int)(sizeof ms / sizeof ms[0]);
  return 0;
}

/* Plan p's communicator (P_* order). */
static MKX_Comm comm_of(const tune_opts *o, int p) {
  char cache[300], fwd[32], sum[32];
  snprintf(cache, sizeof cache, "tune_cache=%s", o->cache ? o->cache : "");
  const char *adapt[2] = {"tune=adapt", cache};
  if (p == P_RULE) return perf_tp_comm(MPI_COMM_WORLD, &o->conf, NULL, 0, -1);
  if (p == P_ADAPT)
    return perf_tp_comm(MPI_COMM_WORLD, &o->conf, adapt, o->cache ? 2 : 1, -1);
  snprintf(fwd, sizeof fwd, "net_fwd_ctas=%d", o->ctas[p - P_PINNED]);
  snprintf(sum, sizeof sum, "net_sum_ctas=%d", o->ctas[p - P_PINNED]);
  const char *pin[2] = {fwd, sum};
  return perf_tp_comm(MPI_COMM_WORLD, &o->conf, pin, 2, -1);
}

/* n runs of plan r back to back, all ranks starting together, timed by
 * events: ms per run. */
static float sample(const perf_env *e, MKX_Request r, int n) {
  float ms = 0;
  AK(cudaStreamSynchronize(e->st));
  AI(MPI_Barrier(MPI_COMM_WORLD));
  AK(cudaEventRecord(e->e0, e->st));
  for (int i = 0; i < n; i++) AM(MKX_Start(r, e->st));
  AK(cudaEventRecord(e->e1, e->st));
  AK(cudaEventSynchronize(e->e1));
  AK(cudaEventElapsedTime(&ms, e->e0, e->e1));
  return ms / (float)n;
}

/* Plan p's samples into t[0, reps): after an untimed one unless
 * interleaved. */
static void plan_samples(const perf_env *e, const tune_opts *o, MKX_Request r,
                         float *t) {
  if (o->grouped || o->alone) (void)sample(e, r, o->burst);
  for (int i = 0; i < o->reps; i++) t[i] = sample(e, r, o->burst);
}

/* Each of n samples as its slowest rank saw it. */
static void max_ranks(float *t, int n) {
  AI(MPI_Allreduce(MPI_IN_PLACE, t, n, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD));
}

/* Plan p's row entries from its n samples t (max_ranks already) and its
 * communicator's tuner. */
static void plan_stats(MKX_Comm c, int p, float *t, int n, tune_row *w) {
  w->lo[p] = w->hi[p] = t[0];
  for (int r = 1; r < n; r++) {
    if (t[r] < w->lo[p]) w->lo[p] = t[r];
    if (t[r] > w->hi[p]) w->hi[p] = t[r];
  }
  w->ms[p] = perf_median(t, n);
  int ctas = 0, best = 0, settled = 0;
  if (mkx_tuner_last(c, &ctas, &best, &settled))
    w->used[p] = p == P_ADAPT ? best : ctas;
  if (p == P_ADAPT) w->settled = settled;
}

/* The adaptive plan's first --runs runs, one by one (its search's). */
static void adaptive_runs(const perf_env *e, const tune_opts *o, MKX_Request r,
                          float *run) {
  for (int i = 0; i < o->runs; i++) run[i] = sample(e, r, 1);
  max_ranks(run, o->runs);
}

/* The rule plan's first two runs, one by one, as the adaptive plan's
 * first runs are timed: a plan's first runs are slower whatever its
 * split (first use), so the adaptive plan's first run is compared with
 * the rule's, cold against cold. */
static void rule_runs(const perf_env *e, MKX_Request r, float *run) {
  for (int i = 0; i < 2; i++) run[i] = sample(e, r, 1);
  max_ranks(run, 2);
}

static void pick_best(const tune_opts *o, tune_row *w) {
  w->best = P_PINNED;
  for (int p = P_PINNED; p < P_PINNED + o->nc; p++)
    if (w->ms[p] < w->ms[w->best]) w->best = p;
}

static float *samples_alloc(size_t n) {
  float *t = calloc(n, sizeof *t);
  if (!t) {
    fprintf(stderr, "%s: out of host memory\n", perf_cmd);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return t;
}

/* Every plan of one row, with every communicator alive. */
static void measure(const perf_env *e, const tune_opts *o, MKX_Comm *c,
                    tune_row *w) {
  const int np = P_PINNED + o->nc;
  perf_tp_bufs b;
  MKX_Request req[P_PINNED + MAX_CTAS];
  float *t = samples_alloc((size_t)(np * o->reps));
  perf_tp_alloc(w->op, w->m, w->n, w->k, e->size, e->rank, 0, &b);
  for (int p = 0; p < np; p++)
    perf_tp_plan(c[p], w->op, w->m, w->n, w->k, &b, &req[p]);
  adaptive_runs(e, o, req[P_ADAPT], w->run);
  if (o->grouped) {
    for (int p = 0; p < np; p++) plan_samples(e, o, req[p], t + p * o->reps);
  } else {
    for (int r = 0; r < o->reps; r++)
      for (int p = 0; p < np; p++)
        t[p * o->reps + r] = sample(e, req[p], o->burst);
  }
  max_ranks(t, np * o->reps);
  for (int p = 0; p < np; p++) {
    plan_stats(c[p], p, t + p * o->reps, o->reps, w);
    AM(MKX_Request_free(&req[p]));
  }
  pick_best(o, w);
  perf_tp_free(&b);
  free(t);
}

/* --alone, pass `pass` of o->passes: plan p's samples of every row into
 * pool (row i, plan p: o->passes * o->reps floats from
 * pool + (i * np + p) * o->passes * o->reps), its communicator the only
 * one alive (made here, freed after: the adaptive one then writes the
 * tuner cache); the row's entries after the last pass.  The adaptive
 * plan's first pass's runs are the row's. */
static void measure_alone(const perf_env *e, const tune_opts *o, int p,
                          int pass, tune_row *rows, int n, float *pool) {
  const int np = P_PINNED + o->nc, per = o->passes * o->reps;
  MKX_Comm c = comm_of(o, p);
  for (int i = 0; i < n; i++) {
    tune_row *w = &rows[i];
    float *t = pool + ((size_t)i * np + p) * per;
    float run[MAX_RUNS];
    perf_tp_bufs b;
    MKX_Request req;
    perf_tp_alloc(w->op, w->m, w->n, w->k, e->size, e->rank, 0, &b);
    perf_tp_plan(c, w->op, w->m, w->n, w->k, &b, &req);
    if (p == P_ADAPT) adaptive_runs(e, o, req, pass ? run : w->run);
    if (p == P_RULE && pass == 0) rule_runs(e, req, w->rule_run);
    plan_samples(e, o, req, t + pass * o->reps);
    max_ranks(t + pass * o->reps, o->reps);
    w->pass_ms[p][pass] = perf_median(t + pass * o->reps, o->reps);
    if (pass == o->passes - 1) plan_stats(c, p, t, per, w);
    AM(MKX_Request_free(&req));
    perf_tp_free(&b);
  }
  AM(MKX_Comm_free(&c));
}

/* --alone: the passes, in plan order and back again in turn, so that a
 * slow drift of the machine's speed over the job weighs on every plan
 * alike instead of on the plans measured last. */
static void measure_passes(const perf_env *e, const tune_opts *o,
                           tune_row *rows, int n) {
  const int np = P_PINNED + o->nc;
  float *pool = samples_alloc((size_t)n * np * o->passes * o->reps);
  for (int pass = 0; pass < o->passes; pass++)
    for (int q = 0; q < np; q++)
      measure_alone(e, o, pass % 2 ? np - 1 - q : q, pass, rows, n, pool);
  for (int i = 0; i < n; i++) pick_best(o, &rows[i]);
  free(pool);
}

static void split_cell(char *s, size_t len, float ms, int ctas) {
  if (ctas > 0)
    perf_cat(s, len, " %.3f | %d |", ms, ctas);
  else
    perf_cat(s, len, " %.3f | - |", ms);
}

static void print_row(const tune_opts *o, const tune_row *w, FILE *out) {
  char s[4096] = "";
  const float best = w->ms[w->best];
  int near = 0;
  for (int r = 0; r < o->runs && !near; r++)
    if (w->run[r] <= NEAR_BEST * best) near = r + 1;
  perf_cat(s, sizeof s, "| %s | %lld | %lld | %lld |", perf_tp_op_names[w->op],
           (long long)w->m, (long long)w->n, (long long)w->k);
  split_cell(s, sizeof s, w->ms[P_RULE], w->used[P_RULE]);
  split_cell(s, sizeof s, best, w->used[w->best]);
  split_cell(s, sizeof s, w->ms[P_ADAPT], w->used[P_ADAPT]);
  perf_cat(s, sizeof s, " %.3f | %.3f | %.3f |", w->ms[P_RULE] / best,
           w->ms[P_ADAPT] / best, w->run[0] / best);
  if (w->rule_run[0] > 0)
    perf_cat(s, sizeof s, " %.3f |", w->run[0] / w->rule_run[0]);
  else
    perf_cat(s, sizeof s, " - |");
  const char *state = w->settled ? "" : " (searching)";
  if (near)
    perf_cat(s, sizeof s, " %d%s |\n", near, state);
  else
    perf_cat(s, sizeof s, " none of %d%s |\n", o->runs, state);
  perf_cat(s, sizeof s,
           "<!-- %s %lldx%lldx%lld pinned (CTAs: ms, samples' range):",
           perf_tp_op_names[w->op], (long long)w->m, (long long)w->n,
           (long long)w->k);
  for (int i = 0; i < o->nc; i++)
    perf_cat(s, sizeof s, " %d: %.3f (%.3f-%.3f)", o->ctas[i],
             w->ms[P_PINNED + i], w->lo[P_PINNED + i], w->hi[P_PINNED + i]);
  perf_cat(s, sizeof s, "; rule %.3f (%.3f-%.3f), adaptive %.3f (%.3f-%.3f)",
           w->ms[P_RULE], w->lo[P_RULE], w->hi[P_RULE], w->ms[P_ADAPT],
           w->lo[P_ADAPT], w->hi[P_ADAPT]);
  if (o->alone) { /* drift: the same plan's medians pass by pass */
    perf_cat(s, sizeof s, "; pass medians (rule, adaptive, pinned):");
    for (int p = 0; p < P_PINNED + o->nc; p++)
      for (int q = 0; q < o->passes; q++)
        perf_cat(s, sizeof s, "%s%.3f", q ? "/" : " ", w->pass_ms[p][q]);
  }
  perf_cat(s, sizeof s, "; adaptive runs (ms):");
  for (int r = 0; r < o->runs; r++) perf_cat(s, sizeof s, " %.3f", w->run[r]);
  if (w->rule_run[0] > 0)
    perf_cat(s, sizeof s, "; the rule's first runs (ms): %.3f %.3f",
             w->rule_run[0], w->rule_run[1]);
  perf_cat(s, sizeof s, " -->\n");
  fputs(s, stdout);
  fflush(stdout);
  if (out) fputs(s, out), fflush(out);
}

static FILE *open_table(const perf_env *e, const tune_opts *o) {
  char head[2048] = "";
  perf_table_title(e, head, sizeof head);
  if (o->conf.vnode)
    perf_cat(head, sizeof head, "Virtual nodes of %s ranks over %s",
             o->conf.vnode, o->conf.net);
  else
    perf_cat(head, sizeof head, "Nodes as the job has them");
  perf_cat(head, sizeof head,
           ", hier_gemm=%s, bf16, B stored N x K; medians of %d samples of "
           "%d runs back to back (ms per run, slowest rank; %s), the "
           "adaptive plan after %d runs%s%s.  rule: "
           "today's split; best: the fastest of the CTAs pinned at",
           o->conf.hier, o->alone ? o->passes * o->reps : o->reps, o->burst,
           o->alone     ? "one communicator alive at a time, each plan's "
                          "samples together after an untimed one, in passes "
                          "forth and back"
           : o->grouped ? "each plan's samples together, after an untimed one"
                        : "the plans' samples interleaved",
           o->runs, o->cache ? ", tuner cache " : "", o->cache ? o->cache : "");
  for (int i = 0; i < o->nc; i++)
    perf_cat(head, sizeof head, "%s%d", i ? ", " : " ", o->ctas[i]);
  perf_cat(head, sizeof head,
           "; adaptive: tune=adapt; CTAs: the role's (rank 0's; the "
           "adaptive's incumbent); run 1/best: the adaptive plan's first run; "
           "run 1/rule's: that run over the rule plan's first (both first "
           "runs of a plan, slower whatever the split; --alone only); "
           "within 1.03x: the first of its runs that was (searching: the "
           "adaptive search had not settled).\n\n"
           "| call | M | N | K | rule | CTAs | best | CTAs | adaptive | CTAs | "
           "rule/best | adaptive/best | run 1/best | run 1/rule's | within "
           "1.03x at run |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
           "---:|---:|\n");
  return perf_table_open(head, o->outname);
}

/* ---- --plot: the sweep as an SVG ---------------------------------------- */

#define PW 360 /* a panel's size and margins, in SVG units */
#define PH 260
#define ML 48
#define MB 36
#define YMAX 2.0

static const char *const colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c",
                                     "#d62728", "#9467bd", "#8c564b",
                                     "#e377c2", "#7f7f7f"};

static double px(const tune_opts *o, int panel, int ctas) {
  double lo = 1e9, hi = 0, x = 0;
  for (int i = 0; i < o->nc; i++) {
    lo = o->ctas[i] < lo ? o->ctas[i] : lo;
    hi = o->ctas[i] > hi ? o->ctas[i] : hi;
  }
  const double l = __builtin_log2(lo), h = __builtin_log2(hi);
  const double c = ctas < lo ? lo : ctas > hi ? hi : ctas;
  if (h > l) x = (__builtin_log2(c) - l) / (h - l);
  return panel * PW + ML + x * (PW - ML - 12);
}

static double py(double ratio) {
  const double r = ratio < 1 ? 1 : ratio > YMAX ? YMAX : ratio;
  return 20 + (1 - (r - 1) / (YMAX - 1)) * (PH - 20 - MB);
}

static void plot_axes(FILE *f, const tune_opts *o, int panel, int op) {
  const double x0 = panel * PW + ML, x1 = panel * PW + PW - 12;
  fprintf(f, "<text x=\"%.0f\" y=\"14\" font-size=\"12\">%s</text>\n", x0,
          perf_tp_op_names[op]);
  fprintf(f,
          "<path d=\"M%.0f %.0f V%.0f H%.0f\" stroke=\"black\" "
          "fill=\"none\"/>\n",
          x0, py(YMAX), py(1), x1);
  for (double r = 1; r <= YMAX + 1e-9; r += 0.25)
    fprintf(f,
            "<text x=\"%.0f\" y=\"%.0f\" font-size=\"9\" "
            "text-anchor=\"end\">%.2f</text>\n",
            x0 - 4, py(r) + 3, r);
  for (int i = 0; i < o->nc; i++)
    fprintf(f,
            "<text x=\"%.0f\" y=\"%.0f\" font-size=\"9\" "
            "text-anchor=\"middle\">%d</text>\n",
            px(o, panel, o->ctas[i]), py(1) + 12, o->ctas[i]);
  fprintf(f,
          "<text x=\"%.0f\" y=\"%d\" font-size=\"9\" "
          "text-anchor=\"middle\">CTAs of the role (time / best, capped at "
          "%.1f)</text>\n",
          (x0 + x1) / 2, PH - 6, YMAX);
}

static void plot_row(FILE *f, const tune_opts *o, int panel, int line,
                     const tune_row *w) {
  const char *col = colors[line % 8];
  const float best = w->ms[w->best];
  fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" points=\"", col);
  for (int i = 0; i < o->nc; i++)
    fprintf(f, "%.1f,%.1f ", px(o, panel, o->ctas[i]),
            py(w->ms[P_PINNED + i] / best));
  fprintf(f, "\"/>\n");
  if (w->used[P_RULE] > 0) /* the rule: an open square */
    fprintf(f,
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"7\" height=\"7\" "
            "fill=\"none\" stroke=\"%s\"/>\n",
            px(o, panel, w->used[P_RULE]) - 3.5, py(w->ms[P_RULE] / best) - 3.5,
            col);
  if (w->used[P_ADAPT] > 0) { /* the adaptive: a filled triangle */
    const double x = px(o, panel, w->used[P_ADAPT]),
                 y = py(w->ms[P_ADAPT] / best);
    fprintf(f, "<path d=\"M%.1f %.1f l4 7 h-8 z\" fill=\"%s\"/>\n", x, y - 4,
            col);
  }
  fprintf(f,
          "<text x=\"%.0f\" y=\"%.0f\" font-size=\"9\" fill=\"%s\">M=%lld "
          "N=%lld K=%lld</text>\n",
          panel * PW + PW - 110.0, 30.0 + 11 * line, col, (long long)w->m,
          (long long)w->n, (long long)w->k);
}

static void plot(const tune_opts *o, const tune_row *rows, int n) {
  FILE *f = fopen(o->plot, "w");
  if (!f) {
    perror(o->plot);
    return;
  }
  int panels = 0;
  for (int op = 0; op < 3; op++) panels += (o->ops >> op) & 1;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
          "height=\"%d\" font-family=\"sans-serif\">\n",
          PW * panels, PH + 14);
  fprintf(f,
          "<text x=\"4\" y=\"%d\" font-size=\"9\">lines: pinned CTAs; "
          "square: today's rule; triangle: tune=adapt</text>\n",
          PH + 10);
  for (int op = 0, panel = 0; op < 3; op++) {
    if (!((o->ops >> op) & 1)) continue;
    plot_axes(f, o, panel, op);
    for (int i = 0, line = 0; i < n; i++)
      if (rows[i].op == op) plot_row(f, o, panel, line++, &rows[i]);
    panel++;
  }
  fprintf(f, "</svg>\n");
  if (fclose(f) != 0) perror(o->plot);
}

int mkx_perf_tune(int argc, char **argv) {
  tune_opts o;
  const int prc = parse_args(argc, argv, &o);
  if (prc == 1) fputs(tune_usage, stdout);
  if (prc) return prc == 1 ? 0 : prc;
  if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
    fprintf(stderr, "mkx_perf tune: MPI_Init failed\n");
    return 1;
  }
  perf_env e;
  int rc = perf_env_init(&e, "mkx_perf tune");
  if (rc == 0) {
    tune_row rows[3 * MAX_SHAPES];
    int n = 0;
    for (int op = 0; op < 3; op++)
      for (int s = 0; s < o.ns && ((o.ops >> op) & 1); s++) {
        tune_row *w = &rows[n++];
        memset(w, 0, sizeof *w);
        w->op = op, w->m = o.shapes[s][0], w->n = o.shapes[s][1],
        w->k = o.shapes[s][2];
      }
    FILE *out = e.rank == 0 ? open_table(&e, &o) : NULL;
    if (o.alone) {
      measure_passes(&e, &o, rows, n);
      for (int i = 0; i < n && e.rank == 0; i++) print_row(&o, &rows[i], out);
    } else {
      MKX_Comm c[P_PINNED + MAX_CTAS];
      for (int p = 0; p < P_PINNED + o.nc; p++) c[p] = comm_of(&o, p);
      for (int i = 0; i < n; i++) {
        measure(&e, &o, c, &rows[i]);
        if (e.rank == 0) print_row(&o, &rows[i], out);
      }
      for (int p = 0; p < P_PINNED + o.nc; p++) AM(MKX_Comm_free(&c[p]));
    }
    if (out && fclose(out) != 0) perror(o.outname);
    if (e.rank == 0 && o.plot) plot(&o, rows, n);
    perf_env_fini(&e);
  }
  AI(MPI_Finalize());
  return rc;
}
