/*
 * The fused single-node GPU paths of the three tensor-parallel calls,
 * checked against the host path (CBLAS + MPI) run through the same MKX
 * calls on host copies of the same inputs: an independent oracle.  Runs
 * with one GPU per rank and with ranks sharing a GPU (MPS or time slices;
 * then the path and CTA rules of option shared_gpu apply).  Skips (77)
 * without a GPU.
 *
 *  1. >= 20 shapes per call (bf16/fp16 in, bf16/fp16/fp32 out, B stored
 *     either way, padded leading dimensions, M not a multiple of the tile
 *     where the contract allows it, ranks with unequal or zero shares),
 *     each also checked to have taken (or, where it cannot, not taken) the
 *     fused path via an internal counter;
 *  2. 1000 back-to-back plain calls per operation with changing inputs and
 *     no host synchronisation (stale flags would show as wrong results);
 *  3. a persistent plan started repeatedly with inputs changed in between;
 *  4. a CUDA-graph-captured MKX_Start replayed with changing inputs, and
 *     a captured one-shot call: refused where no earlier call made its
 *     workspace, then captured and replayed (AllReduce: the same bits on
 *     every rank);
 *  5. the same call on a communicator with fused=off takes the staged path.
 *
 * Inputs and poison are written on the test's stream and waited for
 * (mt_dev_copy): the calls run on a non-blocking stream, which does not wait
 * for set-up left on the legacy default stream.  MKX_TEST_PART runs one
 * part: overlap, split, split-cublas, split-two, stream-k, auto, pad, or
 * repeat (2-4 alone, on both paths).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include "mkx_test.h"
#include "cuda_check.h"
#include "ops/path.h"
#include "ops/fused/fused.h"

#define CUDA(call) MT_CUDA(call)

/* Starts on the fused single-node paths so far (ops/path.h). */
static long fused_starts(void) {
  return mkx_path_starts(MKX_PATH_TP_OVERLAP) +
         mkx_path_starts(MKX_PATH_TP_PULL) + mkx_path_starts(MKX_PATH_TP_SPLIT);
}

enum { OP_AG = 0, OP_RS, OP_AR };
static const char *const op_name[] = {"allgather_gemm", "gemm_rs", "gemm_ar"};

typedef struct shape {
  int64_t m, n, k; /* AG: m_local, k; RS/AR: M, k_local */
  int vary;        /* 1: per-rank share grows with rank; 2: rank 1 gets 0;
                        3 (AG): even ranks m rows, odd ranks m1 (1 rank:
                        m + m1) */
  int pad;         /* extra elements on every leading dimension */
  MKX_Trans tb;
  MKX_Datatype dt, ct;
  int aout;     /* AG: ask for A_out */
  int64_t m1;   /* vary 3 */
  int colmajor; /* MKX_COL_MAJOR operands (else row-major) */
} shape;

/* One problem: host copies (oracle inputs/outputs) and device copies. */
typedef struct prob {
  int op;
  shape s;
  MKX_Order order;
  int64_t rows, M, kl, lda, ldb, ldc, ld_aout, crow, arows;
  int64_t brows, bcols;
  size_t abytes, bbytes, cbytes, aobytes;
  void *hA, *hB, *hC, *hAo; /* host path */
  void *dA, *dB, *dC, *dAo; /* device path */
} prob;

static cudaStream_t st;

static int64_t share(const shape *s, int granule) {
  if (s->vary == 2) return mt.rank == 1 ? 0 : s->m;
  if (s->vary == 3)
    return mt.size == 1 ? s->m + s->m1 : mt.rank % 2 ? s->m1 : s->m;
  return s->m + (s->vary ? (int64_t)granule * mt.rank : 0);
}

/* Leading dimensions are at least 1, also for an empty matrix (BLAS). */
static int64_t mt_max1(int64_t x) { return x > 1 ? x : 1; }

static void *dev_alloc(size_t bytes) {
  void *p = NULL;
  CUDA(cudaMalloc(&p, bytes ? bytes : 16));
  return p;
}

/* Sizes and buffers of problem `op` with shape s; inputs from `salt`. */
static void prob_init(prob *p, int op, const shape *s) {
  memset(p, 0, sizeof *p);
  p->op = op;
  p->s = *s;
  size_t es = MKX_Type_size(s->dt), cs = MKX_Type_size(s->ct);
  if (op == OP_AG) {
    p->rows = share(s, 128);
    p->kl = s->k;
    MPI_Allreduce(&p->rows, &p->M, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    p->arows = p->rows;
    p->crow = p->M;
  } else {
    p->M = s->m;
    p->kl = s->k + (s->vary ? 8 * mt.rank : 0);
    p->arows = p->M;
    int64_t first;
    MKX_Block_range(p->M, mt.size, mt.rank, &first, &p->crow);
    if (op == OP_AR) p->crow = p->M;
  }
  /* leading dimension along the contiguous axis; `lines` of them */
  const int cm = s->colmajor;
  p->order = cm ? MKX_COL_MAJOR : MKX_ROW_MAJOR;
  mt_B_dims(s->tb, p->kl, s->n, &p->brows, &p->bcols);
  p->lda = mt_max1(cm ? p->arows : p->kl) + s->pad;
  p->ldb = mt_max1(cm ? p->brows : p->bcols) + s->pad;
  p->ldc = mt_max1(cm ? p->crow : s->n) + s->pad;
  p->ld_aout = mt_max1(cm ? p->M : s->k) + s->pad;
  p->abytes = (size_t)((cm ? p->kl : p->arows) * p->lda) * es;
  p->bbytes = (size_t)((cm ? p->bcols : p->brows) * p->ldb) * es;
  p->cbytes = (size_t)((cm ? s->n : p->crow) * p->ldc) * cs;
  p->aobytes = s->aout ? (size_t)((cm ? s->k : p->M) * p->ld_aout) * es : 0;
  p->hA = calloc(1, p->abytes + 16);
  p->hB = calloc(1, p->bbytes + 16);
  p->hC = calloc(1, p->cbytes + 16);
  p->hAo = calloc(1, p->aobytes + 16);
  p->dA = dev_alloc(p->abytes);
  p->dB = dev_alloc(p->bbytes);
  p->dC = dev_alloc(p->cbytes);
  p->dAo = s->aout ? dev_alloc(p->aobytes) : NULL;
}

static void prob_free(prob *p) {
  free(p->hA), free(p->hB), free(p->hC), free(p->hAo);
  cudaFree(p->dA), cudaFree(p->dB), cudaFree(p->dC);
  if (p->dAo) cudaFree(p->dAo);
}

/* Fresh inputs (A from `salt`, B from `bsalt`) into the host copies, then
 * the device. */
static void prob_fill(prob *p, int salt, int bsalt) {
  const shape *s = &p->s;
  double *a =
      mt_gen(p->arows, p->kl, s->dt, mt.seed + (uint64_t)salt, mt.rank, 1);
  double *b = mt_gen(p->kl, s->n, s->dt, mt.seed + (uint64_t)bsalt, mt.rank, 2);
  memset(p->hA, 0, p->abytes);
  memset(p->hB, 0, p->bbytes);
  mt_store(p->hA, s->dt, p->order, p->arows, p->kl, p->lda, a);
  mt_store_B(p->hB, s->dt, p->order, s->tb, p->kl, s->n, p->ldb, b);
  free(a);
  free(b);
  mt_dev_copy(p->dA, p->hA, p->abytes, st);
  mt_dev_copy(p->dB, p->hB, p->bbytes, st);
}

/* Run the call with host (dev = 0) or device (dev = 1) buffers. */
static int prob_call(const prob *p, MKX_Comm c, int dev, void *C) {
  const shape *s = &p->s;
  const void *A = dev ? p->dA : p->hA, *B = dev ? p->dB : p->hB;
  void *Ao = s->aout ? (dev ? p->dAo : p->hAo) : NULL;
  if (!C) C = dev ? p->dC : p->hC;
  if (p->op == OP_AG)
    return MKX_Allgather_gemm(A, p->rows, s->k, p->lda, B, s->n, p->ldb, s->tb,
                              C, p->ldc, Ao, p->ld_aout, s->dt, s->ct, p->order,
                              c, dev ? st : NULL);
  if (p->op == OP_RS)
    return MKX_Gemm_reduce_scatter(A, p->M, p->kl, p->lda, B, s->n, p->ldb,
                                   s->tb, C, p->ldc, s->dt, s->ct, p->order, c,
                                   dev ? st : NULL);
  return MKX_Gemm_allreduce(A, p->M, p->kl, p->lda, B, s->n, p->ldb, s->tb, C,
                            p->ldc, s->dt, s->ct, p->order, c, dev ? st : NULL);
}

static int prob_init_plan(const prob *p, MKX_Comm c, MKX_Request *r) {
  const shape *s = &p->s;
  if (p->op == OP_AG)
    return MKX_Allgather_gemm_init(p->dA, p->rows, s->k, p->lda, p->dB, s->n,
                                   p->ldb, s->tb, p->dC, p->ldc,
                                   s->aout ? p->dAo : NULL, p->ld_aout, s->dt,
                                   s->ct, p->order, c, MPI_INFO_NULL, r);
  if (p->op == OP_RS)
    return MKX_Gemm_reduce_scatter_init(p->dA, p->M, p->kl, p->lda, p->dB, s->n,
                                        p->ldb, s->tb, p->dC, p->ldc, s->dt,
                                        s->ct, p->order, c, MPI_INFO_NULL, r);
  return MKX_Gemm_allreduce_init(p->dA, p->M, p->kl, p->lda, p->dB, s->n,
                                 p->ldb, s->tb, p->dC, p->ldc, s->dt, s->ct,
                                 p->order, c, MPI_INFO_NULL, r);
}

/* Host copy `got` of the device C against `ref`: relative error over the
 * matrix, NaNs in it, and padding elements that are no longer poison. */
typedef struct cmp {
  double rel;
  int64_t nan, bad_pad;
} cmp;
static cmp compare_host(const prob *p, const void *got, const void *ref) {
  const shape *s = &p->s;
  cmp r = {0, 0, 0};
  double num = 0, den = 0;
  /* line i of the storage, position j along it (past the matrix: pad) */
  const int cm = p->order == MKX_COL_MAJOR;
  const int64_t lines = cm ? s->n : p->crow, len = cm ? p->crow : s->n;
  for (int64_t i = 0; i < lines; i++)
    for (int64_t j = 0; j < p->ldc; j++) {
      size_t idx = (size_t)(i * p->ldc + j);
      if (j >= len) {
        r.bad_pad += !mt_is_poison(got, s->ct, idx);
        continue;
      }
      double g = mt_get(got, s->ct, idx), e = mt_get(ref, s->ct, idx);
      if (g != g) r.nan++;
      num += (g - e) * (g - e);
      den += e * e;
    }
  r.rel = den > 0 ? sqrt(num / den) : sqrt(num);
  return r;
}

static void *device_c(const prob *p, const void *dC) {
  void *got = malloc(p->cbytes + 16);
  mt_dev_copy(got, dC, p->cbytes, st);
  return got;
}

/* Device C (at `dC`) against the host path's C: relative error within the
 * output type's tolerance, no NaN, padding untouched. */
static int compare_c(const prob *p, const void *dC, const char *what) {
  const shape *s = &p->s;
  void *got = device_c(p, dC);
  const cmp r = compare_host(p, got, p->hC);
  int ok = r.nan == 0 && r.bad_pad == 0 && r.rel <= 2 * mt_tol(s->dt, s->ct);
  CHECK(ok,
        "%s %s%s M=%lld n=%lld k=%lld vary=%d pad=%d %s %s->%s: "
        "relerr %.2e nan %lld pad-writes %lld",
        what, op_name[p->op], p->order == MKX_COL_MAJOR ? " col-major" : "",
        (long long)p->M, (long long)s->n, (long long)s->k, s->vary, s->pad,
        s->tb == MKX_TRANS ? "B^T" : "B", mt_type_name(s->dt),
        mt_type_name(s->ct), r.rel, (long long)r.nan, (long long)r.bad_pad);
  free(got);
  return ok;
}

static int compare_aout(const prob *p) {
  void *got = malloc(p->aobytes + 16);
  mt_dev_copy(got, p->dAo, p->aobytes, st);
  size_t es = MKX_Type_size(p->s.dt);
  int ok = 1;
  const int cm = p->order == MKX_COL_MAJOR;
  const int64_t lines = cm ? p->s.k : p->M, len = cm ? p->M : p->s.k;
  for (int64_t i = 0; ok && i < lines; i++)
    ok = !memcmp((char *)got + (size_t)(i * p->ld_aout) * es,
                 (char *)p->hAo + (size_t)(i * p->ld_aout) * es,
                 (size_t)len * es);
  CHECK(ok, "allgather_gemm A_out M=%lld k=%lld bit-exact", (long long)p->M,
        (long long)p->s.k);
  free(got);
  return ok;
}

/* Allreduce: every rank holds the same bits. */
static void check_same_bits(const prob *p) {
  void *mine = malloc(p->cbytes + 16);
  mt_dev_copy(mine, p->dC, p->cbytes, st);
  uint64_t h = mt_hash(mine, p->cbytes, 1469598103934665603ull), h0 = h;
  MPI_Bcast(&h0, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  CHECK(h == h0, "gemm_ar M=%lld n=%lld: same bits on every rank",
        (long long)p->M, (long long)p->s.n);
  free(mine);
}

static int pad_mode; /* the communicator has option fused_pad=yes */
/* its option tp_overlap: -1 auto, 0 yes (overlapped), 1 no (split) */
static int split_mode = -1;
/* ranks share a GPU without MPS: every call splits (option shared_gpu) */
static int sliced;

/* Does the call take the split path?  (auto: src/ops/fused/workspace.c) */
static int expect_split(const prob *p) {
  if (sliced) return 1;
  if (split_mode >= 0) return split_mode;
  return p->M < 1024 * (int64_t)mt.size;
}

/* Does the overlapped call read the ranks' operands in place (option
 * tp_pull, docs/fused-tp.md)?  1 yes, 0 no, -1 either: where the adapter
 * may run (column-major operands, option fused_pad), its row-major call on
 * temporaries reads them in place if they can be mapped (so too where a
 * rank has k_local = 0).  AllGather+GEMM
 * only where every rank has rows and each one's but the last are whole
 * tiles. */
static int expect_pull(MKX_Comm c, const prob *p) {
  if (!mkx_tp_wants_pull(c)) return 0;
  if (p->s.colmajor || pad_mode) return -1;
  if (p->op != OP_AG) { /* a rank with k_local = 0 takes the adapter */
    int zero = p->kl == 0;
    MPI_Allreduce(MPI_IN_PLACE, &zero, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return zero ? -1 : 1;
  }
  int64_t rows[64];
  MPI_Allgather(&p->rows, 1, MPI_INT64_T, rows, 1, MPI_INT64_T, MPI_COMM_WORLD);
  for (int q = 0; q < mt.size; q++)
    if (rows[q] <= 0 || (q + 1 < mt.size && rows[q] % 128)) return 0;
  return 1;
}

/* Can every rank take the fused path with this shape? */
static int expect_fused(const prob *p) {
  int ok = p->s.dt != MKX_FP32 && p->s.dt != MKX_FP64;
  if (!pad_mode)
    ok &= p->kl % 8 == 0 && p->s.n % 8 == 0 && p->s.pad % 8 == 0 &&
          p->s.k % 8 == 0;
  return mt_all(ok);
}

static void run_shape(MKX_Comm c, int op, const shape *s, int salt) {
  prob p;
  prob_init(&p, op, s);
  prob_fill(&p, salt, salt);
  mt_poison(p.hC, p.cbytes);
  int rc = prob_call(&p, c, 0, NULL);
  CHECK_RC(rc, MKX_SUCCESS, "host oracle %s", op_name[op]);
  mt_dev_fill(p.dC, 0xFF, p.cbytes, st);
  if (p.dAo) mt_dev_fill(p.dAo, 0xFF, p.aobytes, st);
  long before = fused_starts(), split0 = mkx_path_starts(MKX_PATH_TP_SPLIT);
  const long pull0 = mkx_path_starts(MKX_PATH_TP_PULL);
  rc = prob_call(&p, c, 1, NULL);
  CHECK_RC(rc, MKX_SUCCESS, "device %s", op_name[op]);
  CUDA(cudaStreamSynchronize(st));
  int fused = fused_starts() > before, want = expect_fused(&p);
  CHECK(fused == want, "%s took the %s path (expected %s)", op_name[op],
        fused ? "fused" : "staged", want ? "fused" : "staged");
  int split = mkx_path_starts(MKX_PATH_TP_SPLIT) > split0,
      want_split = want && expect_split(&p);
  CHECK(split == want_split, "%s M=%lld: %s (expected %s)", op_name[op],
        (long long)p.M, split ? "split" : "not split",
        want_split ? "split" : "not split");
  const int pulled = mkx_path_starts(MKX_PATH_TP_PULL) > pull0,
            want_pull = want && !want_split ? expect_pull(c, &p) : 0;
  CHECK(want_pull < 0 || pulled == want_pull,
        "%s M=%lld: operands %s (expected %s)", op_name[op], (long long)p.M,
        pulled ? "read in place" : "moved", want_pull ? "in place" : "moved");
  compare_c(&p, p.dC, "shape");
  if (s->aout) compare_aout(&p);
  if (op == OP_AR) check_same_bits(&p);
  prob_free(&p);
}

/* Operands the peers cannot map (stream-ordered pool memory): a call that
 * would read them in place moves rows or partials instead, correctly (on
 * the overlapped path; in time slices every call splits). */
static void unmappable(MKX_Comm c) {
  if (!mkx_tp_wants_pull(c)) return;
  shape s = {1024, 512, 256, 0, 0, MKX_TRANS, MKX_BF16, MKX_BF16, 0};
  for (int op = 0; op < 3; op++) {
    prob p;
    prob_init(&p, op, &s);
    CUDA(cudaFree(p.dA));
    CUDA(cudaMallocAsync(&p.dA, p.abytes, st));
    prob_fill(&p, 60 + op, 60 + op);
    CHECK_RC(prob_call(&p, c, 0, NULL), MKX_SUCCESS, "host oracle %s",
             op_name[op]);
    mt_dev_fill(p.dC, 0xFF, p.cbytes, st);
    const mkx_path moved = sliced ? MKX_PATH_TP_SPLIT : MKX_PATH_TP_OVERLAP;
    const long pull0 = mkx_path_starts(MKX_PATH_TP_PULL),
               moved0 = mkx_path_starts(moved);
    CHECK_RC(prob_call(&p, c, 1, NULL), MKX_SUCCESS, "%s on pool memory",
             op_name[op]);
    CUDA(cudaStreamSynchronize(st));
    CHECK(mkx_path_starts(MKX_PATH_TP_PULL) == pull0 &&
              mkx_path_starts(moved) > moved0,
          "%s on pool memory: fused (%s), operands moved", op_name[op],
          mkx_path_name(moved));
    compare_c(&p, p.dC, "pool memory");
    prob_free(&p);
  }
}

/* A table row of AllGather+GEMM shapes: shares m (and m1, vary 3), n, k,
 * padding, B storage, types, A_out. */
typedef struct ag_row {
  int64_t m, m1, n, k;
  int vary, pad;
  MKX_Trans tb;
  MKX_Datatype dt, ct;
  int aout;
} ag_row;

static void run_ag_rows(MKX_Comm c, const ag_row *t, int n, int seed0) {
  for (int i = 0; i < n; i++) {
    shape s;
    memset(&s, 0, sizeof s);
    s.m = t[i].m, s.m1 = t[i].m1, s.n = t[i].n, s.k = t[i].k;
    s.vary = t[i].vary, s.pad = t[i].pad, s.tb = t[i].tb;
    s.dt = t[i].dt, s.ct = t[i].ct;
    s.aout = t[i].aout;
    run_shape(c, OP_AG, &s, seed0 + i);
  }
}

/* AllGather+GEMM with m_local not a multiple of the 128-row tile: tiles
 * holding rows of two ranks, ranks with 0 rows (first or last), unequal
 * shares, a tile cut by M, several chunks per rank, the smallest sizes. */
static void shapes_ag_rows(MKX_Comm c) {
  static const ag_row t[] = {
      {1, 0, 64, 64, 3, 0, MKX_TRANS, MKX_BF16, MKX_BF16, 1},
      {100, 29, 256, 128, 3, 8, MKX_NO_TRANS, MKX_FP16, MKX_FP16, 0},
      {129, 257, 200, 192, 3, 0, MKX_TRANS, MKX_BF16, MKX_FP32, 1},
      {0, 300, 512, 256, 3, 8, MKX_NO_TRANS, MKX_BF16, MKX_BF16, 0},
      {300, 0, 264, 520, 3, 0, MKX_TRANS, MKX_FP16, MKX_FP32, 0},
      {1000, 77, 1000, 64, 3, 8, MKX_TRANS, MKX_BF16, MKX_BF16, 1},
      {2500, 1300, 1024, 512, 3, 0, MKX_NO_TRANS, MKX_BF16, MKX_BF16, 0},
      {127, 129, 128, 1024, 3, 0, MKX_TRANS, MKX_FP16, MKX_FP16, 1},
      {3, 5, 8, 8, 3, 0, MKX_NO_TRANS, MKX_BF16, MKX_BF16, 0},
  };
  run_ag_rows(c, t, (int)(sizeof t / sizeof t[0]), 50);
}

/* AllGather+GEMM on the overlapped path with more tiles than SMs, so that
 * the last wave is split along K (option tp_stream_k, on 132 SMs every
 * shape here on 1 rank and most on 2): K of 1, 4, 9 and 16 blocks (shares
 * of one block, tiles in up to ~8 shares), both tiles, fp16, fp32 C,
 * unequal shares, A_out.  The caller checks that some launches split. */
static void shapes_stream_k(MKX_Comm c) {
  static const ag_row t[] = {
      {1100, 0, 4096, 256, 0, 0, MKX_TRANS, MKX_BF16, MKX_BF16, 0},
      {2055, 0, 2304, 520, 0, 0, MKX_NO_TRANS, MKX_FP16, MKX_FP32, 1},
      {2100, 0, 2048, 64, 0, 0, MKX_TRANS, MKX_BF16, MKX_BF16, 0},
      {1100, 700, 4096, 1024, 3, 0, MKX_TRANS, MKX_BF16, MKX_FP32, 1},
      {8192, 0, 2560, 128, 0, 0, MKX_NO_TRANS, MKX_BF16, MKX_BF16, 0},
  };
  run_ag_rows(c, t, (int)(sizeof t / sizeof t[0]), 70);
}

/* 24 shapes per call, cycling through types, B storage, padding, shares
 * (AllGather+GEMM: 9 more, shapes_ag_rows). */
/* Column-major operands: transposed through row-major temporaries around
 * the row-major fused call; odd M and m_local, padding, both B layouts. */
static void shapes_colmajor(MKX_Comm c, int op) {
  static const struct {
    int64_t m, n, k;
    int vary, pad;
    MKX_Trans tb;
    MKX_Datatype dt, ct;
    int aout;
  } t[] = {{100, 256, 128, 0, 0, MKX_NO_TRANS, MKX_BF16, MKX_BF16, 1},
           {777, 264, 64, 1, 8, MKX_TRANS, MKX_FP16, MKX_FP16, 0},
           {256, 1024, 512, 0, 3, MKX_TRANS, MKX_BF16, MKX_FP32, 1},
           {1000, 64, 256, 2, 0, MKX_NO_TRANS, MKX_FP16, MKX_BF16, 0},
           {3, 128, 8, 0, 8, MKX_TRANS, MKX_BF16, MKX_BF16, 1}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    shape s;
    memset(&s, 0, sizeof s);
    s.m = t[i].m, s.n = t[i].n, s.k = t[i].k;
    s.vary = t[i].vary == 2 && mt.size == 1 ? 0 : t[i].vary;
    s.pad = t[i].pad, s.tb = t[i].tb, s.dt = t[i].dt, s.ct = t[i].ct;
    s.aout = op == OP_AG && t[i].aout;
    s.colmajor = 1;
    run_shape(c, op, &s, 60 + 10 * op + (int)i);
  }
}

static void shapes(MKX_Comm c, int op) {
  static const int64_t ms_ag[] = {128, 256, 384, 128, 512, 1024, 640, 128};
  static const int64_t ms_red[] = {1,    64,   100, 129,  255, 777,
                                   1024, 2048, 513, 4095, 3,   1000};
  static const int64_t ns[] = {8,   64,  128,  200,  256,
                               264, 512, 1000, 1024, 2056};
  static const int64_t ks[] = {8, 64, 128, 192, 256, 520, 1024};
  static const MKX_Datatype cts[] = {MKX_BF16, MKX_FP16, MKX_FP32};
  for (int i = 0; i < 24; i++) {
    shape s;
    memset(&s, 0, sizeof s);
    s.m = op == OP_AG ? ms_ag[i % 8] : ms_red[i % 12];
    s.n = ns[(i * 3) % 10];
    s.k = ks[(i * 5) % 7];
    s.vary = i % 4 == 1 ? 1 : (i % 8 == 6 && mt.size > 1 ? 2 : 0);
    s.pad = i % 3 == 2 ? 8 : 0;
    s.tb = i % 2 ? MKX_TRANS : MKX_NO_TRANS;
    s.dt = (i / 2) % 2 ? MKX_FP16 : MKX_BF16;
    s.ct = i % 5 == 4 ? cts[2] : (s.dt == MKX_FP16 ? cts[1] : cts[0]);
    s.aout = op == OP_AG && i % 3 == 0;
    if (op == OP_AG && i == 23) s.m = 100; /* tiles shared by two ranks */
    if (op == OP_AG && i == 22) s.m = 2048, s.n = 1024, s.k = 1024;
    if (op != OP_AG && i == 23) s.m = 4096, s.n = 1024, s.k = 1024;
    run_shape(c, op, &s, 100 * op + i);
  }
  if (op == OP_AG) shapes_ag_rows(c);
  shapes_colmajor(c, op);
}

/* Option fused_pad=yes: k, n and leading dimensions that are not multiples
 * of 8 go through padded temporaries (src/ops/fused/adapter.c), both orders,
 * A_out, unequal k_local. */
static void shapes_padded(MKX_Comm cpad, int op) {
  static const struct {
    int64_t m, n, k;
    int vary, pad;
    MKX_Trans tb;
    MKX_Datatype dt, ct;
    int aout, cm;
  } t[] = {{100, 250, 100, 0, 0, MKX_TRANS, MKX_BF16, MKX_BF16, 1, 0},
           {257, 64, 37, 1, 3, MKX_NO_TRANS, MKX_FP16, MKX_FP16, 0, 0},
           {129, 1001, 64, 0, 5, MKX_TRANS, MKX_BF16, MKX_FP32, 1, 0},
           {64, 128, 3, 0, 1, MKX_NO_TRANS, MKX_BF16, MKX_BF16, 0, 1},
           {300, 99, 130, 1, 3, MKX_TRANS, MKX_FP16, MKX_BF16, 1, 1}};
  pad_mode = 1;
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    shape s;
    memset(&s, 0, sizeof s);
    s.m = t[i].m, s.n = t[i].n, s.k = t[i].k;
    s.vary = t[i].vary, s.pad = t[i].pad, s.tb = t[i].tb;
    s.dt = t[i].dt, s.ct = t[i].ct;
    s.aout = op == OP_AG && t[i].aout;
    s.colmajor = t[i].cm;
    run_shape(cpad, op, &s, 80 + 10 * op + (int)i);
  }
  pad_mode = 0;
}

/* Variants of the inputs (host-path references) for the repeat tests. */
typedef struct variants {
  prob p;
  void *dA[3], *ref[3];
} variants;

static void variants_init(variants *v, MKX_Comm c, int op, const shape *s) {
  prob_init(&v->p, op, s);
  /* only A changes between variants: the device keeps one B */
  for (int i = 0; i < 3; i++) {
    prob_fill(&v->p, 1000 + 17 * i + op, 999 + op);
    mt_poison(v->p.hC, v->p.cbytes);
    CHECK_RC(prob_call(&v->p, c, 0, NULL), MKX_SUCCESS, "oracle");
    v->ref[i] = malloc(v->p.cbytes + 16);
    memcpy(v->ref[i], v->p.hC, v->p.cbytes);
    v->dA[i] = dev_alloc(v->p.abytes);
    mt_dev_copy(v->dA[i], v->p.dA, v->p.abytes, st);
  }
  mt_dev_fill(v->p.dC, 0xFF, v->p.cbytes, st); /* padding stays poison */
}

static void variants_free(variants *v) {
  for (int i = 0; i < 3; i++) free(v->ref[i]), cudaFree(v->dA[i]);
  prob_free(&v->p);
}

/* On a mismatch, say whether C holds another variant's result (a stale
 * run) rather than garbage. */
static int check_variant(variants *v, const void *dC, int which,
                         const char *what) {
  memcpy(v->p.hC, v->ref[which], v->p.cbytes);
  if (compare_c(&v->p, dC, what)) return 1;
  void *got = device_c(&v->p, dC);
  for (int i = 0; i < 3; i++)
    if (i != which)
      printf(
          "# [rank %d] %s: expected variant %d; relerr against variant "
          "%d: %.2e\n",
          mt.rank, what, which, i, compare_host(&v->p, got, v->ref[i]).rel);
  free(got);
  return 0;
}

/* 1000 plain calls, inputs rotating over 3 buffers, outputs over 4, no
 * synchronisation except at the checks. */
static void back_to_back(MKX_Comm c, int op) {
  shape s = {256, 256, 256, 0, 0, MKX_TRANS, MKX_BF16, MKX_BF16, 0};
  variants v;
  variants_init(&v, c, op, &s);
  void *dC[4];
  for (int j = 0; j < 4; j++) dC[j] = dev_alloc(v.p.cbytes);
  long before = fused_starts(), split0 = mkx_path_starts(MKX_PATH_TP_SPLIT);
  int rc = MKX_SUCCESS;
  for (int i = 0; i < 1000 && rc == MKX_SUCCESS; i++) {
    void *keep = v.p.dA;
    v.p.dA = v.dA[i % 3];
    rc = prob_call(&v.p, c, 1, dC[i % 4]);
    v.p.dA = keep;
    if (i % 250 == 249) {
      CUDA(cudaStreamSynchronize(st));
      for (int j = 0; j < 4; j++)
        check_variant(&v, dC[(i - j) % 4], (i - j) % 3, "back-to-back");
    }
  }
  CHECK_RC(rc, MKX_SUCCESS, "%s: 1000 back-to-back calls", op_name[op]);
  CHECK(fused_starts() - before == 1000, "%s: all 1000 calls fused",
        op_name[op]);
  CHECK(mkx_path_starts(MKX_PATH_TP_SPLIT) - split0 ==
            (expect_split(&v.p) ? 1000 : 0),
        "%s: 1000 calls on the %s path", op_name[op],
        expect_split(&v.p) ? "split" : "overlapped");
  for (int j = 0; j < 4; j++) cudaFree(dC[j]);
  variants_free(&v);
}

/* A persistent plan started 60 times; the bound A changes in between. */
static void persistent(MKX_Comm c, int op) {
  shape s = {384, 512, 192, 1, 8, MKX_NO_TRANS, MKX_FP16, MKX_FP16, 0};
  if (op == OP_AG) s.m = 256;
  variants v;
  variants_init(&v, c, op, &s);
  MKX_Request r;
  int rc = prob_init_plan(&v.p, c, &r);
  CHECK_RC(rc, MKX_SUCCESS, "%s_init", op_name[op]);
  if (rc != MKX_SUCCESS) return variants_free(&v);
  for (int i = 0; i < 60 && rc == MKX_SUCCESS; i++) {
    CUDA(cudaMemcpyAsync(v.p.dA, v.dA[i % 3], v.p.abytes,
                         cudaMemcpyDeviceToDevice, st));
    rc = MKX_Start(r, st);
    if (i % 20 == 19 || i == 0) {
      CUDA(cudaStreamSynchronize(st));
      check_variant(&v, v.p.dC, i % 3, "persistent");
    }
  }
  CHECK_RC(rc, MKX_SUCCESS, "%s: 60 starts", op_name[op]);
  CHECK_RC(MKX_Request_free(&r), MKX_SUCCESS, "request free");
  variants_free(&v);
}

/* MKX_Start captured once in a CUDA graph, replayed with changing A. */
static void graph(MKX_Comm c, int op) {
  shape s = {512, 1024, 256, 0, 0, MKX_TRANS, MKX_BF16, MKX_BF16, 1};
  variants v;
  variants_init(&v, c, op, &s);
  MKX_Request r;
  cudaGraph_t g;
  cudaGraphExec_t ge;
  int rc = prob_init_plan(&v.p, c, &r);
  CHECK_RC(rc, MKX_SUCCESS, "%s_init for graph", op_name[op]);
  if (rc != MKX_SUCCESS) return variants_free(&v);
  const char *path = NULL;
  int capturable = 0, ctas = 0;
  CHECK_RC(MKX_Request_get_path(r, &path, &capturable, &ctas), MKX_SUCCESS,
           "%s: path query", op_name[op]);
  CHECK(capturable && ctas > 0,
        "%s: the plan's path (%s, %d CTAs) may be "
        "captured",
        op_name[op], path ? path : "NULL", ctas);
  CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  rc = MKX_Start(r, st);
  CUDA(cudaStreamEndCapture(st, &g));
  CHECK_RC(rc, MKX_SUCCESS, "%s: MKX_Start under capture", op_name[op]);
  CUDA(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < 6; i++) {
    CUDA(cudaMemcpyAsync(v.p.dA, v.dA[i % 3], v.p.abytes,
                         cudaMemcpyDeviceToDevice, st));
    CUDA(cudaGraphLaunch(ge, st));
    CUDA(cudaStreamSynchronize(st));
    check_variant(&v, v.p.dC, i % 3, "graph replay");
  }
  CUDA(cudaGraphExecDestroy(ge));
  CUDA(cudaGraphDestroy(g));
  CHECK_RC(MKX_Request_free(&r), MKX_SUCCESS, "request free");
  variants_free(&v);
}

/* AllReduce: every rank holds the same bits of C. */
static void same_bits(const prob *p, const char *what) {
  void *got = device_c(p, p->dC);
  unsigned long long h = mt_hash(got, p->cbytes, 0), lo = h, hi = h;
  free(got);
  MPI_Allreduce(&h, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  CHECK(lo == hi, "%s: C has the same bits on every rank", what);
}

/* The capture of a one-shot call ended, its graph replayed with A
 * changing (variants 1, 2, 0), each replay checked. */
static void replay_call(variants *v, int op, cudaGraph_t g) {
  cudaGraphExec_t ge;
  CUDA(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 1; i <= 3; i++) {
    CUDA(cudaMemcpyAsync(v->p.dA, v->dA[i % 3], v->p.abytes,
                         cudaMemcpyDeviceToDevice, st));
    CUDA(cudaGraphLaunch(ge, st));
    CUDA(cudaStreamSynchronize(st));
    check_variant(v, v->p.dC, i % 3, "one-shot graph replay");
    if (op == OP_AR) same_bits(&v->p, "one-shot graph replay");
  }
  CUDA(cudaGraphExecDestroy(ge));
}

static MKX_Comm comm_with(const char *key, ...);

/* A one-shot call under capture on a communicator that has made nothing
 * yet: refused on every rank (MKX_ERR_UNSUPPORTED, saying what to do)
 * before the stream is touched; once the call ran outside the capture,
 * captured (its workspace stays the graph's) and replayed.  vary 2: rank
 * 1 has no rows (AG) or k_local = 0 (RS, AR). */
static void graph_call(int op, int vary) {
  MKX_Comm c = comm_with("mkx_fused_pad", "no", NULL);
  shape s = {512, 1024, 256, vary, 0, MKX_TRANS, MKX_BF16, MKX_BF16, 1};
  variants v;
  variants_init(&v, c, op, &s);
  cudaGraph_t g = NULL;
  CUDA(cudaStreamSynchronize(st));
  CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  int rc = prob_call(&v.p, c, 1, NULL);
  cudaError_t e = cudaStreamEndCapture(st, &g);
  if (CHECK_RC(rc, MKX_ERR_UNSUPPORTED, "%s: one-shot captured first",
               op_name[op]))
    CHECK(strstr(MKX_Get_last_error(), "outside the capture") != NULL,
          "the message says what to do: %s", MKX_Get_last_error());
  CHECK(e == cudaSuccess && g != NULL, "the capture ends cleanly (%s)",
        cudaGetErrorString(e));
  if (g) CUDA(cudaGraphDestroy(g));
  g = NULL;
  (void)cudaGetLastError();
  mt_dev_copy(v.p.dA, v.dA[0], v.p.abytes, st);
  rc = prob_call(&v.p, c, 1, NULL);
  CHECK_RC(rc, MKX_SUCCESS, "%s: one-shot outside the capture", op_name[op]);
  CUDA(cudaStreamSynchronize(st));
  check_variant(&v, v.p.dC, 0, "one-shot before the capture");
  CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  rc = prob_call(&v.p, c, 1, NULL);
  e = cudaStreamEndCapture(st, &g);
  CHECK_RC(rc, MKX_SUCCESS, "%s: one-shot under capture", op_name[op]);
  CHECK(e == cudaSuccess && g != NULL, "the capture ends (%s)",
        cudaGetErrorString(e));
  const char *path = NULL;
  int capturable = 0, ctas = 0;
  MKX_Comm_get_last_path(c, &path, &capturable, &ctas);
  CHECK(capturable, "%s: the captured call's path (%s) says it may be",
        op_name[op], path ? path : "NULL");
  if (rc == MKX_SUCCESS && g) replay_call(&v, op, g);
  if (g) CUDA(cudaGraphDestroy(g));
  /* beside the graph's workspace, the next plain call makes another */
  mt_dev_copy(v.p.dA, v.dA[2], v.p.abytes, st);
  CHECK_RC(prob_call(&v.p, c, 1, NULL), MKX_SUCCESS,
           "%s: a plain call after the capture", op_name[op]);
  CUDA(cudaStreamSynchronize(st));
  check_variant(&v, v.p.dC, 2, "plain call after the capture");
  variants_free(&v);
  CHECK_RC(MKX_Comm_free(&c), MKX_SUCCESS, "free after a captured call");
}

/* fused=off stages through the host: no fused start. */
/* A call whose path cannot be captured (staged: option fused=off) on a
 * capturing stream: MKX_ERR_UNSUPPORTED on every rank before the stream is
 * touched, so the capture ends cleanly; a plan's path says so too. */
static void refused_under_capture(MKX_Comm off) {
  shape s = {256, 256, 128, 0, 0, MKX_TRANS, MKX_BF16, MKX_BF16, 0};
  prob p;
  prob_init(&p, OP_AR, &s);
  prob_fill(&p, 9, 9);
  CUDA(cudaStreamSynchronize(st));
  cudaGraph_t g = NULL;
  CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  const int rc = prob_call(&p, off, 1, NULL);
  const cudaError_t e = cudaStreamEndCapture(st, &g);
  if (CHECK_RC(rc, MKX_ERR_UNSUPPORTED, "staged call under capture"))
    CHECK(strstr(MKX_Get_last_error(), "CUDA graph") != NULL,
          "the message says why: %s", MKX_Get_last_error());
  CHECK(e == cudaSuccess && g != NULL, "the capture ends cleanly (%s)",
        cudaGetErrorString(e));
  if (g) CUDA(cudaGraphDestroy(g));
  (void)cudaGetLastError();
  MKX_Request r = NULL;
  const char *path = NULL;
  int capturable = -1, ctas = -1;
  CHECK_RC(prob_init_plan(&p, off, &r), MKX_SUCCESS, "a staged plan");
  if (r) MKX_Request_get_path(r, &path, &capturable, &ctas);
  CHECK(path && !strcmp(path, "staged") && capturable == 0 && ctas == 0,
        "the staged plan's path: %s, capturable %d, %d CTAs",
        path ? path : "NULL", capturable, ctas);
  if (r) MKX_Request_free(&r);
  prob_free(&p);
}

static void contrast(MKX_Comm off) {
  shape s = {256, 256, 128, 0, 0, MKX_TRANS, MKX_BF16, MKX_BF16, 0};
  for (int op = 0; op < 3; op++) {
    prob p;
    prob_init(&p, op, &s);
    prob_fill(&p, 7, 7);
    long before = fused_starts();
    long staged0 = mkx_path_starts(MKX_PATH_STAGED);
    CHECK_RC(prob_call(&p, off, 1, NULL), MKX_SUCCESS, "fused=off call");
    CUDA(cudaStreamSynchronize(st));
    CHECK(fused_starts() == before &&
              mkx_path_starts(MKX_PATH_STAGED) == staged0 + 1,
          "%s with fused=off is staged", op_name[op]);
    prob_free(&p);
  }
}

/* tp_partials=fp32: unrounded partials between GPUs (the default sends
 * them in C's type); rows shared by two owners (M = 777, 1000) too. */
static void partials_fp32(MKX_Comm f32) {
  shape t[] = {{777, 512, 256, 0, 0, MKX_TRANS, MKX_BF16, MKX_BF16, 0},
               {2048, 1024, 512, 1, 8, MKX_NO_TRANS, MKX_FP16, MKX_FP16, 0},
               {1000, 264, 128, 0, 0, MKX_TRANS, MKX_BF16, MKX_BF16, 0}};
  for (int op = OP_RS; op <= OP_AR; op++)
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
      run_shape(f32, op, &t[i], 40 + (int)i);
}

/* A communicator with one MPI_Info key set (aborts on failure). */
/* Two persistent allreduce plans on small C buffers alive at once: the
 * driver may carve both out of one block, which the peers cannot map twice
 * (the second plan then takes the split path).  Both correct either way. */
static void two_small_c(MKX_Comm cov) {
  shape s = {2048, 64, 128, 0, 0, MKX_TRANS, MKX_BF16, MKX_BF16, 0};
  prob p[2];
  MKX_Request r[2] = {NULL, NULL};
  for (int i = 0; i < 2; i++) {
    prob_init(&p[i], OP_AR, &s);
    prob_fill(&p[i], 900 + i, 900 + i);
    CHECK_RC(prob_call(&p[i], cov, 0, NULL), MKX_SUCCESS,
             "host oracle gemm_ar (two small C)");
  }
  long split0 = mkx_path_starts(MKX_PATH_TP_SPLIT);
  for (int i = 0; i < 2; i++)
    CHECK_RC(prob_init_plan(&p[i], cov, &r[i]), MKX_SUCCESS,
             "gemm_ar plan %d of two on small C", i);
  for (int i = 0; i < 2; i++) {
    mt_dev_fill(p[i].dC, 0xFF, p[i].cbytes, st);
    if (r[i]) CHECK_RC(MKX_Start(r[i], st), MKX_SUCCESS, "start %d", i);
  }
  CUDA(cudaStreamSynchronize(st));
  for (int i = 0; i < 2; i++) {
    compare_c(&p[i], p[i].dC, "two small C");
    check_same_bits(&p[i]);
    if (r[i]) MKX_Request_free(&r[i]);
    prob_free(&p[i]);
  }
  if (mt.rank == 0)
    printf("# two small C: %ld of 2 starts took the split path\n",
           mkx_path_starts(MKX_PATH_TP_SPLIT) - split0);
}

/* A communicator with these MPI_Info keys and values (NULL-terminated). */
static MKX_Comm comm_with(const char *key, ...) {
  MPI_Info info;
  MKX_Comm c = NULL;
  va_list ap;
  MPI_Info_create(&info);
  va_start(ap, key);
  for (const char *k = key; k; k = va_arg(ap, const char *))
    MPI_Info_set(info, k, va_arg(ap, const char *));
  va_end(ap);
  int rc = MKX_Comm_create(MPI_COMM_WORLD, info, &c);
  MPI_Info_free(&info);
  if (!CHECK_RC(rc, MKX_SUCCESS, "comm with %s=...", key))
    MPI_Abort(MPI_COMM_WORLD, 1);
  return c;
}

/* The repeated calls alone (back-to-back, persistent plans, graphs) on a
 * communicator, path forced: the runs that once found stale inputs. */
static void repeats(MKX_Comm c, int mode, const char *only) {
  if (!only || strcmp(only, "repeat")) return;
  split_mode = mode;
  for (int op = 0; op < 3; op++) {
    back_to_back(c, op);
    persistent(c, op);
    graph(c, op);
  }
  split_mode = -1;
}

/* AllGather+GEMM shapes with more tiles than the CTAs: stream-K splits
 * some last waves, unless every call splits (time slices). */
static void stream_k(MKX_Comm cov, const char *only) {
  if (only && strcmp(only, "stream-k")) return;
  const long sk0 = mkx_tp_ag_sk_launches();
  split_mode = 0;
  shapes_stream_k(cov);
  split_mode = -1;
  const long nsk = mkx_tp_ag_sk_launches() - sk0;
  CHECK(sliced ? nsk == 0 : nsk > 0,
        "stream-k: %ld AllGather+GEMM "
        "launches split their last wave (expected %s)",
        nsk, sliced ? "none: split path" : "some");
}

/* Does the back-to-back AllGather+GEMM fit in one kernel on c (tiles and
 * push CTAs within the CTAs a rank may take: fewer on a shared GPU)? */
static int b2b_fits_one_kernel(MKX_Comm c) {
  mkx_tp_ag_desc d;
  int tile, chunk_kb, nkc;
  memset(&d, 0, sizeof d);
  d.m = 256 * (int64_t)mt.size, d.n = 256, d.k = 256; /* back_to_back */
  d.ab_type = d.c_type = MKX_GEMM_BF16;
  d.b_kmajor = 1;
  d.sync.ctas = c->share.ctas;
  return mkx_tp_ag1_shape(&d, 1, &tile, &chunk_kb, &nkc);
}

/* The shape, plan and graph parts on a communicator, path forced or not,
 * for the calls in `ops` (bit op).  ag1: whether split AllGather+GEMMs may
 * run as one kernel (option tp_ag_oneshot with the engine): then the 1000
 * back-to-back calls do where they fit (and most shapes), else none. */
static void parts(MKX_Comm c, int mode, const char *only, const char *name,
                  int ops, int ag1) {
  if (only && strcmp(only, name)) return;
  split_mode = mode;
  long ag1_0 = mkx_path_starts(MKX_PATH_TP_ONE_KERNEL);
  for (int op = 0; op < 3; op++) {
    if (!(ops >> op & 1)) continue;
    shapes(c, op);
    back_to_back(c, op);
    persistent(c, op);
    graph(c, op);
  }
  const long n1 = mkx_path_starts(MKX_PATH_TP_ONE_KERNEL) - ag1_0;
  const int many = ag1 && (ops & 1) && b2b_fits_one_kernel(c);
  CHECK(many  ? n1 > 1000
        : ag1 ? n1 < 1000
              : n1 == 0,
        "%s: %ld "
        "AllGather+GEMM calls in one kernel (expected %s)",
        name, n1,
        many  ? "> 1000"
        : ag1 ? "< 1000: not the back-to-back ones"
              : "none");
  split_mode = -1;
}

int main(int argc, char **argv) {
  mt_init(&argc, &argv);
  int skip = mt_gpu_count() == 0;
  MPI_Allreduce(MPI_IN_PLACE, &skip, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (skip) {
    if (mt.rank == 0) printf("1..0 # SKIP %s: no GPU\n", mt.prog);
    MPI_Finalize();
    return CHECK_SKIP;
  }
  CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  /* fused_pad=no: the shapes that do not fit must stage (expect_fused) */
  MKX_Comm c = comm_with("mkx_fused", "auto", "mkx_fused_pad", "no", NULL);
  /* tp_ag_oneshot=no: where every call splits (time slices) none runs as
   * one kernel, as on the overlapped path */
  MKX_Comm cov = comm_with("mkx_fused_pad", "no", "mkx_tp_overlap", "yes",
                           "mkx_tp_ag_oneshot", "no", NULL);
  /* split with AllGather+GEMM in one kernel wherever it fits (auto: only
   * K >= 2048), and in two kernels */
  MKX_Comm cnp =
      comm_with("mkx_fused_pad", "no", "mkx_tp_overlap", "yes",
                "mkx_tp_ag_oneshot", "no", "mkx_tp_pull", "no", NULL);
  MKX_Comm csp = comm_with("mkx_fused_pad", "no", "mkx_tp_overlap", "no",
                           "mkx_tp_ag_oneshot", "yes", NULL);
  MKX_Comm cbl = comm_with("mkx_fused_pad", "no", "mkx_tp_overlap", "no",
                           "mkx_tp_split_gemm", "cublas", NULL);
  MKX_Comm ctwo = comm_with("mkx_fused_pad", "no", "mkx_tp_overlap", "no",
                            "mkx_tp_ag_oneshot", "no", NULL);
  MKX_Comm off =
      comm_with("mkx_fused", "off", NULL); /* whatever MKX_FUSED says */
  MKX_Comm f32 = comm_with("mkx_tp_partials", "fp32", NULL);
  MKX_Comm cpad = comm_with("mkx_fused_pad", "yes", NULL);
  MKX_Comm cpov =
      comm_with("mkx_fused_pad", "yes", "mkx_tp_overlap", "yes", NULL);
  sliced = c->share.mode == MKX_SHARE_TIMESLICED;
  if (mt.rank == 0)
    printf("# GPU %s, %d rank(s) on it, fused kernels take %d CTAs\n",
           mkx_gpu_share_name(c->share.mode), c->share.ranks,
           c->share.ctas ? c->share.ctas : c->share.dev_sms);
  /* overlap|split|split-cublas|split-two|stream-k|auto|pad|repeat */
  const char *only = getenv("MKX_TEST_PART");
  /* first: a captured start that reads operands in place keeps the peers'
   * buffers mapped until its communicator is freed (a graph may replay
   * it), and a peer's new small buffer carved from the same driver block
   * as a freed one cannot be mapped then (its calls move the operands) */
  if (!only || !strcmp(only, "auto")) {
    for (int op = 0; op < 3; op++) shapes(c, op);
    contrast(off);
    refused_under_capture(off);
    for (int op = 0; op < 3; op++) graph_call(op, 1);
    for (int op = 0; op < 3 && mt.size > 1; op++) graph_call(op, 2);
    partials_fp32(f32);
  }
  parts(cov, 0, only, "overlap", 7, 0);
  parts(csp, 1, only, "split", 7, 1);
  parts(cbl, 1, only, "split-cublas", 7, 0);
  parts(ctwo, 1, only, "split-two", 1, 0);
  if (!only || !strcmp(only, "overlap")) two_small_c(cov);
  /* where the operands are read in place: the moving paths as well */
  if (mkx_tp_wants_pull(cov)) parts(cnp, 0, only, "overlap", 7, 0);
  if (!only || !strcmp(only, "overlap")) unmappable(cov);
  stream_k(cnp, only);
  repeats(cov, 0, only);
  repeats(csp, 1, only);
  for (int op = 0; op < 3; op++)
    if (!only || !strcmp(only, "pad")) {
      shapes_padded(cpad, op);
      split_mode = 0;
      shapes_padded(cpov, op);
      split_mode = -1;
    }
  CUDA(cudaStreamDestroy(st));
  MKX_Comm_free(&cpov);
  MKX_Comm_free(&cpad);
  MKX_Comm_free(&cbl);
  MKX_Comm_free(&ctwo);
  MKX_Comm_free(&csp);
  MKX_Comm_free(&cov);
  MKX_Comm_free(&cnp);
  MKX_Comm_free(&f32);
  MKX_Comm_free(&off);
  MKX_Comm_free(&c);
  return mt_finish();
}
