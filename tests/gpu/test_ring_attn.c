/*
 * MKX_Ring_attention's GPU paths (the attention engine on one rank, the
 * ring of one node, and of several nodes: MKX_VIRTUAL_NODE_SIZE cuts one
 * host into several: the network part driven by the GPU with
 * MKX_HIER_ATTN=proxy, and by default on nodes of one rank or with the
 * network region in host memory (option net_gpu_region), else by the
 * host, then without 4 and 5)
 * against the host path as oracle: the same call, on
 * the same communicator, on host copies of the same inputs (softmax in
 * double).  Runs with one GPU per rank and with ranks sharing a GPU (MPS
 * or time slices).  Skips (77) without a GPU, or where it is not sm_90
 * (the engine's).
 *
 *  1. random cases from the seed: seq_local 1, 77, 128, 1000 (and one of
 *     4096 on at most 2 ranks), head_dim 64, 128 and the padded 96 and 40,
 *     heads_q / heads_kv from 1, 4, 8, batch 1-3, causal or not, bf16 and
 *     fp16, every layout (option attn_layout; zigzag with seq_local made
 *     even), LSE given or NULL, scale default or not, Q scaled by 1, 4 or
 *     16 (flat or peaked softmax).  O and LSE poisoned, a guard band past
 *     each; every call must take the GPU path (its start counter grows by
 *     one, nothing staged); O within the type's tolerance of the largest
 *     |O| of its (batch, head), LSE within 1e-3 + 1e-4 |LSE|, nothing
 *     written past either, LSE untouched when NULL; on several nodes the
 *     network bytes of the call are every rank's K and V once to each
 *     other node, no more (the host path's minimum).  Calls the GPU path
 *     cannot take (fp32, head dims 36 and 136) are staged and still right;
 *  2. 1000 back-to-back calls on one shape, the inputs changed (on the
 *     stream) before the last; one synchronisation at the end; the last
 *     result against the oracle of its inputs, which is checked to differ
 *     from that of the earlier ones by more than the tolerance (a stale
 *     result fails);
 *  3. a persistent plan started 50 times, inputs copied into its bound
 *     buffers between starts (on the stream, no synchronisation); every
 *     start's O and LSE equal, bit for bit, a plain call's on the same
 *     inputs (itself checked against the oracle);
 *  4. MKX_Start, and a plain call, captured into a CUDA graph on a
 *     non-default stream,
 *     replayed 3 times with changed inputs: bit for bit as in 3;
 *  5. (2 ranks or more) a missing rank: on a fresh communicator with
 *     mkx_timeout_ms=300, every rank starts a plan once (GPU path, right
 *     result); then every rank but rank 1 starts it again.  They must get
 *     MKX_ERR_TIMEOUT (with more than two ranks, MKX_ERR_PEER from a rank
 *     that gave up first) naming rank 1, after about timeout_ms and
 *     within BOUND_S seconds: from the start itself with option blocking,
 *     else from MKX_Comm_get_async_error once the stream is done; the
 *     communicator is then unusable (MKX_ERR_INVALID_COMM).  Rank 1 waits
 *     at a barrier; then every rank frees the request and the
 *     communicator.  A case still running after GUARD_S seconds hangs:
 *     alarm() ends it as a failure.
 *
 * Tolerances.  The engine computes S = Q K^T in fp32 from exact products
 * of the 16-bit inputs, the softmax in fp32, rounds P to the input type
 * for P V (fp32 accumulation) and rounds O once.  The host path rounds the
 * exact (double) O once.  The two roundings of O may differ by one unit
 * in the last place: 2^-7 of |O| in bf16, 2^-10 in fp16; P's rounding
 * (2^-9, 2^-12 relative, errors of random sign over the keys) adds far
 * less.  So 2e-2 (bf16) and 5e-3 (fp16) of the largest |O| of the
 * (batch, head) leave a margin of about 2.5x and 5x, while a wrong key
 * set, mask, head or scale moves O by a good part of |O|.  LSE: fp32
 * scores and sums, errors near 1e-5.
 *
 * Inputs and poison are written on the test's non-blocking stream and
 * waited for (mt_dev_copy, mt_dev_fill).  Buffers are tbufs: a host copy
 * (the oracle's inputs) and a device copy (mt.device is set once a GPU is
 * found).  The host oracle is the library's naive double loop: cases are
 * cut (batch, then heads, then seq_local) to at most COST_CAP
 * multiply-adds of Q K^T per rank, about 2 s.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime.h>
#include "mkx_test.h"
#include "cuda_check.h"
#include "core/comm.h"
#include "core/comm_net.h"
#include "ops/path.h"

#define CUDA(call) MT_CUDA(call)
#define MPI(call)                                                              \
  do {                                                                         \
    if ((call) != MPI_SUCCESS) {                                               \
      printf("not ok - rank %d: %s failed\n", mt.rank, #call);                 \
      fflush(stdout);                                                          \
      MPI_Abort(MPI_COMM_WORLD, 1);                                            \
    }                                                                          \
  } while (0)

#define NCASES 24    /* random cases: 2 types x 3 layouts x causal x LSE */
#define COST_CAP 6e8 /* batch*seq_local*heads_q*seq*head_dim per case */
#define LSE_ABS 1e-3 /* LSE within LSE_ABS + LSE_REL |LSE| */
#define LSE_REL 1e-4
#define B2B_CALLS 1000 /* back-to-back plain calls */
#define PLAN_STARTS 50 /* starts of one plan */
#define REPLAYS 3      /* replays of a captured start */
#define TIMEOUT_MS 300 /* the missing-rank communicators' bound */
#define BOUND_S 20.0   /* a missing rank is reported within this */
#define GUARD_S 120    /* a missing-rank case still running: it hangs */
#define LATE 1         /* the rank that skips a start */

enum { CONTIGUOUS, ZIGZAG, STRIPED, NLAYOUTS };
static const char *const layout_names[NLAYOUTS] = {"contiguous", "zigzag",
                                                   "striped"};

static cudaStream_t st;
static MKX_Comm comms[NLAYOUTS]; /* option attn_layout = each layout */

static int nodes = 1; /* of the communicators (option virtual_node_size) */
static int by_gpu;    /* several nodes: the network part driven by the GPU
                         (option hier_attn proxy, or auto on nodes of one
                         rank or with the region in host memory) */

/* Nodes of several ranks: the network region in host memory (option
 * net_gpu_region host, or auto over a transport that copies device
 * memory with CUDA), where hier_attn=auto drives the network by the GPU. */
static int region_in_host(MKX_Comm c) {
  return c->opt.net_gpu_region == MKX_NET_REGION_HOST ||
         (c->opt.net_gpu_region == MKX_NET_REGION_AUTO &&
          mkx_comm_net_stages_device(c));
}

/* The GPU path an eligible call takes here, and all GPU starts so far. */
static mkx_path gpu_path(void) {
  return nodes > 1 && by_gpu ? MKX_PATH_ATTN_NET
         : nodes > 1         ? MKX_PATH_ATTN_HIER
         : mt.size > 1       ? MKX_PATH_ATTN_RING
                             : MKX_PATH_ATTN;
}
static long gpu_starts(void) {
  return mkx_path_starts(MKX_PATH_ATTN) + mkx_path_starts(MKX_PATH_ATTN_RING) +
         mkx_path_starts(MKX_PATH_ATTN_HIER) +
         mkx_path_starts(MKX_PATH_ATTN_NET);
}

/* O within this fraction of the largest |O| of its (batch, head). */
static double tol_o(MKX_Datatype t) {
  return t == MKX_BF16   ? 2e-2
         : t == MKX_FP16 ? 5e-3
         : t == MKX_FP32 ? 1e-5
                         : 1e-12;
}

/* ---- one problem: sizes, device buffers, the oracle's outputs ------------ */

typedef struct acase {
  int64_t b, s, hq, hkv, d;
  int causal;
  double scale; /* as passed: <= 0 selects 1/sqrt(head_dim) */
  MKX_Datatype dt;
  int lse;    /* pass LSE (else NULL) */
  int layout; /* which of comms[] */
  int spread; /* Q values scaled by this power of 2 */
} acase;

typedef struct aprob {
  acase a;
  char desc[256];
  size_t nq, nkv, nl; /* elements of Q (and O), K (and V), LSE */
  size_t go, gl;      /* guard elements past O and past LSE */
  size_t es;
  tbuf q, k, v, o, l; /* inputs (host copy: the oracle's) and outputs */
  void *ho;           /* the oracle's O and LSE */
  float *hl;
  int oracle_ok;
} aprob;

static void alloc_or_die(tbuf *b, size_t bytes, const char *what) {
  if (tbuf_alloc(b, bytes)) {
    printf("not ok - rank %d: allocating %s (%zu bytes) failed\n", mt.rank,
           what, bytes);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

static void *malloc_or_die(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    printf("not ok - rank %d: malloc(%zu) failed\n", mt.rank, bytes);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return p;
}

/* tbuf_free without an unchecked cudaFree. */
static void tb_free(tbuf *b) {
  if (b->dev) CUDA(cudaFree(b->dev));
  b->dev = NULL;
  tbuf_free(b);
}

static void describe(aprob *p, const char *what) {
  const acase *a = &p->a;
  snprintf(p->desc, sizeof p->desc,
           "%s: batch=%lld seq_local=%lld heads_q=%lld heads_kv=%lld "
           "head_dim=%lld causal=%d scale=%g %s layout=%s LSE=%s Q x%d",
           what, (long long)a->b, (long long)a->s, (long long)a->hq,
           (long long)a->hkv, (long long)a->d, a->causal, a->scale,
           mt_type_name(a->dt), layout_names[a->layout],
           a->lse ? "yes" : "NULL", a->spread);
}

static void prob_init(aprob *p, const acase *a, const char *what) {
  memset(p, 0, sizeof *p);
  p->a = *a;
  describe(p, what);
  p->es = mt_type_size(a->dt);
  p->nq = (size_t)(a->b * a->s * a->hq * a->d);
  p->nkv = (size_t)(a->b * a->s * a->hkv * a->d);
  p->nl = (size_t)(a->b * a->hq * a->s);
  /* a whole tile of 128 rows past the end, and past the last LSE row */
  p->go = (size_t)(128 * a->hq * a->d);
  p->gl = 256;
  alloc_or_die(&p->q, p->nq * p->es, "Q");
  alloc_or_die(&p->k, p->nkv * p->es, "K");
  alloc_or_die(&p->v, p->nkv * p->es, "V");
  alloc_or_die(&p->o, (p->nq + p->go) * p->es, "O");
  alloc_or_die(&p->l, (p->nl + p->gl) * sizeof(float), "LSE");
  p->ho = malloc_or_die(p->nq * p->es);
  p->hl = malloc_or_die(p->nl * sizeof(float));
}

static void prob_free(aprob *p) {
  tb_free(&p->q);
  tb_free(&p->k);
  tb_free(&p->v);
  tb_free(&p->o);
  tb_free(&p->l);
  free(p->ho);
  free(p->hl);
}

/* Fresh inputs of this rank from (seed, rank, salt) into the host copies,
 * then the device copies. */
static void prob_fill(aprob *p, int salt) {
  const acase *a = &p->a;
  double *q =
      mt_gen(a->b * a->s * a->hq, a->d, a->dt, mt.seed, mt.rank, 4 * salt + 1);
  double *k =
      mt_gen(a->b * a->s * a->hkv, a->d, a->dt, mt.seed, mt.rank, 4 * salt + 2);
  double *v =
      mt_gen(a->b * a->s * a->hkv, a->d, a->dt, mt.seed, mt.rank, 4 * salt + 3);
  if (!q || !k || !v) {
    printf("not ok - rank %d: mt_gen failed\n", mt.rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  /* a power of 2: still exact in the type */
  for (size_t i = 0; i < p->nq; i++)
    mt_set(p->q.host, a->dt, i, q[i] * a->spread);
  for (size_t i = 0; i < p->nkv; i++) {
    mt_set(p->k.host, a->dt, i, k[i]);
    mt_set(p->v.host, a->dt, i, v[i]);
  }
  free(q), free(k), free(v);
  mt_dev_copy(p->q.dev, p->q.host, p->q.bytes, st);
  mt_dev_copy(p->k.dev, p->k.host, p->k.bytes, st);
  mt_dev_copy(p->v.dev, p->v.host, p->v.bytes, st);
}

static int plain_call(const aprob *p, int dev, void *O, float *L) {
  const acase *a = &p->a;
  return MKX_Ring_attention(dev ? p->q.dev : p->q.host,
                            dev ? p->k.dev : p->k.host,
                            dev ? p->v.dev : p->v.host, O, a->lse ? L : NULL,
                            a->b, a->s, a->hq, a->hkv, a->d, a->causal,
                            a->scale, a->dt, comms[a->layout], dev ? st : NULL);
}

/* The oracle: the same call on the host copies, which must take the host
 * path. */
static void oracle(aprob *p) {
  mt_poison(p->ho, p->nq * p->es);
  mt_poison(p->hl, p->nl * sizeof(float));
  const long h0 = mkx_path_starts(MKX_PATH_HOST);
  int rc = plain_call(p, 0, p->ho, p->hl);
  p->oracle_ok = CHECK_RC(rc, MKX_SUCCESS, "%s: host oracle", p->desc) &&
                 CHECK(mkx_path_starts(MKX_PATH_HOST) == h0 + 1,
                       "%s: the oracle took the host path", p->desc);
}

static void poison_outputs(aprob *p) {
  mt_dev_fill(p->o.dev, 0xFF, p->o.bytes, st);
  mt_dev_fill(p->l.dev, 0xFF, p->l.bytes, st);
}

static void download(aprob *p) {
  mt_dev_copy(p->o.host, p->o.dev, p->o.bytes, st);
  mt_dev_copy(p->l.host, p->l.dev, p->l.bytes, st);
}

/* Largest error of typed O `got` against typed `ref` over each (batch,
 * head), relative to that (batch, head)'s largest |ref|; infinite on a
 * NaN. */
static double o_error(const acase *a, const void *got, const void *ref) {
  double worst = 0;
  for (int64_t b = 0; b < a->b; b++)
    for (int64_t h = 0; h < a->hq; h++) {
      double emax = 0, rmax = 0;
      for (int64_t i = 0; i < a->s; i++)
        for (int64_t x = 0; x < a->d; x++) {
          const size_t idx = (size_t)(((b * a->s + i) * a->hq + h) * a->d + x);
          const double g = mt_get(got, a->dt, idx), e = mt_get(ref, a->dt, idx);
          const double err = fabs(g - e);
          if (!(err <= emax)) emax = err == err ? err : INFINITY;
          if (fabs(e) > rmax) rmax = fabs(e);
        }
      const double r = emax / (rmax > 0 ? rmax : 1);
      if (!(r <= worst)) worst = r;
    }
  return worst;
}

/* The device outputs (downloaded into p->o.host, p->l.host) against the
 * oracle's (refO, refL): O within tolerance, LSE within LSE_ABS + LSE_REL
 * |LSE|, the guards and an unused LSE buffer still poison. */
static int compare(const aprob *p, const void *refO, const float *refL,
                   const char *what) {
  const acase *a = &p->a;
  int ok = 1;
  const double eo = o_error(a, p->o.host, refO), tol = tol_o(a->dt);
  ok &= CHECK(eo <= tol,
              "%s%s: O within %.0e of its (batch, head)'s largest |O| "
              "(worst %.2e)",
              p->desc, what, tol, eo);
  size_t past = 0;
  for (size_t i = p->nq; i < p->nq + p->go; i++)
    past += !mt_is_poison(p->o.host, a->dt, i);
  ok &= CHECK(past == 0, "%s%s: nothing written past O (%zu elements)", p->desc,
              what, past);
  const float *L = p->l.host;
  if (a->lse) {
    size_t bad = 0, wi = 0;
    double worst = 0;
    for (size_t i = 0; i < p->nl; i++) {
      const double e = fabs((double)L[i] - (double)refL[i]);
      if (!(e <= LSE_ABS + LSE_REL * fabs((double)refL[i]))) bad++;
      if (!(e <= worst)) worst = e == e ? e : INFINITY, wi = i;
    }
    ok &= CHECK(bad == 0,
                "%s%s: LSE within %.0e + %.0e |LSE| (%zu bad, worst %.2e at "
                "%zu: %.7g vs %.7g)",
                p->desc, what, LSE_ABS, LSE_REL, bad, worst, wi, (double)L[wi],
                (double)refL[wi]);
    past = 0;
    for (size_t i = p->nl; i < p->nl + p->gl; i++)
      past += !mt_is_poison(L, MKX_FP32, i);
    ok &= CHECK(past == 0, "%s%s: nothing written past LSE (%zu)", p->desc,
                what, past);
  } else {
    size_t touched = 0;
    for (size_t i = 0; i < p->nl + p->gl; i++)
      touched += !mt_is_poison(L, MKX_FP32, i);
    ok &= CHECK(touched == 0, "%s%s: LSE NULL, its buffer untouched (%zu)",
                p->desc, what, touched);
  }
  return ok;
}

/* Several nodes, the GPU path: every rank's K and V cross to each other
 * node once, and nothing else. */
static void check_bytes(const aprob *p, uint64_t sent) {
  const uint64_t want = (uint64_t)(nodes - 1) * 2 * p->nkv * p->es;
  CHECK(sent == want,
        "%s: %llu bytes sent over the network, K and V once to each other "
        "node (%llu)",
        p->desc, (unsigned long long)sent, (unsigned long long)want);
}

/* One call on the device buffers: the path it takes (GPU, or staged where
 * gpu = 0), the bytes it sends and its outputs against the oracle. */
static void device_case(aprob *p, int gpu) {
  poison_outputs(p);
  const mkx_path want = gpu ? gpu_path() : MKX_PATH_STAGED;
  const long w0 = mkx_path_starts(want), g0 = gpu_starts(),
             s0 = mkx_path_starts(MKX_PATH_STAGED);
  MKX_Comm c = comms[p->a.layout];
  const uint64_t b0 = nodes > 1 ? mkx_comm_net_bytes_sent(c) : 0;
  int rc = plain_call(p, 1, p->o.dev, p->l.dev);
  CHECK_RC(rc, MKX_SUCCESS, "%s: device call", p->desc);
  CUDA(cudaStreamSynchronize(st));
  if (rc == MKX_SUCCESS) {
    /* a wait on the GPU that ran out fails the call after it returned */
    int async = MKX_SUCCESS;
    CHECK_RC(MKX_Comm_get_async_error(c, &async), MKX_SUCCESS,
             "%s: MKX_Comm_get_async_error", p->desc);
    rc = async;
    CHECK_RC(async, MKX_SUCCESS, "%s: no failure on the GPU", p->desc);
  }
  if (nodes > 1 && gpu && rc == MKX_SUCCESS)
    check_bytes(p, mkx_comm_net_bytes_sent(c) - b0);
  const long dw = mkx_path_starts(want) - w0, dg = gpu_starts() - g0,
             ds = mkx_path_starts(MKX_PATH_STAGED) - s0;
  CHECK(dw == 1 && (gpu ? ds == 0 : dg == 0),
        "%s: took the %s path (%ld starts on it, %ld GPU, %ld staged)", p->desc,
        mkx_path_name(want), dw, dg, ds);
  if (rc != MKX_SUCCESS || !p->oracle_ok) return;
  download(p);
  compare(p, p->ho, p->hl, "");
}

/* ---- 1. random cases ---------------------------------------------------- */

static int64_t pick(mt_rng *g, const int64_t *v, int n) {
  return v[mt_rng_int(g, 0, n - 1)];
}

/* Multiply-adds of Q K^T on one rank: the host oracle's cost. */
static double cost(const acase *a) {
  return (double)a->b * (double)a->s * (double)a->hq *
         ((double)a->s * mt.size) * (double)a->d;
}

/* Case i, the same on every rank: type, layout, mask and LSE cycle through
 * their 24 combinations; the rest is drawn from the seed. */
static void draw_case(int i, acase *a) {
  static const int64_t seqs[] = {1, 77, 128, 1000};
  static const int64_t dims[] = {64, 128, 64, 128, 96, 40};
  static const int64_t heads[] = {1, 4, 8};
  static const int64_t spreads[] = {1, 4, 16};
  mt_rng g, g0;
  mt_rng_init(&g, mt.seed, -1, 7000 + i);
  mt_rng_init(&g0, mt.seed, -1, 6999); /* one offset for every case */
  memset(a, 0, sizeof *a);
  a->dt = i % 2 ? MKX_FP16 : MKX_BF16;
  a->layout = i / 2 % NLAYOUTS;
  a->causal = i / 6 % 2;
  a->lse = i / 12 % 2 == 0;
  a->s = pick(&g, seqs, 4);
  if (a->layout == ZIGZAG) a->s += a->s % 2;
  /* the first four cases: 64, 128, 96, 40 in some order */
  if (i < 4) {
    static const int64_t four[] = {64, 128, 96, 40};
    a->d = four[(i + mt_rng_int(&g0, 0, 3)) % 4];
  } else {
    a->d = pick(&g, dims, 6);
  }
  const int64_t kv = mt_rng_int(&g, 0, 2);
  a->hkv = heads[kv];
  a->hq = heads[mt_rng_int(&g, kv, 2)]; /* 1 | 4 | 8: a multiple */
  a->b = mt_rng_int(&g, 1, 3);
  a->scale = mt_rng_int(&g, 0, 1) ? 0.0 : 0.03 + 0.27 * mt_rng_unit(&g);
  a->spread = (int)pick(&g, spreads, 3);
  /* keep the host oracle affordable */
  while (cost(a) > COST_CAP) {
    if (a->b > 1) {
      a->b--;
    } else if (a->hq > 1) {
      a->hq = a->hq == 8 ? 4 : 1;
      if (a->hkv > a->hq) a->hkv = a->hq;
    } else {
      a->s = a->s / 2 + (a->s / 2) % 2; /* even stays even */
    }
  }
}

static void random_cases(void) {
  for (int i = 0; i < NCASES; i++) {
    acase a;
    aprob p;
    char what[32];
    draw_case(i, &a);
    snprintf(what, sizeof what, "case %d", i);
    prob_init(&p, &a, what);
    prob_fill(&p, i);
    oracle(&p);
    device_case(&p, 1);
    prob_free(&p);
  }
  /* the long sequence: 4096 per rank, causal over zigzag (even work per
   * rank), where the host oracle stays affordable */
  if (mt.size <= 2) {
    mt_rng g;
    mt_rng_init(&g, mt.seed, -1, 6998);
    acase a = {1, 4096, 1, 1, 128, 1, 0.0, MKX_BF16, 1, ZIGZAG, 4};
    if (mt_rng_int(&g, 0, 1)) a.dt = MKX_FP16;
    aprob p;
    prob_init(&p, &a, "long sequence");
    prob_fill(&p, 500);
    oracle(&p);
    device_case(&p, 1);
    prob_free(&p);
  } else if (mt.rank == 0) {
    printf("# long sequence (seq_local 4096): on 1 or 2 ranks only\n");
  }
}

/* Calls the GPU path does not take (type, head_dim not a multiple of 8,
 * head_dim over 128): staged, results right. */
static void ineligible(void) {
  static const acase t[] = {
      {1, 16, 4, 1, 64, 1, 0.0, MKX_FP32, 1, CONTIGUOUS, 1},
      {2, 16, 4, 4, 36, 0, 0.0, MKX_BF16, 1, STRIPED, 4},
      {1, 8, 1, 1, 136, 1, 0.0, MKX_FP16, 0, ZIGZAG, 1},
  };
  for (int i = 0; i < (int)(sizeof t / sizeof t[0]); i++) {
    aprob p;
    prob_init(&p, &t[i], "ineligible");
    prob_fill(&p, 600 + i);
    oracle(&p);
    device_case(&p, 0);
    prob_free(&p);
  }
}

/* ---- 2. back-to-back calls ---------------------------------------------- */

static void back_to_back(void) {
  const acase a = {1, 64, 4, 1, 64, 0, 0.0, MKX_FP16, 1, CONTIGUOUS, 4};
  aprob p, last;
  prob_init(&p, &a, "back-to-back");
  prob_init(&last, &a, "back-to-back (last inputs)");
  prob_fill(&p, 700);
  prob_fill(&last, 701);
  oracle(&p);
  oracle(&last);
  /* the check can tell the last inputs' result from the others' */
  const double apart = o_error(&a, p.ho, last.ho);
  CHECK(apart > 10 * tol_o(a.dt),
        "back-to-back: the two inputs' results differ by %.2e (> 10 x "
        "tolerance): a stale result would fail",
        apart);
  poison_outputs(&p);
  const long w0 = mkx_path_starts(gpu_path());
  int rc = MKX_SUCCESS, i;
  for (i = 0; i < B2B_CALLS && rc == MKX_SUCCESS; i++) {
    if (i == B2B_CALLS - 1) {
      CUDA(cudaMemcpyAsync(p.q.dev, last.q.dev, p.q.bytes,
                           cudaMemcpyDeviceToDevice, st));
      CUDA(cudaMemcpyAsync(p.k.dev, last.k.dev, p.k.bytes,
                           cudaMemcpyDeviceToDevice, st));
      CUDA(cudaMemcpyAsync(p.v.dev, last.v.dev, p.v.bytes,
                           cudaMemcpyDeviceToDevice, st));
    }
    rc = plain_call(&p, 1, p.o.dev, p.l.dev);
  }
  CUDA(cudaStreamSynchronize(st));
  CHECK_RC(rc, MKX_SUCCESS, "back-to-back: %d calls (%d made)", B2B_CALLS, i);
  const long dw = mkx_path_starts(gpu_path()) - w0;
  CHECK(dw == B2B_CALLS, "back-to-back: %ld of %d calls on the %s path", dw,
        B2B_CALLS, mkx_path_name(gpu_path()));
  if (rc == MKX_SUCCESS && last.oracle_ok) {
    download(&p);
    compare(&p, last.ho, last.hl, " (the last call)");
  }
  prob_free(&p);
  prob_free(&last);
}

/* ---- 3, 4. a persistent plan, and a start in a CUDA graph --------------- */

/* Inputs in three variants, their plain calls' bits on the bound
 * buffers. */
typedef struct variants {
  aprob bound; /* the buffers a plan binds */
  aprob var[3];
  void *bits_o[3];
  float *bits_l[3];
  int ok;
} variants;

static void copy_inputs(aprob *dst, const aprob *src) {
  CUDA(cudaMemcpyAsync(dst->q.dev, src->q.dev, dst->q.bytes,
                       cudaMemcpyDeviceToDevice, st));
  CUDA(cudaMemcpyAsync(dst->k.dev, src->k.dev, dst->k.bytes,
                       cudaMemcpyDeviceToDevice, st));
  CUDA(cudaMemcpyAsync(dst->v.dev, src->v.dev, dst->v.bytes,
                       cudaMemcpyDeviceToDevice, st));
}

static void poison_async(aprob *p) {
  CUDA(cudaMemsetAsync(p->o.dev, 0xFF, p->o.bytes, st));
  CUDA(cudaMemsetAsync(p->l.dev, 0xFF, p->l.bytes, st));
}

static void variants_init(variants *w) {
  const acase a = {2, 130, 4, 1, 128, 1, 0.0, MKX_BF16, 1, ZIGZAG, 4};
  aprob *p = &w->bound;
  prob_init(p, &a, "plan");
  w->ok = 1;
  for (int v = 0; v < 3; v++) {
    char what[32];
    snprintf(what, sizeof what, "plan inputs %d", v);
    prob_init(&w->var[v], &a, what);
    prob_fill(&w->var[v], 800 + v);
    oracle(&w->var[v]);
    /* the plain call on the bound buffers, checked against the oracle */
    copy_inputs(p, &w->var[v]);
    CUDA(cudaStreamSynchronize(st));
    poison_outputs(p);
    const long w0 = mkx_path_starts(gpu_path());
    int rc = plain_call(p, 1, p->o.dev, p->l.dev);
    CHECK_RC(rc, MKX_SUCCESS, "plain call, plan inputs %d", v);
    CUDA(cudaStreamSynchronize(st));
    CHECK(mkx_path_starts(gpu_path()) == w0 + 1,
          "plain call, plan inputs %d: on the %s path", v,
          mkx_path_name(gpu_path()));
    download(p);
    w->ok &= rc == MKX_SUCCESS && w->var[v].oracle_ok &&
             compare(p, w->var[v].ho, w->var[v].hl, " (plain call)");
    w->bits_o[v] = malloc_or_die(p->o.bytes);
    w->bits_l[v] = malloc_or_die(p->l.bytes);
    memcpy(w->bits_o[v], p->o.host, p->o.bytes);
    memcpy(w->bits_l[v], p->l.host, p->l.bytes);
  }
  /* bit-equality can tell the variants apart */
  w->ok &= CHECK(memcmp(w->bits_o[0], w->bits_o[1], p->nq * p->es) &&
                     memcmp(w->bits_o[1], w->bits_o[2], p->nq * p->es) &&
                     memcmp(w->bits_o[0], w->bits_o[2], p->nq * p->es),
                 "plan: the three inputs give three different results");
  w->ok = mt_all(w->ok);
}

static void variants_free(variants *w) {
  for (int v = 0; v < 3; v++) {
    prob_free(&w->var[v]);
    free(w->bits_o[v]);
    free(w->bits_l[v]);
  }
  prob_free(&w->bound);
}

static int plan_init(aprob *p, MKX_Comm c, MKX_Request *r) {
  const acase *a = &p->a;
  return MKX_Ring_attention_init(p->q.dev, p->k.dev, p->v.dev, p->o.dev,
                                 a->lse ? p->l.dev : NULL, a->b, a->s, a->hq,
                                 a->hkv, a->d, a->causal, a->scale, a->dt, c,
                                 MPI_INFO_NULL, r);
}

/* O and LSE (host copies, whole buffers with their guards) equal variant
 * v's plain call bit for bit. */
static int same_bits(const variants *w, const void *o, const void *l, int v) {
  const aprob *p = &w->bound;
  return !memcmp(o, w->bits_o[v], p->o.bytes) &&
         !memcmp(l, w->bits_l[v], p->l.bytes);
}

/* Which variant start i uses (the same on every rank). */
static int variant_of(int i) {
  mt_rng g;
  mt_rng_init(&g, mt.seed, -1, 9000 + i);
  return (int)mt_rng_int(&g, 0, 2);
}

static void persistent(variants *w) {
  aprob *p = &w->bound;
  MKX_Request r = NULL;
  int rc = plan_init(p, comms[p->a.layout], &r);
  CHECK_RC(rc, MKX_SUCCESS, "plan: MKX_Ring_attention_init");
  if (!mt_all(rc == MKX_SUCCESS)) {
    if (r) CHECK_RC(MKX_Request_free(&r), MKX_SUCCESS, "plan: request free");
    return;
  }
  /* every start's outputs kept on the device until the end */
  char *saved = NULL;
  const size_t ob = p->o.bytes, lb = p->l.bytes;
  CUDA(cudaMalloc((void **)&saved, PLAN_STARTS * (ob + lb)));
  const long w0 = mkx_path_starts(gpu_path());
  int i;
  for (i = 0; i < PLAN_STARTS && rc == MKX_SUCCESS; i++) {
    copy_inputs(p, &w->var[variant_of(i)]);
    poison_async(p);
    rc = MKX_Start(r, st);
    char *so = saved + (size_t)i * (ob + lb);
    CUDA(cudaMemcpyAsync(so, p->o.dev, ob, cudaMemcpyDeviceToDevice, st));
    CUDA(cudaMemcpyAsync(so + ob, p->l.dev, lb, cudaMemcpyDeviceToDevice, st));
  }
  CUDA(cudaStreamSynchronize(st));
  CHECK_RC(rc, MKX_SUCCESS, "plan: %d starts (%d made)", PLAN_STARTS, i);
  const long dw = mkx_path_starts(gpu_path()) - w0;
  CHECK(dw == i, "plan: %ld of %d starts on the %s path", dw, i,
        mkx_path_name(gpu_path()));
  if (rc == MKX_SUCCESS && w->ok) {
    char *h = malloc_or_die(PLAN_STARTS * (ob + lb));
    mt_dev_copy(h, saved, PLAN_STARTS * (ob + lb), st);
    int bad = 0, first = -1;
    for (int j = 0; j < PLAN_STARTS; j++) {
      const char *so = h + (size_t)j * (ob + lb);
      if (!same_bits(w, so, so + ob, variant_of(j))) {
        bad++;
        if (first < 0) first = j;
      }
    }
    if (first >= 0) { /* how far off: another variant's result, or worse */
      const char *so = h + (size_t)first * (ob + lb);
      for (int v = 0; v < 3; v++)
        mt_diag("plan start %d (inputs %d): O against inputs %d's: %.2e", first,
                variant_of(first), v, o_error(&p->a, so, w->var[v].ho));
    }
    CHECK(bad == 0,
          "plan: %d starts with changing inputs, each bit for bit the plain "
          "call's (%d differ, first: start %d)",
          PLAN_STARTS, bad, first);
    free(h);
  }
  CUDA(cudaFree(saved));
  CHECK_RC(MKX_Request_free(&r), MKX_SUCCESS, "plan: request free");
}

/* A start of a plan (plain = 0), or a plain call whose workspace earlier
 * calls made (plain = 1), captured into a CUDA graph and replayed. */
static void graph(variants *w, int plain) {
  aprob *p = &w->bound;
  const char *what = plain ? "graph of a plain call" : "graph";
  MKX_Request r = NULL;
  int rc = plain ? MKX_SUCCESS : plan_init(p, comms[p->a.layout], &r);
  CHECK_RC(rc, MKX_SUCCESS, "%s: MKX_Ring_attention_init", what);
  if (!mt_all(rc == MKX_SUCCESS)) {
    if (r) CHECK_RC(MKX_Request_free(&r), MKX_SUCCESS, "graph: request free");
    return;
  }
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  const long w0 = mkx_path_starts(gpu_path());
  CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  rc = plain ? plain_call(p, 1, p->o.dev, p->l.dev) : MKX_Start(r, st);
  const cudaError_t e = cudaStreamEndCapture(st, &g);
  CHECK_RC(rc, MKX_SUCCESS, "%s: %s under capture", what,
           plain ? "MKX_Ring_attention" : "MKX_Start");
  CHECK(e == cudaSuccess, "%s: capture ends (%s)", what, cudaGetErrorString(e));
  CHECK(mkx_path_starts(gpu_path()) == w0 + 1,
        "%s: the captured run is on the %s path", what,
        mkx_path_name(gpu_path()));
  cudaError_t ie = cudaErrorUnknown;
  if (rc == MKX_SUCCESS && e == cudaSuccess) {
    ie = cudaGraphInstantiate(&ge, g, 0);
    CHECK(ie == cudaSuccess, "%s: instantiate (%s)", what,
          cudaGetErrorString(ie));
  }
  (void)cudaGetLastError(); /* nothing of a failed capture may linger */
  if (mt_all(ie == cudaSuccess)) {
    /* every variant once, the first not what the bound buffers hold */
    const int v0 = variant_of(PLAN_STARTS - 1);
    for (int k = 0; k < REPLAYS; k++) {
      const int v = (v0 + 1 + k) % 3;
      copy_inputs(p, &w->var[v]);
      poison_async(p);
      CUDA(cudaGraphLaunch(ge, st));
      CUDA(cudaStreamSynchronize(st));
      if (!w->ok) continue; /* no trusted reference (reported) */
      download(p);
      const int same = same_bits(w, p->o.host, p->l.host, v);
      if (!same)
        mt_diag("%s replay %d (inputs %d): O against the oracle: %.2e", what, k,
                v, o_error(&p->a, p->o.host, w->var[v].ho));
      CHECK(same, "%s: replay %d with inputs %d, bit for bit the plain call's",
            what, k, v);
    }
  }
  if (ge) CUDA(cudaGraphExecDestroy(ge));
  if (g) CUDA(cudaGraphDestroy(g));
  if (r) CHECK_RC(MKX_Request_free(&r), MKX_SUCCESS, "graph: request free");
}

/* ---- 5. a missing rank ---------------------------------------------------- */

/* A communicator with these MPI_Info keys and values (NULL-terminated
 * pairs); NULL on failure (checked). */
static MKX_Comm comm_with(const char *const *kv) {
  MPI_Info info;
  MKX_Comm c = NULL;
  MPI(MPI_Info_create(&info));
  for (int i = 0; kv[i]; i += 2) MPI(MPI_Info_set(info, kv[i], kv[i + 1]));
  int rc = MKX_Comm_create(MPI_COMM_WORLD, info, &c);
  MPI(MPI_Info_free(&info));
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Comm_create (%s=%s ...)", kv[0], kv[1]);
  return rc == MKX_SUCCESS ? c : NULL;
}

/* Every rank starts the plan: GPU path, right result. */
static int good_start(aprob *p, MKX_Comm c, MKX_Request r, int blocking) {
  poison_outputs(p);
  const long w0 = mkx_path_starts(gpu_path());
  MPI(MPI_Barrier(MPI_COMM_WORLD));
  int rc = MKX_Start(r, st);
  CHECK_RC(rc, MKX_SUCCESS, "%s: start by every rank", p->desc);
  CHECK(mkx_path_starts(gpu_path()) == w0 + 1, "%s: on the %s path", p->desc,
        mkx_path_name(gpu_path()));
  if (blocking) {
    const cudaError_t idle = cudaStreamQuery(st);
    (void)cudaGetLastError(); /* a "not ready" must not reach a launch */
    CHECK(idle == cudaSuccess,
          "%s: a blocking start returns with its run done (%s)", p->desc,
          cudaGetErrorString(idle));
  }
  CUDA(cudaStreamSynchronize(st));
  int async = MKX_SUCCESS;
  CHECK_RC(MKX_Comm_get_async_error(c, &async), MKX_SUCCESS,
           "%s: MKX_Comm_get_async_error", p->desc);
  CHECK_RC(async, MKX_SUCCESS, "%s: no failure of the run", p->desc);
  int ok = rc == MKX_SUCCESS && async == MKX_SUCCESS && p->oracle_ok;
  if (ok) {
    download(p);
    ok = compare(p, p->ho, p->hl, " (every rank's start)");
  }
  return mt_all(ok);
}

/* Every rank but LATE starts: the failure names it, in time; then the
 * communicator is unusable. */
static void missed_start(aprob *p, MKX_Comm c, MKX_Request r, int blocking) {
  const char *name = p->desc;
  const double t0 = mt_now_s();
  int rc = MKX_Start(r, st);
  if (!blocking) {
    CHECK_RC(rc, MKX_SUCCESS,
             "%s: a start that fails on the GPU only "
             "enqueues",
             name);
    CUDA(cudaStreamSynchronize(st)); /* returns: every GPU wait is bounded */
    CHECK_RC(MKX_Comm_get_async_error(c, &rc), MKX_SUCCESS,
             "%s: MKX_Comm_get_async_error", name);
  }
  const double dt = mt_now_s() - t0;
  char msg[512];
  snprintf(msg, sizeof msg, "%s", MKX_Get_last_error());
  char late[16];
  snprintf(late, sizeof late, "rank %d", LATE);
  /* with more than two ranks one may be told by another that gave up */
  const int told = mt.size > 2 && rc == MKX_ERR_PEER;
  CHECK_RC(told ? MKX_ERR_TIMEOUT : rc, MKX_ERR_TIMEOUT,
           "%s: missing rank %d reported by the %s (%s)", name, LATE,
           blocking ? "start" : "asynchronous error query",
           told ? "MKX_ERR_PEER: told by a peer" : "its own timeout");
  /* on nodes of several ranks driven by the GPU, a rank may name the
   * link of the chain next to it (a column peer whose chunk never came) */
  const char *named = by_gpu && nodes < mt.size ? "rank " : late;
  CHECK(strstr(msg, named) != NULL, "%s: the message names %s: %s", name, named,
        msg);
  CHECK(dt < BOUND_S, "%s: reported after %.3f s (< %g s)", name, dt, BOUND_S);
  CHECK(dt >= 0.5e-3 * TIMEOUT_MS,
        "%s: not before the bound (%.3f s, timeout_ms=%d)", name, dt,
        TIMEOUT_MS);
  rc = MKX_Start(r, st);
  CHECK_RC(rc, MKX_ERR_INVALID_COMM, "%s: communicator unusable after it",
           name);
  CUDA(cudaStreamSynchronize(st));
}

static void missing_rank(aprob *p, int blocking) {
  char what[96];
  snprintf(what, sizeof what, "missing rank %d (blocking=%s)", LATE,
           blocking ? "yes" : "no");
  describe(p, what);
  mt_guard(what, GUARD_S);
  const char *const kv[] = {"mkx_timeout_ms",
                            "300",
                            "mkx_fused",
                            "auto",
                            "mkx_blocking",
                            blocking ? "yes" : "no",
                            "mkx_attn_layout",
                            layout_names[p->a.layout],
                            NULL};
  MPI(MPI_Barrier(MPI_COMM_WORLD)); /* start together: the bound is short */
  MKX_Comm c = comm_with(kv);
  MKX_Request r = NULL;
  int ok = mt_all(c != NULL);
  if (ok) {
    int rc = plan_init(p, c, &r);
    CHECK_RC(rc, MKX_SUCCESS, "%s: plan", what);
    ok = mt_all(rc == MKX_SUCCESS);
  }
  if (ok) ok = good_start(p, c, r, blocking);
  MPI(MPI_Barrier(MPI_COMM_WORLD));
  if (ok && mt.rank != LATE) missed_start(p, c, r, blocking);
  MPI(MPI_Barrier(MPI_COMM_WORLD)); /* LATE waits here for the others */
  if (r) CHECK_RC(MKX_Request_free(&r), MKX_SUCCESS, "%s: request free", what);
  if (c) CHECK_RC(MKX_Comm_free(&c), MKX_SUCCESS, "%s: comm free", what);
  mt_guard_off();
}

static void missing_rank_cases(void) {
  if (mt.size < 2) {
    if (mt.rank == 0) printf("# missing rank: needs 2 ranks or more\n");
    return;
  }
  const acase a = {1, 128, 4, 4, 64, 1, 0.0, MKX_BF16, 1, CONTIGUOUS, 4};
  aprob p;
  prob_init(&p, &a, "missing rank");
  prob_fill(&p, 900);
  oracle(&p); /* on comms[CONTIGUOUS]: the fresh ones have the same layout */
  missing_rank(&p, 0);
  missing_rank(&p, 1);
  prob_free(&p);
}

/* ---- main ------------------------------------------------------------------ */

int main(int argc, char **argv) {
  mt_init(&argc, &argv);
  int skip = mt_gpu_count() == 0;
  MPI(MPI_Allreduce(MPI_IN_PLACE, &skip, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  if (skip) {
    if (mt.rank == 0) printf("1..0 # SKIP %s: no GPU\n", mt.prog);
    MPI(MPI_Finalize());
    return CHECK_SKIP;
  }
  for (int l = 0; l < NLAYOUTS; l++) {
    /* fused=auto: whatever MKX_FUSED says */
    const char *const kv[] = {"mkx_attn_layout", layout_names[l], "mkx_fused",
                              "auto", NULL};
    comms[l] = comm_with(kv);
    if (!mt_all(comms[l] != NULL)) MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int dev = -1, major = 0;
  nodes = comms[0]->place.num_nodes;
  by_gpu = comms[0]->opt.hier_attn == MKX_HIER_ATTN_PROXY ||
           (comms[0]->opt.hier_attn == MKX_HIER_ATTN_AUTO &&
            (comms[0]->place.local_size == 1 || region_in_host(comms[0])));
  CHECK_RC(MKX_Comm_device(comms[0], &dev), MKX_SUCCESS, "MKX_Comm_device");
  if (!mt_all(CHECK(dev >= 0, "the communicator has a GPU (device %d)", dev)))
    MPI_Abort(MPI_COMM_WORLD, 1);
  CUDA(cudaSetDevice(dev));
  CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  skip = major != 9;
  MPI(MPI_Allreduce(MPI_IN_PLACE, &skip, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  if (skip) {
    if (mt.rank == 0)
      printf("1..0 # SKIP %s: the attention engine needs sm_90\n", mt.prog);
    for (int l = 0; l < NLAYOUTS; l++)
      CHECK_RC(MKX_Comm_free(&comms[l]), MKX_SUCCESS, "MKX_Comm_free");
    MPI(MPI_Finalize());
    return CHECK_SKIP;
  }
  mt.device = 1; /* tbufs get device copies */
  CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const double t0 = MPI_Wtime();
  random_cases();
  ineligible();
  back_to_back();
  variants w;
  variants_init(&w);
  persistent(&w);
  /* several nodes, the exchange between nodes by the host: host work (not
   * capturable), and a missing rank stops it on the host (tests/mpi/
   * test_hier's ground) */
  const int gpu_only = nodes == 1 || by_gpu;
  if (gpu_only) graph(&w, 0);
  if (nodes == 1) graph(&w, 1);
  variants_free(&w);
  if (gpu_only) missing_rank_cases();
  if (!gpu_only && mt.rank == 0)
    printf("# %d nodes, hier_attn=host: no graph capture, no missing rank\n",
           nodes);
  if (mt.rank == 0) printf("# %d rank(s), %.1f s\n", mt.size, MPI_Wtime() - t0);
  CUDA(cudaStreamDestroy(st));
  for (int l = 0; l < NLAYOUTS; l++)
    CHECK_RC(MKX_Comm_free(&comms[l]), MKX_SUCCESS, "MKX_Comm_free (%s)",
             layout_names[l]);
  return mt_finish();
}
