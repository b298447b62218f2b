/* What the fp8 engine tests share (test_gemm_fp8, test_moe_fp8_engine):
 * the engine's type names, the exact operand set, random scales, and C's
 * elements as values with their rounding unit. */
#ifndef MKX_TESTS_FP8_CHECK_H
#define MKX_TESTS_FP8_CHECK_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "gemm/gemm_engine.h"
#include "mkx_test.h"
#include "num16.h"

static inline const char *fp8_type_name(int t) {
  return t == MKX_GEMM_E4M3   ? "e4m3"
         : t == MKX_GEMM_E5M2 ? "e5m2"
         : t == MKX_GEMM_BF16 ? "bf16"
         : t == MKX_GEMM_FP16 ? "fp16"
                              : "fp32";
}

/* An fp8 byte of type t for value i of the exact set {0, +-0.5, +-1,
 * +-1.5, +-2}: every product and block sum of them is exact in fp32. */
static inline uint8_t fp8_exact_byte(int t, int i) {
  static const uint8_t e4[9] = {0x00, 0x30, 0xB0, 0x38, 0xB8,
                                0x3C, 0xBC, 0x40, 0xC0};
  static const uint8_t e5[9] = {0x00, 0x38, 0xB8, 0x3C, 0xBC,
                                0x3E, 0xBE, 0x40, 0xC0};
  return t == MKX_GEMM_E4M3 ? e4[i] : e5[i];
}

/* A power of two in [1/4, 4] (exact), else uniform in [0.25, 4). */
static inline float fp8_rand_scale(mt_rng *g, int exact) {
  if (exact) return ldexpf(1.f, (int)(mt_rng_next(g) % 5) - 2);
  return (float)(0.25 + 3.75 * mt_rng_unit(g));
}

/* Half a unit in the last place of C's type, relative. */
static inline double fp8_c_eps(int ct) {
  return ct == MKX_GEMM_FP32 ? 0x1p-24 : ct == MKX_GEMM_BF16 ? 0x1p-8 : 0x1p-11;
}

static inline double fp8_c_value(int ct, const unsigned char *e) {
  if (ct == MKX_GEMM_FP32) {
    float v;
    memcpy(&v, e, 4);
    return v;
  }
  uint16_t h;
  memcpy(&h, e, 2);
  return ct == MKX_GEMM_BF16 ? mt_bf16_to_f32(h) : mt_f16_to_f32(h);
}

#endif
