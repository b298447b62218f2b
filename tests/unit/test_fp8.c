/*
 * The host oracle's FP8 conversions (src/host/dtype.c), on every code:
 *  - decoding against values built another way (the formats' tables of
 *    normal and subnormal values from the OCP FP8 definition), with the
 *    specification's anchors (largest, smallest subnormal, NaN, infinity);
 *  - encoding gives back every finite code, signed zeros included;
 *  - the midpoint between neighbours rounds to the even code, a hair above
 *    or below it to the nearer one;
 *  - values past the largest finite one (infinities too) saturate to it,
 *    below the smallest subnormal's half to zero, NaN stays NaN.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include "../common/check.h"
#include "host/dtype.h"

typedef struct fmt {
  const char *name;
  int ebits, mbits, has_inf;
  uint8_t max_code;
  double max;
  double (*dec)(uint8_t);
  uint8_t (*enc)(double);
} fmt;

/* Code c's value from the definition, written as a table builder would:
 * sign, exponent field, mantissa field; NaN -> NAN, infinity -> INFINITY. */
static double reference(const fmt *f, unsigned c) {
  const unsigned ef = (c >> f->mbits) & ((1u << f->ebits) - 1);
  const unsigned mf = c & ((1u << f->mbits) - 1);
  const int bias = (1 << (f->ebits - 1)) - 1;
  const double scale = pow(2.0, -f->mbits);
  double v;
  if (ef == (1u << f->ebits) - 1 && f->has_inf)
    v = mf ? NAN : INFINITY;
  else if (ef == (1u << f->ebits) - 1 && mf == (1u << f->mbits) - 1)
    v = NAN;
  else if (ef == 0)
    v = pow(2.0, 1 - bias) * (mf * scale);
  else
    v = pow(2.0, (int)ef - bias) * (1.0 + mf * scale);
  return (c & 0x80) ? -v : v;
}

static void decode_all(const fmt *f) {
  int bad = 0;
  for (unsigned c = 0; c < 256; c++) {
    const double r = reference(f, c), v = f->dec((uint8_t)c);
    if (isnan(r) ? !isnan(v) : !(v == r && signbit(v) == signbit(r))) bad++;
  }
  CHECK(bad == 0, "%s: %d of 256 codes decode wrong", f->name, bad);
}

static void round_trip(const fmt *f) {
  int bad = 0;
  for (unsigned c = 0; c < 256; c++) {
    const double v = f->dec((uint8_t)c);
    if (isnan(v) || isinf(v)) continue;
    bad += f->enc(v) != c;
  }
  CHECK(bad == 0, "%s: %d finite codes do not encode back to themselves",
        f->name, bad);
}

/* Between each pair of neighbouring positive finite codes. */
static void rounding(const fmt *f) {
  int bad = 0;
  for (unsigned c = 0; c < f->max_code; c++) {
    const double lo = f->dec((uint8_t)c), hi = f->dec((uint8_t)(c + 1));
    const double mid = (lo + hi) / 2, eps = (hi - lo) / 1024;
    const uint8_t even = (c & 1) ? (uint8_t)(c + 1) : (uint8_t)c;
    bad += f->enc(mid) != even;
    bad += f->enc(mid - eps) != c;
    bad += f->enc(mid + eps) != c + 1;
    bad += f->enc(-mid) != (0x80 | even);
  }
  CHECK(bad == 0, "%s: %d roundings wrong between neighbours", f->name, bad);
}

static void edges(const fmt *f) {
  const uint8_t nan = f->enc(NAN);
  CHECK(f->dec(f->max_code) == f->max, "%s: largest %g", f->name,
        f->dec(f->max_code));
  CHECK(f->enc(f->max * 1.5) == f->max_code &&
            f->enc(INFINITY) == f->max_code &&
            f->enc(-INFINITY) == (0x80 | f->max_code) &&
            f->enc(1e300) == f->max_code,
        "%s: past the largest finite value saturates", f->name);
  CHECK(isnan(f->dec(nan)) && isnan(f->dec(f->enc(-NAN))), "%s: NaN stays NaN",
        f->name);
  const double tiny = f->dec(1);
  CHECK(f->enc(tiny / 2) == 0 && f->enc(tiny * 0.51) == 1 &&
            f->enc(-tiny / 4) == 0x80,
        "%s: half the smallest subnormal (%g) rounds to even zero", f->name,
        tiny);
}

int main(void) {
  const fmt fmts[2] = {{"E4M3", 4, 3, 0, 0x7e, 448.0, mkx_fp8_e4m3_to_double,
                        mkx_double_to_fp8_e4m3},
                       {"E5M2", 5, 2, 1, 0x7b, 57344.0, mkx_fp8_e5m2_to_double,
                        mkx_double_to_fp8_e5m2}};
  check_show_passes(1);
  CHECK(mkx_fp8_e4m3_to_double(0x01) == ldexp(1, -9) &&
            isnan(mkx_fp8_e4m3_to_double(0x7f)) &&
            mkx_fp8_e4m3_to_double(0x08) == ldexp(1, -6),
        "E4M3 anchors: 2^-9, NaN, 2^-6");
  CHECK(mkx_fp8_e5m2_to_double(0x01) == ldexp(1, -16) &&
            isinf(mkx_fp8_e5m2_to_double(0x7c)) &&
            isnan(mkx_fp8_e5m2_to_double(0x7d)),
        "E5M2 anchors: 2^-16, infinity, NaN");
  for (int i = 0; i < 2; i++) {
    decode_all(&fmts[i]);
    round_trip(&fmts[i]);
    rounding(&fmts[i]);
    edges(&fmts[i]);
  }
  return check_done("test_fp8");
}
