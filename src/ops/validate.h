/* Argument checks shared by the operations.  Each names the argument of
 * the public call in its message. */
#ifndef MKX_OPS_VALIDATE_H
#define MKX_OPS_VALIDATE_H

#include <stddef.h>
#include <stdint.h>
#include "mkx.h"

int mkx_check_ptr(const char *fn, const char *name, const void *p);
int mkx_check_size(const char *fn, const char *name, int64_t v, int64_t min);
/* The product of the n sizes f[] (each already checked) is an element
 * count of buffer `what` that byte counts can hold: MKX_ERR_BAD_SIZE naming
 * it if not.  Every buffer size an operation computes goes through it
 * first, so that no product of arguments overflows. */
int mkx_check_elems(const char *fn, const char *what, int n, const int64_t *f);
#define MKX_CHECK_ELEMS(fn, what, ...)                                         \
  mkx_check_elems(fn, what,                                                    \
                  (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),   \
                  (const int64_t[]){__VA_ARGS__})
int mkx_check_dtype(const char *fn, const char *name, MKX_Datatype t);
int mkx_check_order(const char *fn, MKX_Order order);
int mkx_check_trans(const char *fn, MKX_Trans t);
/* The unsupported combinations: fp64 mixed with another type (ctype,
 * the product's type, called `name` in messages). */
int mkx_check_type_pair(const char *fn, const char *name, MKX_Datatype dtype,
                        MKX_Datatype ctype);
/* A GEMM's operand and product types: both valid, paired (above), the
 * product (argument `name`) not fp8. */
int mkx_check_gemm_types(const char *fn, const char *name, MKX_Datatype dtype,
                         MKX_Datatype ctype);
/* A call whose dtype may not be fp8: MKX_ERR_UNSUPPORTED if it is. */
int mkx_check_not_fp8(const char *fn, MKX_Datatype dtype);
/* The scales of a GEMM call: a layout of the enum, fp8 dtype unless
 * none, a (b) not NULL where A (B) has elements.  MKX_SCALE_NONE's
 * pointers are set to NULL (never read, never staged).  The values are
 * checked where they are read. */
int mkx_check_scales(const char *fn, MKX_Scales *sc, MKX_Datatype dtype,
                     int a_elems, int b_elems);
/* The same for an argument of another name than "scales". */
int mkx_check_scales_named(const char *fn, const char *name, MKX_Scales *sc,
                           MKX_Datatype dtype, int a_elems, int b_elems);
/* *scales of a _scaled call as its arguments keep it (NULL: none). */
MKX_Scales mkx_scales_arg(const MKX_Scales *scales);
/* ld of a rows x cols matrix stored in `order`. */
int mkx_check_ld(const char *fn, const char *name, int64_t ld, int64_t rows,
                 int64_t cols, MKX_Order order);
/* The elements a rows x cols matrix with leading dimension ld spans (ld
 * already checked) are within mkx_check_elems's bound: MKX_ERR_BAD_SIZE
 * naming the matrix if not. */
int mkx_check_span(const char *fn, const char *name, int64_t rows, int64_t cols,
                   int64_t ld, MKX_Order order);
/* Bytes spanned by a rows x cols matrix (0 if empty). */
size_t mkx_matrix_bytes(int64_t rows, int64_t cols, int64_t ld, MKX_Order order,
                        MKX_Datatype t);

#endif
