/* Shared argument checks; see validate.h. */
#include "ops/validate.h"
#include "core/error.h"
#include <stdio.h>
#include "host/dtype.h"

/* Sizes above this could overflow byte counts in 64 bits. */
#define MKX_SIZE_LIMIT ((int64_t)1 << 40)

int mkx_check_ptr(const char *fn, const char *name, const void *p) {
  if (p != NULL) return MKX_SUCCESS;
  return mkx_error(MKX_ERR_NULL_POINTER, "%s: %s is NULL", fn, name);
}

int mkx_check_size(const char *fn, const char *name, int64_t v, int64_t min) {
  if (v < min)
    return mkx_error(MKX_ERR_BAD_SIZE, "%s: %s = %lld (must be >= %lld)", fn,
                     name, (long long)v, (long long)min);
  if (v > MKX_SIZE_LIMIT)
    return mkx_error(MKX_ERR_BAD_SIZE, "%s: %s = %lld is too large", fn, name,
                     (long long)v);
  return MKX_SUCCESS;
}

int mkx_check_elems(const char *fn, const char *what, int n, const int64_t *f) {
  int64_t p = 1;
  for (int i = 0; i < n; i++)
    if (f[i] < 0 || (f[i] > 0 && p > MKX_SIZE_LIMIT / f[i]))
      return mkx_error(MKX_ERR_BAD_SIZE,
                       "%s: %s holds more than 2^40 "
                       "elements",
                       fn, what);
    else
      p *= f[i];
  return MKX_SUCCESS;
}

int mkx_check_dtype(const char *fn, const char *name, MKX_Datatype t) {
  if (MKX_Type_size(t) != 0) return MKX_SUCCESS;
  return mkx_error(MKX_ERR_INVALID_ARG, "%s: %s = %d is not an MKX_Datatype",
                   fn, name, (int)t);
}

int mkx_check_order(const char *fn, MKX_Order order) {
  if (order == MKX_ROW_MAJOR || order == MKX_COL_MAJOR) return MKX_SUCCESS;
  return mkx_error(MKX_ERR_INVALID_ARG,
                   "%s: order = %d is not MKX_ROW_MAJOR or MKX_COL_MAJOR", fn,
                   (int)order);
}

int mkx_check_trans(const char *fn, MKX_Trans t) {
  if (t == MKX_NO_TRANS || t == MKX_TRANS) return MKX_SUCCESS;
  return mkx_error(MKX_ERR_INVALID_ARG,
                   "%s: transb = %d is not MKX_NO_TRANS or MKX_TRANS", fn,
                   (int)t);
}

int mkx_check_type_pair(const char *fn, const char *name, MKX_Datatype dtype,
                        MKX_Datatype ctype) {
  if ((dtype == MKX_FP64) == (ctype == MKX_FP64)) return MKX_SUCCESS;
  return mkx_error(MKX_ERR_UNSUPPORTED,
                   "%s: dtype %d with %s %d: fp64 runs end to end in fp64 "
                   "(use MKX_FP64 for both)",
                   fn, (int)dtype, name, (int)ctype);
}

int mkx_check_gemm_types(const char *fn, const char *name, MKX_Datatype dtype,
                         MKX_Datatype ctype) {
  MKX_TRY(mkx_check_dtype(fn, "dtype", dtype));
  MKX_TRY(mkx_check_dtype(fn, name, ctype));
  if (mkx_is_fp8(ctype))
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: %s %d is fp8: the product is bf16, fp16 or fp32 "
                     "with fp8 operands",
                     fn, name, (int)ctype);
  return mkx_check_type_pair(fn, name, dtype, ctype);
}

int mkx_check_not_fp8(const char *fn, MKX_Datatype dtype) {
  if (!mkx_is_fp8(dtype)) return MKX_SUCCESS;
  return mkx_error(MKX_ERR_UNSUPPORTED,
                   "%s: dtype %d is fp8, which only the tensor-parallel GEMM "
                   "calls take",
                   fn, (int)dtype);
}

int mkx_check_scales_named(const char *fn, const char *name, MKX_Scales *sc,
                           MKX_Datatype dtype, int a_elems, int b_elems) {
  char what[64];
  if (sc->layout == MKX_SCALE_NONE) {
    *sc = mkx_scales_arg(NULL);
    return MKX_SUCCESS;
  }
  if (sc->layout != MKX_SCALE_TENSOR && sc->layout != MKX_SCALE_ROW &&
      sc->layout != MKX_SCALE_BLOCK)
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "%s: %s->layout = %d is not an MKX_Scale_layout", fn, name,
                     (int)sc->layout);
  if (!mkx_is_fp8(dtype))
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "%s: %s->layout = %d with dtype %d: scales apply to "
                     "fp8 operands only (MKX_SCALE_NONE otherwise)",
                     fn, name, (int)sc->layout, (int)dtype);
  snprintf(what, sizeof what, "%s->a", name);
  if (a_elems) MKX_TRY(mkx_check_ptr(fn, what, sc->a));
  snprintf(what, sizeof what, "%s->b", name);
  if (b_elems) MKX_TRY(mkx_check_ptr(fn, what, sc->b));
  return MKX_SUCCESS;
}

int mkx_check_scales(const char *fn, MKX_Scales *sc, MKX_Datatype dtype,
                     int a_elems, int b_elems) {
  return mkx_check_scales_named(fn, "scales", sc, dtype, a_elems, b_elems);
}

MKX_Scales mkx_scales_arg(const MKX_Scales *scales) {
  if (scales) return *scales;
  return (MKX_Scales){MKX_SCALE_NONE, NULL, NULL, NULL};
}

int mkx_check_ld(const char *fn, const char *name, int64_t ld, int64_t rows,
                 int64_t cols, MKX_Order order) {
  int64_t need = order == MKX_ROW_MAJOR ? cols : rows;
  if (need < 1) need = 1;
  if (ld >= need && ld <= MKX_SIZE_LIMIT) return MKX_SUCCESS;
  return mkx_error(MKX_ERR_BAD_LD,
                   "%s: %s = %lld too small for a %lld x %lld %s-major "
                   "matrix (needs >= %lld)",
                   fn, name, (long long)ld, (long long)rows, (long long)cols,
                   order == MKX_ROW_MAJOR ? "row" : "column", (long long)need);
}

int mkx_check_span(const char *fn, const char *name, int64_t rows, int64_t cols,
                   int64_t ld, MKX_Order order) {
  const int64_t lines = order == MKX_ROW_MAJOR ? rows : cols;
  return MKX_CHECK_ELEMS(fn, name, lines, ld);
}

size_t mkx_matrix_bytes(int64_t rows, int64_t cols, int64_t ld, MKX_Order order,
                        MKX_Datatype t) {
  if (rows <= 0 || cols <= 0) return 0;
  int64_t lines = order == MKX_ROW_MAJOR ? rows : cols;
  int64_t width = order == MKX_ROW_MAJOR ? cols : rows;
  return (size_t)((lines - 1) * ld + width) * MKX_Type_size(t);
}
