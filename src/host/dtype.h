/* Element conversions and matrix packing for the host path.  Working
 * arrays are dense row-major float (bf16/fp16/fp32 data) or double (fp64
 * data); user matrices are strided, in either storage order. */
#ifndef MKX_HOST_DTYPE_H
#define MKX_HOST_DTYPE_H

#include "mkx.h"
#include <stddef.h>
#include <stdint.h>

/* Scalar conversions, round-to-nearest-even, with subnormals, inf and NaN. */
float mkx_bf16_to_float(uint16_t h);
float mkx_fp16_to_float(uint16_t h);
uint16_t mkx_float_to_bf16(float f);
uint16_t mkx_float_to_fp16(float f);
/* Rounded once from double: no double rounding through float. */
uint16_t mkx_double_to_bf16(double d);
uint16_t mkx_double_to_fp16(double d);

/* The two 8-bit formats of the OCP FP8 specification, as Hopper's
 * tensor cores take them: E4M3 (bias 7, no infinity, S.1111.111 the only
 * NaN, largest 448) and E5M2 (bias 15, IEEE-like infinities and NaNs,
 * largest 57344), subnormals included.  Decoding is exact; encoding
 * rounds once to nearest, ties to even, and saturates to the largest
 * finite value (CUDA's satfinite conversions), infinities included; NaN
 * stays NaN. */
double mkx_fp8_e4m3_to_double(uint8_t c);
double mkx_fp8_e5m2_to_double(uint8_t c);
uint8_t mkx_double_to_fp8_e4m3(double d);
uint8_t mkx_double_to_fp8_e5m2(double d);

int mkx_is_fp8(MKX_Datatype t);

/* MKX_FP64 for MKX_FP64 data, MKX_FP32 for every other type. */
MKX_Datatype mkx_work_type(MKX_Datatype t);

/* Element i of an array of type t, and the store back (rounded once). */
double mkx_load_elem(MKX_Datatype t, const void *p, size_t i);
void mkx_store_elem(MKX_Datatype t, void *p, size_t i, double v);

/* Convert `count` elements from src (type st, every sstride elements) to
 * dst (type dt, every dstride elements).  Same types copy bits. */
void mkx_convert(MKX_Datatype st, const void *src, size_t sstride,
                 MKX_Datatype dt, void *dst, size_t dstride, size_t count);

/* The m x n matrix src (type st, `order`, leading dimension ld) into the
 * dense row-major array dst (type dt). */
void mkx_mat_pack(MKX_Datatype st, const void *src, int64_t m, int64_t n,
                  int64_t ld, MKX_Order order, MKX_Datatype dt, void *dst);

/* The dense row-major m x n array src (type st) into the matrix dst (type
 * dt, `order`, ld).  Only the m x n elements are written, never padding. */
void mkx_mat_unpack(MKX_Datatype st, const void *src, int64_t m, int64_t n,
                    MKX_Datatype dt, void *dst, int64_t ld, MKX_Order order);

#endif
