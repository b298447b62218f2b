/* Expert-parallel MoE on the host.  Each (token, slot) row travels to the
 * rank owning its expert with its scales (fp8: the token's record of
 * MKX_Scales, host/scales.h), origin and gate weight appended, in the
 * user's dtype; counts go first so receivers can size, group and check
 * capacity.  Local failures and bad expert ids are agreed on before any
 * data moves, so no rank is left waiting. */
#include <limits.h>
#include <math.h>
#include <string.h>
#include "boot/oob_mpi.h"
#include "core/error.h"
#include "host/blas.h"
#include "host/dtype.h"
#include "host/host_ops.h"
#include "host/scales.h"
#include "host/xfer.h"

enum { META_SRC, META_TOKEN, META_SLOT, META_EXPERT, META_WEIGHT, META_N };
#define META_BYTES (META_N * sizeof(int32_t))

typedef struct moe_ctx {
  MKX_Comm c;
  const mkx_moe_args *a;
  mkx_arena ar;
  int p;
  int64_t Ep, nsend, nrecv, maxrows;
  size_t pay, row;        /* payload bytes (hidden * es); whole row */
  int64_t kb;             /* floats of a row's scale record (0: none) */
  size_t meta;            /* offset of a row's meta: payload + record */
  float *recs;            /* [num_tokens][kb] this rank's tokens' records */
  int64_t *scnt, *rcnt;   /* [p][Ep] rows to / from each (rank, expert) */
  int64_t *srows, *rrows; /* [p] rows to / from each rank */
  int64_t *eoff;          /* [Ep + 1] first grouped row of each expert */
  int64_t *spos;          /* [nsend] send position of (token, slot) */
  int64_t *order;         /* [nrecv] arrival index of each grouped row */
  char *sbuf, *rbuf;      /* rows + meta, in send / arrival order */
} moe_ctx;

/* ---- send side ----------------------------------------------------------- */

/* The first expert id outside [0, E), or repeating an earlier slot of
 * its token (the contract wants distinct experts), as a status. */
static void moe_check_ids(const moe_ctx *m, mkx_host_status *st) {
  const mkx_moe_args *a = m->a;
  for (int64_t i = 0; i < m->nsend; i++) {
    int32_t e = a->topk_ids[i];
    int bad = e < 0 || e >= a->num_experts;
    for (int64_t j = i - i % a->topk; !bad && j < i; j++)
      bad = a->topk_ids[j] == e;
    if (bad) {
      *st =
          (mkx_host_status){MKX_ERR_INVALID_ARG, {i / a->topk, i % a->topk, e}};
      return;
    }
  }
}

/* The counts per (rank, local expert) grow with num_experts alone, which
 * no buffer of the call's bounds (the weights' size is not known here). */
static int moe_alloc_send(moe_ctx *m) {
  int p = m->p;
  mkx_arena *ar = &m->ar;
  size_t counts;
  MKX_TRY(mkx_host_bytes(2 * (int64_t)p + 1, m->Ep, sizeof(int64_t), &counts,
                         "MoE counts"));
  MKX_TRY(mkx_host_fits(m->c, counts, "MoE counts (num_experts)"));
  MKX_TRY(mkx_arena_array(ar, p, m->Ep, sizeof(int64_t), (void **)&m->scnt,
                          "MoE counts"));
  MKX_TRY(mkx_arena_array(ar, p, m->Ep, sizeof(int64_t), (void **)&m->rcnt,
                          "MoE counts"));
  MKX_TRY(mkx_arena_array(ar, p, 2, sizeof(int64_t), (void **)&m->srows,
                          "MoE counts"));
  m->rrows = m->srows + p;
  MKX_TRY(mkx_arena_array(ar, m->Ep + 1, 1, sizeof(int64_t), (void **)&m->eoff,
                          "MoE offsets"));
  MKX_TRY(mkx_arena_array(ar, m->nsend, 1, sizeof(int64_t), (void **)&m->spos,
                          "MoE send order"));
  if (m->kb)
    MKX_TRY(mkx_arena_array(ar, m->a->num_tokens, m->kb, sizeof(float),
                            (void **)&m->recs, "MoE token scales"));
  return mkx_arena_array(ar, m->nsend, 1, m->row, (void **)&m->sbuf,
                         "MoE send rows");
}

/* Send order: by destination rank, then (token, slot), so each receiver
 * gets its rows already in (source rank, token, slot) order. */
static void moe_plan_send(moe_ctx *m) {
  const mkx_moe_args *a = m->a;
  int64_t off = 0;
  memset(m->scnt, 0, (size_t)m->p * (size_t)m->Ep * sizeof *m->scnt);
  memset(m->srows, 0, (size_t)m->p * sizeof *m->srows);
  for (int64_t i = 0; i < m->nsend; i++) {
    int32_t e = a->topk_ids[i];
    m->scnt[e]++; /* [rank][local expert] flattens to the global id */
    m->srows[e / m->Ep]++;
  }
  /* spos holds each destination's running position, then the row's. */
  for (int q = 0; q < m->p; q++) {
    int64_t n = m->srows[q];
    m->rrows[q] = off; /* borrowed as the cursor until the counts arrive */
    off += n;
  }
  for (int64_t i = 0; i < m->nsend; i++)
    m->spos[i] = m->rrows[a->topk_ids[i] / m->Ep]++;
}

static void moe_fill_send(const moe_ctx *m) {
  const mkx_moe_args *a = m->a;
  for (int64_t i = 0; i < m->nsend; i++) {
    int64_t t = i / a->topk;
    float w = a->topk_weight ? a->topk_weight[i] : 1.0f;
    int32_t meta[META_N] = {m->c->rank, (int32_t)t, (int32_t)(i % a->topk),
                            a->topk_ids[i], 0};
    char *dst = m->sbuf + (size_t)m->spos[i] * m->row;
    memcpy(&meta[META_WEIGHT], &w, sizeof w);
    memcpy(dst, (const char *)a->X + (size_t)t * m->pay, m->pay);
    if (m->kb)
      memcpy(dst + m->pay, m->recs + t * m->kb, (size_t)m->kb * sizeof(float));
    memcpy(dst + m->meta, meta, META_BYTES);
  }
}

/* ---- agreement ---- */

/* Agree on every rank's status.  Bad expert ids and truncation are the
 * call's outcome on every rank; other failures are this rank's own or a
 * peer's. */
static int moe_agree(const moe_ctx *m, const mkx_host_status *mine,
                     const char *what) {
  mkx_host_status bad;
  int bad_rank;
  int rc = mkx_host_agree(m->c, mine, &bad_rank, &bad, what);
  if (rc || bad_rank < 0) return rc;
  if (bad.rc == MKX_ERR_INVALID_ARG && bad.d[0] >= 0) /* an expert id */
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "%s: topk_ids[%lld][%lld] = %lld on rank %d %s", what,
                     (long long)bad.d[0], (long long)bad.d[1],
                     (long long)bad.d[2], bad_rank,
                     bad.d[2] >= 0 && bad.d[2] < m->a->num_experts
                         ? "repeats an expert of the same token"
                         : "is outside [0, num_experts)");
  if (bad.rc == MKX_ERR_TRUNCATE)
    return mkx_error(MKX_ERR_TRUNCATE,
                     "%s: rank %d receives %lld rows but y_rows = %lld "
                     "(expert_rows holds the counts needed)",
                     what, bad_rank, (long long)bad.d[0], (long long)bad.d[1]);
  if (mine->rc) return (int)mine->rc; /* its message is already recorded */
  return mkx_error(MKX_ERR_PEER, "%s: rank %d failed (%s)", what, bad_rank,
                   MKX_Error_string((int)bad.rc));
}

/* ---- exchange ---- */

/* How the call stores each expert's rows x cols weight (and its block
 * scales): a matrix stored transposed, cols x rows row-major, is that
 * matrix in column-major order, so one reading serves both layouts. */
static MKX_Order weight_order(const mkx_moe_args *a) {
  return a->transw == MKX_TRANS ? MKX_COL_MAJOR : MKX_ROW_MAJOR;
}

/* Local expert e's share of sc's weight scales (its rows x cols weight),
 * applied to the dense row-major working copy W. */
static void scale_weight(const mkx_moe_args *a, const MKX_Scales *sc, int64_t e,
                         int64_t rows, int64_t cols, float *W) {
  if (sc->layout == MKX_SCALE_NONE) return;
  MKX_Scales s = *sc;
  s.b += e * mkx_scales_b_count(s.layout, rows, cols);
  mkx_scales_apply_b(&s, 0, rows, cols, weight_order(a), W);
}

/* Every scale this rank's call reads is finite and > 0: X's, and the
 * weights' (W, or W1 and W2 for the layer: W2 set). */
static int moe_check_scales(const moe_ctx *m, const char *what) {
  const mkx_moe_args *a = m->a;
  const MKX_Scale_layout l = a->sc.layout, l2 = a->sc2.layout;
  const int64_t n = a->W2 ? 2 * a->ffn : a->n;
  if (l != MKX_SCALE_NONE) {
    MKX_TRY(mkx_scales_check_values(
        what, "scales->a", a->sc.a,
        mkx_scales_a_count(l, a->num_tokens, a->hidden)));
    MKX_TRY(
        mkx_scales_check_values(what, "scales->b", a->sc.b,
                                m->Ep * mkx_scales_b_count(l, a->hidden, n)));
  }
  if (!a->W2 || l2 == MKX_SCALE_NONE) return MKX_SUCCESS;
  return mkx_scales_check_values(
      what, "scales2->b", a->sc2.b,
      m->Ep * mkx_scales_b_count(l2, a->ffn, a->hidden));
}

static int moe_setup(moe_ctx *m, MKX_Comm c, const mkx_moe_args *a,
                     const char *what) {
  mkx_host_status st = {MKX_SUCCESS, {0, 0, 0}};
  memset(m, 0, sizeof *m);
  m->c = c;
  m->a = a;
  m->p = c->size;
  m->Ep = a->num_experts / c->size;
  m->nsend = a->num_tokens * a->topk;
  m->pay = (size_t)a->hidden * MKX_Type_size(a->dtype);
  m->kb = mkx_scales_row_floats(a->sc.layout, a->hidden);
  m->meta = m->pay + (size_t)m->kb * sizeof(float);
  m->row = m->meta + META_BYTES;
  /* Sizes agree across ranks, so this stops every rank alike. */
  if (m->Ep > INT_MAX || a->topk > INT_MAX)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: num_experts / size or topk exceed an int", what);
  /* before the ids are read: num_tokens * topk of them */
  if (a->num_tokens > INT_MAX) /* meta carries tokens as int32 */
    st.rc =
        mkx_error(MKX_ERR_UNSUPPORTED, "%s: num_tokens = %lld exceeds an int",
                  what, (long long)a->num_tokens);
  if (!st.rc && moe_check_scales(m, what)) /* this rank's own failure */
    st = (mkx_host_status){MKX_ERR_INVALID_ARG, {-1, -1, -1}};
  if (!st.rc) moe_check_ids(m, &st);
  if (!st.rc) st.rc = moe_alloc_send(m);
  if (!st.rc && m->kb)
    mkx_scales_a_rows(&a->sc, a->num_tokens, a->hidden, MKX_ROW_MAJOR, m->recs);
  if (!st.rc) {
    moe_plan_send(m);
    st.rc = mkx_xfer_fit(m->p, m->srows, m->row, what);
  }
  int rc = moe_agree(m, &st, what);
  if (!rc) moe_fill_send(m);
  return rc;
}

/* Counts per (rank, local expert) first: receivers learn their row total
 * and each expert's share before any row moves. */
static int moe_counts(moe_ctx *m, const char *what) {
  MPI_Request req;
  int rc =
      mkx_mpi_check(MPI_Ialltoall(m->scnt, (int)m->Ep, MPI_INT64_T, m->rcnt,
                                  (int)m->Ep, MPI_INT64_T, m->c->mpi, &req),
                    what);
  if (!rc) rc = mkx_mpi_wait(&req, m->c->opt.timeout_ms, what);
  if (rc) return rc;
  m->nrecv = m->maxrows = 0;
  m->eoff[0] = 0;
  for (int64_t e = 0; e < m->Ep; e++) {
    int64_t n = 0;
    for (int q = 0; q < m->p; q++) n += m->rcnt[(int64_t)q * m->Ep + e];
    m->eoff[e + 1] = m->eoff[e] + n;
    if (n > m->maxrows) m->maxrows = n;
  }
  for (int q = 0; q < m->p; q++) {
    m->rrows[q] = 0;
    for (int64_t e = 0; e < m->Ep; e++)
      m->rrows[q] += m->rcnt[(int64_t)q * m->Ep + e];
    m->nrecv += m->rrows[q];
  }
  return MKX_SUCCESS;
}

static int moe_alloc_recv(moe_ctx *m, const char *what) {
  MKX_TRY(mkx_xfer_fit(m->p, m->rrows, m->row, what));
  MKX_TRY(mkx_arena_array(&m->ar, m->nrecv, 1, m->row, (void **)&m->rbuf,
                          "MoE received rows"));
  return mkx_arena_array(&m->ar, m->nrecv, 1, sizeof(int64_t),
                         (void **)&m->order, "MoE row order");
}

static const int32_t *meta_of(const moe_ctx *m, int64_t i, int32_t *meta) {
  memcpy(meta, m->rbuf + (size_t)i * m->row + m->meta, META_BYTES);
  return meta;
}

/* Rows, then grouping by local expert: arrivals are in (source rank,
 * token, slot) order, so a stable bucket keeps that order per expert. */
static int moe_exchange(moe_ctx *m, const char *what) {
  mkx_xfer x;
  int rc = mkx_xfer_ialltoallv(m->c, m->sbuf, m->srows, m->rbuf, m->rrows,
                               m->row, &x, what);
  if (!rc) rc = mkx_xfer_wait(m->c, &x, what);
  if (rc) return rc;
  int64_t first = (int64_t)m->c->rank * m->Ep;
  for (int64_t e = 0; e < m->Ep; e++) m->scnt[e] = m->eoff[e]; /* cursors */
  for (int64_t i = 0; i < m->nrecv; i++) {
    int32_t meta[META_N];
    int64_t e = meta_of(m, i, meta)[META_EXPERT] - first;
    m->order[m->scnt[e]++] = i;
  }
  return MKX_SUCCESS;
}

/* Rows of expert e, in grouped order, as a dense working matrix, each
 * times its scale record (rec: room for one). */
static void moe_gather_rows(const moe_ctx *m, int64_t e, MKX_Datatype wt,
                            void *Xe, float *rec) {
  size_t rw = (size_t)m->a->hidden * MKX_Type_size(wt);
  for (int64_t k = m->eoff[e]; k < m->eoff[e + 1]; k++) {
    const char *row = m->rbuf + (size_t)m->order[k] * m->row;
    char *dst = (char *)Xe + (size_t)(k - m->eoff[e]) * rw;
    mkx_convert(m->a->dtype, row, 1, wt, dst, 1, (size_t)m->a->hidden);
    if (!m->kb) continue;
    /* the record follows a payload of any length: copied out aligned */
    memcpy(rec, row + m->pay, (size_t)m->kb * sizeof(float));
    mkx_scales_apply_a((float *)dst, 1, m->a->hidden, rec, m->kb);
  }
}

/* Expert e's rows x cols weight matrix, dense row-major, from a [Ep]
 * array of them (each stored [rows][cols], or [cols][rows] under
 * MKX_TRANS): the same working copy either way, so the products match bit
 * for bit. */
static void moe_weight(const moe_ctx *m, const void *W, int64_t e, int64_t rows,
                       int64_t cols, MKX_Datatype wt, void *dst) {
  const size_t n = (size_t)rows * (size_t)cols;
  const char *src =
      (const char *)W + (size_t)e * n * MKX_Type_size(m->a->dtype);
  if (weight_order(m->a) == MKX_COL_MAJOR)
    mkx_mat_pack(m->a->dtype, src, rows, cols, rows, MKX_COL_MAJOR, wt, dst);
  else
    mkx_convert(m->a->dtype, src, 1, wt, dst, 1, n);
}

/* ---- MKX_Moe_dispatch_gemm ---- */

static void scale_row(MKX_Datatype wt, void *y, int64_t n, float w) {
  if (wt == MKX_FP64)
    for (int64_t d = 0; d < n; d++) ((double *)y)[d] *= w;
  else
    for (int64_t d = 0; d < n; d++) ((float *)y)[d] *= w;
}

/* Working buffers of one expert of the dispatch. */
typedef struct dispatch_bufs {
  void *Xe, *We, *Ye;
  float *rec; /* one row's scale record */
} dispatch_bufs;

static int dispatch_expert(const moe_ctx *m, int64_t e,
                           const dispatch_bufs *b) {
  const mkx_moe_args *a = m->a;
  MKX_Datatype wt = mkx_work_type(a->dtype);
  size_t ws = MKX_Type_size(wt), ys = MKX_Type_size(a->ytype);
  void *Xe = b->Xe, *We = b->We, *Ye = b->Ye;
  int64_t rows = m->eoff[e + 1] - m->eoff[e];
  if (rows == 0) return MKX_SUCCESS;
  moe_gather_rows(m, e, wt, Xe, b->rec);
  moe_weight(m, a->W, e, a->hidden, a->n, wt, We);
  scale_weight(a, &a->sc, e, a->hidden, a->n, We);
  MKX_TRY(mkx_host_gemm(wt, MKX_NO_TRANS, rows, a->n, a->hidden, Xe, We, Ye));
  for (int64_t k = 0; k < rows; k++) {
    int32_t meta[META_N];
    int64_t g = m->eoff[e] + k;
    float w;
    meta_of(m, m->order[g], meta);
    memcpy(&w, &meta[META_WEIGHT], sizeof w);
    scale_row(wt, (char *)Ye + (size_t)k * (size_t)a->n * ws, a->n, w);
    if (a->origin)
      for (int j = 0; j < 3; j++) a->origin[3 * g + j] = meta[META_SRC + j];
  }
  mkx_convert(wt, Ye, 1, a->ytype,
              (char *)a->Y + (size_t)m->eoff[e] * (size_t)a->n * ys, 1,
              (size_t)rows * (size_t)a->n);
  return MKX_SUCCESS;
}

int mkx_host_moe_dispatch_gemm(MKX_Comm c, const mkx_moe_args *a,
                               const mkx_agreed *g) {
  const char *what = "MoE dispatch+GEMM";
  MKX_Datatype wt = mkx_work_type(a->dtype);
  size_t ws = MKX_Type_size(wt);
  dispatch_bufs b = {NULL, NULL, NULL, NULL};
  moe_ctx m;
  (void)g;
  int rc = moe_setup(&m, c, a, what);
  if (!rc) rc = moe_counts(&m, what);
  if (!rc) {
    mkx_host_status st = {MKX_SUCCESS, {m.nrecv, a->y_rows, 0}};
    for (int64_t e = 0; e < m.Ep; e++)
      a->expert_rows[e] = m.eoff[e + 1] - m.eoff[e];
    if (m.nrecv > a->y_rows) st.rc = MKX_ERR_TRUNCATE;
    if (!st.rc) st.rc = moe_alloc_recv(&m, what);
    if (!st.rc)
      st.rc =
          mkx_arena_array(&m.ar, m.maxrows, a->hidden, ws, &b.Xe, "MoE rows");
    if (!st.rc)
      st.rc = mkx_arena_array(&m.ar, a->hidden, a->n, ws, &b.We, "MoE weight");
    if (!st.rc)
      st.rc =
          mkx_arena_array(&m.ar, m.maxrows, a->n, ws, &b.Ye, "MoE products");
    if (!st.rc && m.kb)
      st.rc = mkx_arena_array(&m.ar, m.kb, 1, sizeof(float), (void **)&b.rec,
                              "MoE scale record");
    rc = moe_agree(&m, &st, what);
  }
  if (!rc) rc = moe_exchange(&m, what);
  for (int64_t e = 0; !rc && e < m.Ep; e++) rc = dispatch_expert(&m, e, &b);
  mkx_arena_release(&m.ar, rc);
  return rc;
}

/* ---- MKX_Moe_layer ---- */

typedef struct layer_bufs {
  void *Xe, *W1, *H, *act, *W2, *Ye; /* one expert at a time, working */
  float *rec;                        /* one row's scale record */
  void *back, *ret; /* FFN rows in arrival order, and as they come home */
  void *acc;        /* one output row */
} layer_bufs;

static int layer_alloc(moe_ctx *m, layer_bufs *b) {
  const mkx_moe_args *a = m->a;
  size_t ws = MKX_Type_size(mkx_work_type(a->dtype));
  mkx_arena *ar = &m->ar;
  MKX_TRY(mkx_arena_array(ar, m->maxrows, a->hidden, ws, &b->Xe, "MoE rows"));
  MKX_TRY(mkx_arena_array(ar, a->hidden, 2 * a->ffn, ws, &b->W1, "MoE W1"));
  MKX_TRY(mkx_arena_array(ar, m->maxrows, 2 * a->ffn, ws, &b->H, "MoE h"));
  MKX_TRY(mkx_arena_array(ar, m->maxrows, a->ffn, ws, &b->act, "MoE act"));
  MKX_TRY(mkx_arena_array(ar, a->ffn, a->hidden, ws, &b->W2, "MoE W2"));
  MKX_TRY(mkx_arena_array(ar, m->maxrows, a->hidden, ws, &b->Ye, "MoE y"));
  MKX_TRY(mkx_arena_array(ar, 1, a->hidden, ws, &b->acc, "MoE out row"));
  b->rec = NULL;
  if (m->kb)
    MKX_TRY(mkx_arena_array(ar, m->kb, 1, sizeof(float), (void **)&b->rec,
                            "MoE scale record"));
  MKX_TRY(mkx_arena_array(ar, m->nrecv, a->hidden, ws, &b->back, "MoE y out"));
  return mkx_arena_array(ar, m->nsend, a->hidden, ws, &b->ret, "MoE y back");
}

static double silu(double g) { return g / (1.0 + exp(-g)); }

/* act = silu(gate) * up, gate and up being the two halves of each h row. */
static void swiglu(MKX_Datatype wt, const void *H, void *act, int64_t rows,
                   int64_t ffn) {
  for (int64_t k = 0; k < rows; k++)
    for (int64_t j = 0; j < ffn; j++) {
      size_t h = (size_t)(k * 2 * ffn + j), o = (size_t)(k * ffn + j);
      if (wt == MKX_FP64) {
        const double *x = H;
        ((double *)act)[o] = silu(x[h]) * x[h + (size_t)ffn];
      } else {
        const float *x = H;
        ((float *)act)[o] = (float)silu(x[h]) * x[h + (size_t)ffn];
      }
    }
}

static int layer_expert(const moe_ctx *m, int64_t e, const layer_bufs *b) {
  const mkx_moe_args *a = m->a;
  MKX_Datatype wt = mkx_work_type(a->dtype);
  size_t rw = (size_t)a->hidden * MKX_Type_size(wt);
  int64_t rows = m->eoff[e + 1] - m->eoff[e];
  if (rows == 0) return MKX_SUCCESS;
  moe_gather_rows(m, e, wt, b->Xe, b->rec);
  moe_weight(m, a->W, e, a->hidden, 2 * a->ffn, wt, b->W1);
  scale_weight(a, &a->sc, e, a->hidden, 2 * a->ffn, b->W1);
  moe_weight(m, a->W2, e, a->ffn, a->hidden, wt, b->W2);
  scale_weight(a, &a->sc2, e, a->ffn, a->hidden, b->W2);
  MKX_TRY(mkx_host_gemm(wt, MKX_NO_TRANS, rows, 2 * a->ffn, a->hidden, b->Xe,
                        b->W1, b->H));
  swiglu(wt, b->H, b->act, rows, a->ffn);
  MKX_TRY(mkx_host_gemm(wt, MKX_NO_TRANS, rows, a->hidden, a->ffn, b->act,
                        b->W2, b->Ye));
  for (int64_t k = 0; k < rows; k++) /* back to arrival order */
    memcpy((char *)b->back + (size_t)m->order[m->eoff[e] + k] * rw,
           (const char *)b->Ye + (size_t)k * rw, rw);
  return MKX_SUCCESS;
}

/* out[t] = sum over slots, in slot order, of weight x returned row; in
 * working precision, rounded once to out's type. */
static void layer_combine(const moe_ctx *m, const layer_bufs *b) {
  const mkx_moe_args *a = m->a;
  MKX_Datatype wt = mkx_work_type(a->dtype);
  size_t es = MKX_Type_size(a->ytype), hsz = (size_t)a->hidden;
  for (int64_t t = 0; t < a->num_tokens; t++) {
    void *acc = b->acc;
    memset(acc, 0, hsz * MKX_Type_size(wt));
    for (int64_t j = 0; j < a->topk; j++) {
      int64_t i = t * a->topk + j;
      float w = a->topk_weight[i];
      if (wt == MKX_FP64) {
        const double *y = (const double *)b->ret + (size_t)m->spos[i] * hsz;
        for (size_t d = 0; d < hsz; d++) ((double *)acc)[d] += (double)w * y[d];
      } else {
        const float *y = (const float *)b->ret + (size_t)m->spos[i] * hsz;
        for (size_t d = 0; d < hsz; d++) ((float *)acc)[d] += w * y[d];
      }
    }
    mkx_convert(wt, acc, 1, a->ytype, (char *)a->out + (size_t)t * hsz * es, 1,
                hsz);
  }
}

/* FFN rows go home in working precision so that out is rounded once. */
static int layer_return(const moe_ctx *m, const layer_bufs *b,
                        const char *what) {
  mkx_xfer x;
  size_t rw = (size_t)m->a->hidden * MKX_Type_size(mkx_work_type(m->a->dtype));
  int rc = mkx_xfer_ialltoallv(m->c, b->back, m->rrows, b->ret, m->srows, rw,
                               &x, what);
  return rc ? rc : mkx_xfer_wait(m->c, &x, what);
}

int mkx_host_moe_layer(MKX_Comm c, const mkx_moe_args *a, const mkx_agreed *g) {
  const char *what = "MoE layer";
  layer_bufs b;
  moe_ctx m;
  (void)g;
  int rc = moe_setup(&m, c, a, what);
  if (!rc) rc = moe_counts(&m, what);
  if (!rc) {
    mkx_host_status st = {MKX_SUCCESS, {0, 0, 0}};
    st.rc = moe_alloc_recv(&m, what);
    if (!st.rc) st.rc = layer_alloc(&m, &b);
    if (!st.rc) /* the return trip carries wider rows: check it here too */
      st.rc = mkx_xfer_fit(m.p, m.rrows, (size_t)a->hidden * 8, what);
    rc = moe_agree(&m, &st, what);
  }
  if (!rc) rc = moe_exchange(&m, what);
  for (int64_t e = 0; !rc && e < m.Ep; e++) rc = layer_expert(&m, e, &b);
  if (!rc) rc = layer_return(&m, &b, what);
  if (!rc) layer_combine(&m, &b);
  mkx_arena_release(&m.ar, rc);
  return rc;
}
