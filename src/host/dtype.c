/* Element conversions and strided matrix packing for the host path. */
#include <math.h>
#include <string.h>
#include "host/dtype.h"

/* a (finite, > 0) rounded once to `mbits` stored mantissa bits with an
 * exponent of at least emin: *e and the integer significand, below
 * 2^(mbits + 1), below 2^mbits for a subnormal.  Scaling by a power of two
 * is exact, so nearbyint() (ties to even in the default mode) is the only
 * rounding. */
static unsigned round_significand(double a, int mbits, int emin, int *e) {
  int ex;
  (void)frexp(a, &ex);
  *e = ex - 1 < emin ? emin : ex - 1; /* subnormals share emin's quantum */
  double r = nearbyint(ldexp(a, mbits - *e));
  if (r >= ldexp(1.0, mbits + 1)) { /* rounded up into the next binade */
    ++*e;
    r = ldexp(r, -1);
  }
  return (unsigned)r;
}

/* Round a double to a binary16-like format with `ebits` exponent and
 * `mbits` stored mantissa bits. */
static uint16_t encode_small(double d, int ebits, int mbits) {
  uint16_t sign = signbit(d) ? (uint16_t)(1u << (ebits + mbits)) : 0;
  uint16_t expmask = (uint16_t)(((1u << ebits) - 1u) << mbits);
  if (isnan(d)) return (uint16_t)(sign | expmask | (1u << (mbits - 1)));
  double a = fabs(d);
  if (isinf(a)) return (uint16_t)(sign | expmask);
  if (a == 0.0) return sign;
  int bias = (1 << (ebits - 1)) - 1, e;
  const unsigned ri = round_significand(a, mbits, 1 - bias, &e);
  if (e > bias) return (uint16_t)(sign | expmask);
  if (ri < (1u << mbits)) return (uint16_t)(sign | ri); /* subnormal */
  return (uint16_t)(sign | (uint32_t)(e + bias) << mbits |
                    (ri - (1u << mbits)));
}

/* An fp8 code of `ebits` exponent and `mbits` mantissa bits; has_inf:
 * the all-ones exponent holds infinities and NaNs (E5M2), else only the
 * all-ones code is NaN (E4M3). */
static double decode_fp8(uint8_t c, int ebits, int mbits, int has_inf) {
  const int bias = (1 << (ebits - 1)) - 1, emax = (1 << ebits) - 1;
  const int e = (c >> mbits) & emax, m = c & ((1 << mbits) - 1);
  double v;
  if (has_inf && e == emax)
    v = m ? NAN : INFINITY;
  else if (!has_inf && e == emax && m == (1 << mbits) - 1)
    v = NAN;
  else if (e == 0)
    v = ldexp((double)m, 1 - bias - mbits);
  else
    v = ldexp((double)(m | 1 << mbits), e - bias - mbits);
  return (c & 0x80) ? -v : v;
}

/* Rounded once (ties to even) to the format, saturating at the largest
 * finite code max_code; NaN to nan_code. */
static uint8_t encode_fp8(double d, int ebits, int mbits, uint8_t max_code,
                          uint8_t nan_code, int has_inf) {
  const uint8_t sign = signbit(d) ? 0x80 : 0;
  if (isnan(d)) return (uint8_t)(sign | nan_code);
  const double a = fabs(d);
  if (a >= decode_fp8(max_code, ebits, mbits, has_inf))
    return (uint8_t)(sign | max_code);
  if (a == 0.0) return sign;
  const int bias = (1 << (ebits - 1)) - 1;
  int e;
  const unsigned ri = round_significand(a, mbits, 1 - bias, &e);
  if (ri < (1u << mbits)) return (uint8_t)(sign | ri); /* subnormal */
  const unsigned mag = (unsigned)(e + bias) << mbits | (ri - (1u << mbits));
  return (uint8_t)(sign | (mag > max_code ? max_code : mag));
}

double mkx_fp8_e4m3_to_double(uint8_t c) { return decode_fp8(c, 4, 3, 0); }
double mkx_fp8_e5m2_to_double(uint8_t c) { return decode_fp8(c, 5, 2, 1); }
uint8_t mkx_double_to_fp8_e4m3(double d) {
  return encode_fp8(d, 4, 3, 0x7e, 0x7f, 0);
}
uint8_t mkx_double_to_fp8_e5m2(double d) {
  return encode_fp8(d, 5, 2, 0x7b, 0x7e, 1);
}

float mkx_bf16_to_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

float mkx_fp16_to_float(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;
  if (e == 0)
    v = ldexp((double)m, -24);
  else if (e == 31)
    v = m ? NAN : INFINITY;
  else
    v = ldexp((double)(m | 0x400), e - 25);
  return (float)((h & 0x8000) ? -v : v);
}

uint16_t mkx_float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a (quiet) NaN */
    return (uint16_t)((u >> 16) | 0x40u);
  /* bf16 is the top half of fp32: round the bottom half to even. */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

uint16_t mkx_float_to_fp16(float f) { return encode_small(f, 5, 10); }

uint16_t mkx_double_to_bf16(double d) {
  float f = (float)d;
  if ((double)f == d) return mkx_float_to_bf16(f);
  return encode_small(d, 8, 7);
}

uint16_t mkx_double_to_fp16(double d) { return encode_small(d, 5, 10); }

MKX_Datatype mkx_work_type(MKX_Datatype t) {
  return t == MKX_FP64 ? MKX_FP64 : MKX_FP32;
}

double mkx_load_elem(MKX_Datatype t, const void *p, size_t i) {
  switch (t) {
    case MKX_BF16:
      return mkx_bf16_to_float(((const uint16_t *)p)[i]);
    case MKX_FP16:
      return mkx_fp16_to_float(((const uint16_t *)p)[i]);
    case MKX_FP32:
      return ((const float *)p)[i];
    case MKX_FP64:
      return ((const double *)p)[i];
    case MKX_FP8_E4M3:
      return mkx_fp8_e4m3_to_double(((const uint8_t *)p)[i]);
    case MKX_FP8_E5M2:
      return mkx_fp8_e5m2_to_double(((const uint8_t *)p)[i]);
  }
  return 0.0;
}

void mkx_store_elem(MKX_Datatype t, void *p, size_t i, double v) {
  switch (t) {
    case MKX_BF16:
      ((uint16_t *)p)[i] = mkx_double_to_bf16(v);
      break;
    case MKX_FP16:
      ((uint16_t *)p)[i] = mkx_double_to_fp16(v);
      break;
    case MKX_FP32:
      ((float *)p)[i] = (float)v;
      break;
    case MKX_FP64:
      ((double *)p)[i] = v;
      break;
    case MKX_FP8_E4M3:
      ((uint8_t *)p)[i] = mkx_double_to_fp8_e4m3(v);
      break;
    case MKX_FP8_E5M2:
      ((uint8_t *)p)[i] = mkx_double_to_fp8_e5m2(v);
      break;
  }
}

int mkx_is_fp8(MKX_Datatype t) {
  return t == MKX_FP8_E4M3 || t == MKX_FP8_E5M2;
}

/* fp8 to fp32 through the 256 values of the type: exact (every fp8 value
 * is an fp32 value), and cheap for the operands of the host GEMM. */
static void fp8_to_float(MKX_Datatype st, const uint8_t *s, size_t sstride,
                         float *d, size_t dstride, size_t count) {
  float v[256];
  for (int c = 0; c < 256; c++)
    v[c] = (float)mkx_load_elem(st, &(uint8_t){(uint8_t)c}, 0);
  for (size_t i = 0; i < count; i++) d[i * dstride] = v[s[i * sstride]];
}

void mkx_convert(MKX_Datatype st, const void *src, size_t sstride,
                 MKX_Datatype dt, void *dst, size_t dstride, size_t count) {
  if (st == dt) { /* copy bits: NaN payloads and -0 survive */
    size_t es = MKX_Type_size(st);
    if (sstride == 1 && dstride == 1) {
      if (count) memcpy(dst, src, count * es);
      return;
    }
    for (size_t i = 0; i < count; i++)
      memcpy((char *)dst + i * dstride * es,
             (const char *)src + i * sstride * es, es);
    return;
  }
  if (st == MKX_BF16 && dt == MKX_FP32) { /* the hot case: keep it cheap */
    const uint16_t *s = src;
    float *d = dst;
    for (size_t i = 0; i < count; i++)
      d[i * dstride] = mkx_bf16_to_float(s[i * sstride]);
    return;
  }
  if (mkx_is_fp8(st) && dt == MKX_FP32 && count > 256) {
    fp8_to_float(st, src, sstride, dst, dstride, count);
    return;
  }
  if (st == MKX_FP32 && dt == MKX_BF16) {
    const float *s = src;
    uint16_t *d = dst;
    for (size_t i = 0; i < count; i++)
      d[i * dstride] = mkx_float_to_bf16(s[i * sstride]);
    return;
  }
  for (size_t i = 0; i < count; i++)
    mkx_store_elem(dt, dst, i * dstride, mkx_load_elem(st, src, i * sstride));
}

/* Row-major rows are contiguous; column-major columns are: walk whichever
 * is contiguous in the strided matrix. */
void mkx_mat_pack(MKX_Datatype st, const void *src, int64_t m, int64_t n,
                  int64_t ld, MKX_Order order, MKX_Datatype dt, void *dst) {
  size_t es = MKX_Type_size(st), ed = MKX_Type_size(dt);
  if (order == MKX_ROW_MAJOR) {
    for (int64_t i = 0; i < m; i++)
      mkx_convert(st, (const char *)src + (size_t)i * (size_t)ld * es, 1, dt,
                  (char *)dst + (size_t)i * (size_t)n * ed, 1, (size_t)n);
  } else {
    for (int64_t j = 0; j < n; j++)
      mkx_convert(st, (const char *)src + (size_t)j * (size_t)ld * es, 1, dt,
                  (char *)dst + (size_t)j * ed, (size_t)n, (size_t)m);
  }
}

void mkx_mat_unpack(MKX_Datatype st, const void *src, int64_t m, int64_t n,
                    MKX_Datatype dt, void *dst, int64_t ld, MKX_Order order) {
  size_t es = MKX_Type_size(st), ed = MKX_Type_size(dt);
  if (order == MKX_ROW_MAJOR) {
    for (int64_t i = 0; i < m; i++)
      mkx_convert(st, (const char *)src + (size_t)i * (size_t)n * es, 1, dt,
                  (char *)dst + (size_t)i * (size_t)ld * ed, 1, (size_t)n);
  } else {
    for (int64_t j = 0; j < n; j++)
      mkx_convert(st, (const char *)src + (size_t)j * es, (size_t)n, dt,
                  (char *)dst + (size_t)j * (size_t)ld * ed, 1, (size_t)m);
  }
}
