/* A user's kernels on a tile set (tests/gpu/test_tiles.c): what they
 * write is a function of the epoch, row and column (tk_value), so a
 * consumer's copy can be checked against the host. */
#ifndef MKX_TESTS_TILES_KERNELS_H
#define MKX_TESTS_TILES_KERNELS_H

#include <cuda_runtime.h>
#include <stdint.h>
#include "mkx_tiles_dev.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define TK_HD __host__ __device__
#else
#define TK_HD
#endif
/* The element (row, col) of epoch e. */
static inline TK_HD float tk_value(int e, int64_t row, int64_t col) {
  return (float)((e * 7 + row * 3 + col) % 2039);
}
/* Rows [r0, r1) of communicator rank `to`'s copy written (values of the
 * set's epoch plus salt), in kernel tiles of kr x kc, each signalled once
 * written. */
int tk_produce(const MKX_Tiles_dev *t, int to, int64_t r0, int64_t r1, int kr,
               int kc, int salt, cudaStream_t st);
/* This rank's copy read into out (rows x cols, dense) in kernel tiles of
 * kr x kc, each after a wait for its rectangle; *failed = 1 where a wait
 * failed. */
int tk_consume(const MKX_Tiles_dev *t, int kr, int kc, float *out, int *failed,
               cudaStream_t st);

/* One thread signals the rectangle of communicator rank `to`'s copy,
 * whatever it is (the device side's argument checks). */
int tk_signal(const MKX_Tiles_dev *t, int to, int64_t row0, int64_t nrows,
              int64_t col0, int64_t ncols, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
