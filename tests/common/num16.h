/* bf16 and fp16 to and from float for the tests (no MPI, no CUDA), round
 * to nearest even. */
#ifndef MKX_TESTS_NUM16_H
#define MKX_TESTS_NUM16_H

#include <stdint.h>

uint16_t mt_f32_to_bf16(float f);
float mt_bf16_to_f32(uint16_t h);
uint16_t mt_f32_to_f16(float f);
float mt_f16_to_f32(uint16_t h);

#endif
