/*
 * test_attention.c - MKX_Ring_attention against a naive double reference
 * (softmax with max subtraction) over the whole sequence, computed on every
 * rank from regenerated inputs (public API only).
 *
 *   mpirun -np P ./test_attention [--seed N] [--device] [-v]
 *
 * GQA mapping assumed (the usual one, as FlashAttention/PyTorch): query head
 * h uses key/value head h / (heads_q / heads_kv).  Every case runs in each
 * sequence layout (option attn_layout, as mkx.h describes it): the
 * reference places each rank's shard at the positions the layout gives.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkx_test.h"

enum { T_Q = 1, T_K = 2, T_V = 3 };
#define GUARD 29

typedef struct {
  int64_t batch, S, hq, hkv, d;
  int causal;
  double scale; /* as passed */
  MKX_Datatype dt;
  int with_lse;
} acase;

static const acase fixed[] = {
    /* batch S  hq hkv d  causal scale dtype      lse */
    {1, 1, 1, 1, 8, 0, 0.0, MKX_FP32, 1},
    {1, 3, 2, 1, 16, 1, 0.0, MKX_BF16, 1},
    {2, 7, 4, 1, 32, 1, -1.0, MKX_FP16, 0},
    {3, 5, 4, 2, 64, 0, 0.5, MKX_FP64, 1},
    {2, 16, 2, 2, 24, 1, 1.0, MKX_FP32, 0},
    {1, 7, 8, 2, 40, 1, 0.0, MKX_FP64, 1},
    {2, 3, 3, 3, 8, 0, 2.0, MKX_BF16, 0},
    {1, 1, 4, 4, 64, 1, 0.0, MKX_FP16, 1},
    {2, 1, 2, 1, 16, 1, 0.0, MKX_FP64, 0},
    {1, 12, 1, 1, 33, 0, 0.0, MKX_FP16, 1},
};
#define NFIXED ((int)(sizeof fixed / sizeof fixed[0]))
#define NRANDOM 8

enum { CONTIGUOUS, ZIGZAG, STRIPED, NLAYOUTS };
static const char *const layout_names[NLAYOUTS] = {"contiguous", "zigzag",
                                                   "striped"};
static int layout;

/* Sequence position of rank q's local position s (S per rank). */
static int64_t seq_pos(int q, int64_t S, int64_t s) {
  const int64_t p = mt.size, half = S / 2;
  if (layout == STRIPED) return s * p + q;
  if (layout == ZIGZAG)
    return s < half ? q * half + s : (2 * p - 1 - q) * half + s - half;
  return q * S + s;
}

static void run_case(MKX_Comm comm, int c, const acase *A) {
  int p = mt.size, r = mt.rank;
  int64_t B = A->batch, S = A->S, Hq = A->hq, Hkv = A->hkv, d = A->d;
  int64_t N = S * p, grp = Hq / Hkv;
  double scale = A->scale > 0 ? A->scale : 1.0 / sqrt((double)d);
  MKX_Datatype dt = A->dt;
  char desc[400];
  snprintf(desc, sizeof desc,
           "ring_attention case %d: batch=%lld seq_local=%lld (seq=%lld) "
           "heads_q=%lld heads_kv=%lld head_dim=%lld causal=%d scale=%g "
           "dtype=%s LSE=%s layout=%s",
           c, (long long)B, (long long)S, (long long)N, (long long)Hq,
           (long long)Hkv, (long long)d, A->causal, A->scale, mt_type_name(dt),
           A->with_lse ? "yes" : "NULL", layout_names[layout]);

  /* K, V of every rank: global dense [b][N][hkv][d] */
  size_t kv_rank = (size_t)(B * S * Hkv * d);
  double *K = malloc((size_t)p * kv_rank * sizeof(double));
  double *V = malloc((size_t)p * kv_rank * sizeof(double));
  double *myK = NULL, *myV = NULL;
  for (int q = 0; q < p; q++) {
    double *Kq = mt_gen(B * S * Hkv, d, dt, mt.seed, q, c * 16 + T_K);
    double *Vq = mt_gen(B * S * Hkv, d, dt, mt.seed, q, c * 16 + T_V);
    for (int64_t b = 0; b < B; b++)
      for (int64_t s = 0; s < S; s++) {
        size_t src = (size_t)(((b * S + s) * Hkv) * d);
        size_t dst = (size_t)(((b * N + seq_pos(q, S, s)) * Hkv) * d);
        memcpy(K + dst, Kq + src, (size_t)(Hkv * d) * sizeof(double));
        memcpy(V + dst, Vq + src, (size_t)(Hkv * d) * sizeof(double));
      }
    if (q == r) {
      myK = Kq;
      myV = Vq;
    } else {
      free(Kq);
      free(Vq);
    }
  }
  double *Q = mt_gen(B * S * Hq, d, dt, mt.seed, r, c * 16 + T_Q);

  /* reference */
  size_t no = (size_t)(B * S * Hq * d), nl = (size_t)(B * Hq * S);
  double *refO = calloc(no, sizeof(double)), *refL = calloc(nl, sizeof(double));
  double *w = malloc((size_t)N * sizeof(double));
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < Hq; h++) {
      int64_t hk = h / grp;
      for (int64_t i = 0; i < S; i++) {
        int64_t gi = seq_pos(r, S, i);
        const double *q = Q + ((b * S + i) * Hq + h) * d;
        double mx = -INFINITY;
        int64_t nk = A->causal ? gi + 1 : N;
        for (int64_t j = 0; j < nk; j++) {
          const double *k = K + ((b * N + j) * Hkv + hk) * d;
          double s = 0;
          for (int64_t x = 0; x < d; x++) s += q[x] * k[x];
          w[j] = s * scale;
          if (w[j] > mx) mx = w[j];
        }
        double sum = 0;
        for (int64_t j = 0; j < nk; j++) {
          w[j] = exp(w[j] - mx);
          sum += w[j];
        }
        double *o = refO + ((b * S + i) * Hq + h) * d;
        for (int64_t j = 0; j < nk; j++) {
          const double *v = V + ((b * N + j) * Hkv + hk) * d;
          for (int64_t x = 0; x < d; x++) o[x] += w[j] / sum * v[x];
        }
        refL[(b * Hq + h) * S + i] = mx + log(sum);
      }
    }

  size_t es = mt_type_size(dt);
  tbuf tq, tk, tv, to, tl;
  tbuf_alloc(&tq, no * es);
  tbuf_alloc(&tk, kv_rank * es);
  tbuf_alloc(&tv, kv_rank * es);
  tbuf_alloc(&to, (no + GUARD) * es);
  tbuf_alloc(&tl, (nl + GUARD) * sizeof(float));
  for (size_t i = 0; i < no; i++) mt_set(tq.host, dt, i, Q[i]);
  for (size_t i = 0; i < kv_rank; i++) {
    mt_set(tk.host, dt, i, myK[i]);
    mt_set(tv.host, dt, i, myV[i]);
  }
  tbuf_upload(&tq);
  tbuf_upload(&tk);
  tbuf_upload(&tv);

  int rc = MKX_Ring_attention(tbuf_ptr(&tq), tbuf_ptr(&tk), tbuf_ptr(&tv),
                              tbuf_ptr(&to),
                              A->with_lse ? (float *)tbuf_ptr(&tl) : NULL, B, S,
                              Hq, Hkv, d, A->causal, A->scale, dt, comm, NULL);
  CHECK_RC(rc, MKX_SUCCESS, "%s: returns MKX_SUCCESS", desc);
  if (mt_all(rc == MKX_SUCCESS)) {
    tbuf_download(&to);
    tbuf_download(&tl);
    size_t oob, unw;
    mt_check_bounds(to.host, dt, MKX_ROW_MAJOR, 1, (int64_t)no,
                    (int64_t)(no + GUARD), no + GUARD, &oob, &unw);
    CHECK(oob == 0 && unw == 0,
          "%s: O fully written, nothing past it (%zu unwritten, %zu oob)", desc,
          unw, oob);
    double *out = malloc(no * sizeof(double));
    for (size_t i = 0; i < no; i++) out[i] = mt_get(to.host, dt, i);
    double tol = 2 * mt_tol(dt, dt);
    double e = mt_relerr(out, refO, no);
    CHECK(e <= tol, "%s: O rel err %.3g <= %.3g", desc, e, tol);
    free(out);
    if (A->with_lse) {
      const float *L = tl.host;
      double tl_ = dt == MKX_FP64 ? 1e-6 : 2e-5, worst = 0;
      size_t bad = 0, worst_i = 0;
      for (size_t i = 0; i < nl; i++) {
        double err = fabs((double)L[i] - refL[i]) / (1 + fabs(refL[i]));
        if (!(err <= tl_)) bad++;
        if (!(err <= worst)) {
          worst = err;
          worst_i = i;
        }
      }
      CHECK(bad == 0, "%s: LSE within %.1g (worst %.3g at %zu: %g vs %g)", desc,
            tl_, worst, worst_i, (double)L[worst_i], refL[worst_i]);
      size_t past = 0;
      for (size_t i = nl; i < nl + GUARD; i++)
        past += !mt_is_poison(tl.host, MKX_FP32, i);
      CHECK(past == 0, "%s: nothing written past LSE", desc);
    } else {
      size_t touched = 0;
      for (size_t i = 0; i < nl + GUARD; i++)
        touched += !mt_is_poison(tl.host, MKX_FP32, i);
      CHECK(touched == 0, "%s: LSE NULL, spare buffer untouched", desc);
    }
  }
  tbuf_free(&tq);
  tbuf_free(&tk);
  tbuf_free(&tv);
  tbuf_free(&to);
  tbuf_free(&tl);
  free(K);
  free(V);
  free(myK);
  free(myV);
  free(Q);
  free(refO);
  free(refL);
  free(w);
}

/* A communicator with option attn_layout set to the current layout. */
static MKX_Comm layout_comm(void) {
  MPI_Info info;
  MKX_Comm comm = NULL;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mkx_attn_layout", layout_names[layout]);
  int rc = MKX_Comm_create(MPI_COMM_WORLD, info, &comm);
  MPI_Info_free(&info);
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Comm_create (attn_layout=%s)",
           layout_names[layout]);
  return mt_all(rc == MKX_SUCCESS) ? comm : NULL;
}

static void random_case(int i, acase *a) {
  static const MKX_Datatype types[4] = {MKX_BF16, MKX_FP16, MKX_FP32, MKX_FP64};
  static const int64_t seqs[] = {1, 2, 3, 5, 7, 8, 13};
  static const int64_t dims[] = {8, 16, 17, 32, 48, 64};
  mt_rng g;
  mt_rng_init(&g, mt.seed, -1, 5000 + i);
  a->batch = mt_rng_int(&g, 1, 3);
  a->S = seqs[mt_rng_int(&g, 0, 6)];
  a->hkv = mt_rng_int(&g, 1, 3);
  a->hq = a->hkv * (int64_t[]){1, 2, 4}[mt_rng_int(&g, 0, 2)];
  a->d = dims[mt_rng_int(&g, 0, 5)];
  a->causal = (int)mt_rng_int(&g, 0, 1);
  a->scale = mt_rng_int(&g, 0, 1) ? 0.0 : 0.1 + 1.5 * mt_rng_unit(&g);
  a->dt = types[i % 4];
  a->with_lse = (int)mt_rng_int(&g, 0, 1);
}

/* zigzag splits each shard in halves: an odd seq_local is refused on every
 * rank, naming the option */
static void zigzag_odd(MKX_Comm comm) {
  float q[2 * 8] = {0}, o[2 * 8];
  int rc = MKX_Ring_attention(q, q, q, o, NULL, 1, 1, 1, 1, 8, 1, 0, MKX_FP32,
                              comm, NULL);
  if (CHECK_RC(rc, MKX_ERR_BAD_SIZE, "zigzag with seq_local = 1"))
    CHECK(strstr(MKX_Get_last_error(), "attn_layout=zigzag") != NULL,
          "the message names the option: %s", MKX_Get_last_error());
}

/* A persistent plan (MKX_Ring_attention_init) started with changing
 * inputs in its bound buffers gives, bit for bit, what the plain call
 * gives on the same inputs. */
static void plan_case(MKX_Comm comm) {
  enum {
    B = 1,
    S = 4,
    HQ = 2,
    HKV = 1,
    D = 8,
    NQ = B * S * HQ * D,
    NKV = B * S * HKV * D
  };
  float q[NQ] = {0}, k[NKV] = {0}, v[NKV] = {0}, o[NQ], o_ref[NQ];
  MKX_Request req = NULL;
  int rc = MKX_Ring_attention_init(q, k, v, o, NULL, B, S, HQ, HKV, D, 1, 0,
                                   MKX_FP32, comm, MPI_INFO_NULL, &req);
  if (!CHECK_RC(rc, MKX_SUCCESS, "MKX_Ring_attention_init")) return;
  for (int it = 0; it < 3; it++) {
    for (int i = 0; i < NQ; i++)
      q[i] = (float)((i * 7 + it * 3 + mt.rank) % 11) / 8;
    for (int i = 0; i < NKV; i++) {
      k[i] = (float)((i * 5 + it + 2 * mt.rank) % 13) / 8;
      v[i] = (float)((i * 3 + 2 * it + mt.rank) % 7) / 4;
    }
    memset(o_ref, 0xff, sizeof o_ref);
    rc = MKX_Ring_attention(q, k, v, o_ref, NULL, B, S, HQ, HKV, D, 1, 0,
                            MKX_FP32, comm, NULL);
    CHECK_RC(rc, MKX_SUCCESS, "plain call, inputs %d", it);
    memset(o, 0xff, sizeof o);
    rc = MKX_Start(req, NULL);
    CHECK_RC(rc, MKX_SUCCESS, "MKX_Start, inputs %d", it);
    CHECK(memcmp(o, o_ref, sizeof o) == 0,
          "plan's O equals the plain call's, inputs %d", it);
  }
  CHECK_RC(MKX_Request_free(&req), MKX_SUCCESS, "MKX_Request_free");
}

int main(int argc, char **argv) {
  mt_init(&argc, &argv);
  double t0 = MPI_Wtime();
  int c = 0;
  for (layout = 0; layout < NLAYOUTS; layout++) {
    MKX_Comm comm = layout_comm();
    if (!comm) break;
    for (int i = 0; i < NFIXED; i++)
      if (layout != ZIGZAG || fixed[i].S % 2 == 0)
        run_case(comm, c++, &fixed[i]);
    /* the random shapes in every layout (zigzag: seq_local made even) */
    for (int i = 0; i < NRANDOM; i++) {
      acase a;
      random_case(i, &a);
      if (layout == ZIGZAG) a.S += a.S % 2;
      run_case(comm, c++, &a);
    }
    if (layout == ZIGZAG) zigzag_odd(comm);
    plan_case(comm);
    CHECK_RC(MKX_Comm_free(&comm), MKX_SUCCESS, "MKX_Comm_free");
  }
  if (mt.rank == 0) mt_diag("%d cases in %.2f s", c, MPI_Wtime() - t0);
  return mt_finish();
}
