/* The scales of fp8 operands (MKX_Scales in mkx.h) on the host path: how
 * many each layout has, their values' check, and their application to
 * the dense row-major fp32 working copies of A and B.  A's scales travel
 * as per-row records of kb floats (kb = ceil(k / 128) for
 * MKX_SCALE_BLOCK, 0 for MKX_SCALE_NONE, else 1), so that AllGather moves
 * them with the rows. */
#ifndef MKX_HOST_SCALES_H
#define MKX_HOST_SCALES_H

#include <stdint.h>
#include "mkx.h"

/* Scales each array holds for a rows x k A and a k x n op(B) (0 when the
 * operand has no elements or the layout none). */
int64_t mkx_scales_a_count(MKX_Scale_layout l, int64_t rows, int64_t k);
int64_t mkx_scales_b_count(MKX_Scale_layout l, int64_t k, int64_t n);
/* Floats per row record of A's scales (0: MKX_SCALE_NONE, none). */
int64_t mkx_scales_row_floats(MKX_Scale_layout l, int64_t k);

/* Every one of the count scales at s (host memory) is finite and > 0:
 * else MKX_ERR_INVALID_ARG naming `what`, `name` and the first bad index
 * (mkx_scales_bad: that error for value v at index i). */
int mkx_scales_check_values(const char *what, const char *name, const float *s,
                            int64_t count);
int mkx_scales_bad(const char *what, const char *name, int64_t i, float v);

/* A's scales (layout of sc, the rows x k A stored in `order`) as rows
 * dense row-major records of mkx_scales_row_floats floats. */
void mkx_scales_a_rows(const MKX_Scales *sc, int64_t rows, int64_t k,
                       MKX_Order order, float *rec);
/* The dense row-major rows x k working A times its row records. */
void mkx_scales_apply_a(float *Aw, int64_t rows, int64_t k, const float *rec,
                        int64_t kb);
/* The dense row-major working B as stored (n x k when trans, else k x n)
 * times b's scales (layout of sc, the user's B stored in `order`). */
void mkx_scales_apply_b(const MKX_Scales *sc, int trans, int64_t k, int64_t n,
                        MKX_Order order, float *Bw);

#endif
