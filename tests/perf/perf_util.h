/* Helpers the mkx_perf subcommands share (tests/perf/perf_util.c). */
#ifndef MKX_PERF_UTIL_H
#define MKX_PERF_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>

/* qsort order of floats. */
int perf_cmp_float(const void *a, const void *b);
/* Median of v[0..n) (sorts v; the mean of the middle two for even n). */
float perf_median(float *v, int n);
/* `count` bf16 values in [-1, 1] (never 0) from `seed` into device memory
 * dst: a host chunk uploaded once and replicated on the device, on stream
 * st, waited for.  Exits on a CUDA failure. */
void perf_fill_bf16(void *dst, size_t count, uint64_t seed, cudaStream_t st);
/* Appends printf-style text to s (len bytes in all), truncating. */
__attribute__((format(printf, 3, 4))) void perf_cat(char *s, size_t len,
                                                    const char *fmt, ...);

#endif
