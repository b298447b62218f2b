/* 16-bit float formats for the tests, rounding to nearest even, written
 * independently of the library and of CUDA's headers. */
#include "num16.h"
#include <math.h>
#include <string.h>

static uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t mt_f32_to_bf16(float f) {
  uint32_t x = f2u(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
  uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return (uint16_t)(x >> 16);
}

float mt_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t mt_f32_to_f16(float f) {
  uint32_t x = f2u(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) /* inf or nan */
    return (uint16_t)(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (ax >= 0x477ff000u) /* >= 65520: rounds to inf */
    return (uint16_t)(sign | 0x7c00u);
  if (ax < 0x38800000u) {             /* below 2^-14: subnormal (or zero) */
    float r = fabsf(f) * 16777216.0f; /* exact: scaling by 2^24 */
    r = rintf(r);                     /* round to nearest even */
    return (uint16_t)(sign | (uint16_t)r);
  }
  uint32_t e = (ax >> 23) - 127 + 15;
  uint32_t mant = ax & 0x7fffffu;
  uint32_t h = (e << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
  return (uint16_t)(sign | h);
}

float mt_f16_to_f32(uint16_t h) {
  int e = (h >> 10) & 0x1f;
  int m = h & 0x3ff;
  float v;
  if (e == 0)
    v = ldexpf((float)m, -24);
  else if (e == 31)
    v = m ? NAN : INFINITY;
  else
    v = ldexpf((float)(1024 + m), e - 25);
  return (h & 0x8000) ? -v : v;
}
