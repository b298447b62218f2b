/* fp8 operands' scales on the host path; see scales.h. */
#include "host/scales.h"
#include <math.h>
#include "core/error.h"

#define BS MKX_SCALE_BLOCK_SIZE

static int64_t blocks(int64_t x) { return (x + BS - 1) / BS; }

/* Element (r, c) of a dense rows x cols matrix stored in `order`. */
static int64_t at(int64_t r, int64_t c, int64_t rows, int64_t cols,
                  MKX_Order order) {
  return order == MKX_ROW_MAJOR ? r * cols + c : r + c * rows;
}

int64_t mkx_scales_a_count(MKX_Scale_layout l, int64_t rows, int64_t k) {
  if (rows <= 0 || k <= 0) return 0;
  switch (l) {
    case MKX_SCALE_TENSOR:
      return 1;
    case MKX_SCALE_ROW:
      return rows;
    case MKX_SCALE_BLOCK:
      return rows * blocks(k);
    default:
      return 0;
  }
}

int64_t mkx_scales_b_count(MKX_Scale_layout l, int64_t k, int64_t n) {
  if (k <= 0 || n <= 0) return 0;
  switch (l) {
    case MKX_SCALE_TENSOR:
      return 1;
    case MKX_SCALE_ROW:
      return n;
    case MKX_SCALE_BLOCK:
      return blocks(k) * blocks(n);
    default:
      return 0;
  }
}

int64_t mkx_scales_row_floats(MKX_Scale_layout l, int64_t k) {
  return l == MKX_SCALE_NONE ? 0 : l == MKX_SCALE_BLOCK ? blocks(k) : 1;
}

int mkx_scales_bad(const char *what, const char *name, int64_t i, float v) {
  return mkx_error(MKX_ERR_INVALID_ARG,
                   "%s: %s[%lld] = %g (a scale must be finite and > 0)", what,
                   name, (long long)i, (double)v);
}

int mkx_scales_check_values(const char *what, const char *name, const float *s,
                            int64_t count) {
  for (int64_t i = 0; i < count; i++)
    if (!(isfinite(s[i]) && s[i] > 0.0f))
      return mkx_scales_bad(what, name, i, s[i]);
  return MKX_SUCCESS;
}

void mkx_scales_a_rows(const MKX_Scales *sc, int64_t rows, int64_t k,
                       MKX_Order order, float *rec) {
  const int64_t kb = mkx_scales_row_floats(sc->layout, k);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t b = 0; b < kb; b++) {
      float v = 1.0f;
      if (sc->layout == MKX_SCALE_TENSOR) v = sc->a[0];
      if (sc->layout == MKX_SCALE_ROW) v = sc->a[i];
      if (sc->layout == MKX_SCALE_BLOCK) v = sc->a[at(i, b, rows, kb, order)];
      rec[i * kb + b] = v;
    }
}

void mkx_scales_apply_a(float *Aw, int64_t rows, int64_t k, const float *rec,
                        int64_t kb) {
  for (int64_t i = 0; i < rows; i++)
    for (int64_t l = 0; l < k; l++)
      Aw[i * k + l] *= rec[i * kb + (kb > 1 ? l / BS : 0)];
}

void mkx_scales_apply_b(const MKX_Scales *sc, int trans, int64_t k, int64_t n,
                        MKX_Order order, float *Bw) {
  /* as stored: R x S, where op(B)'s column index is c (or r when trans) */
  const int64_t R = trans ? n : k, S = trans ? k : n;
  for (int64_t r = 0; r < R; r++)
    for (int64_t c = 0; c < S; c++) {
      float v = 1.0f;
      if (sc->layout == MKX_SCALE_TENSOR) v = sc->b[0];
      if (sc->layout == MKX_SCALE_ROW) v = sc->b[trans ? r : c];
      if (sc->layout == MKX_SCALE_BLOCK)
        v = sc->b[at(r / BS, c / BS, blocks(R), blocks(S), order)];
      Bw[r * S + c] *= v;
    }
}
