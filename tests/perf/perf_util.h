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
/* count random e4m3 bytes of magnitude 0.25 to 1.875 into device memory
 * dst (a random block of 4 MB replicated; waited for).  Exits on a
 * failure. */
void perf_fill_e4m3(void *dst, size_t count, uint64_t seed);
/* count fp32 scales in [lo, 2 lo) on the device. */
void perf_fill_scales(float *dst, size_t count, float lo, uint64_t seed);
/* Appends printf-style text to s (len bytes in all), truncating. */
__attribute__((format(printf, 3, 4))) void perf_cat(char *s, size_t len,
                                                    const char *fmt, ...);

/* ---- arguments of the subcommands that time a list of shapes ---- */
#define PERF_MAX_SHAPES 32
typedef struct perf_args {
  int reps, warmup, small; /* --reps N (default 10), --warmup N (2), --small */
  int graph;               /* --graph */
  const char *versus, *outname;        /* --versus FILE, --out FILE */
  int ng;                              /* --shapes values given */
  const char *shapes[PERF_MAX_SHAPES]; /* parsed by the subcommand */
} perf_args;
void perf_args_init(perf_args *a);
/* argv[*i] is an option: --small, --graph, --shapes V..., --reps, --warmup,
 * --versus, --out are taken (*i advanced past their values): returns 1;
 * another option: 0; a bad or missing value: 2, said on stderr with
 * `usage` under the name cmd. */
int perf_common_arg(int argc, char **argv, int *i, perf_args *a,
                    const char *cmd, const char *usage);
/* The shapes to run into list (room for max of `size` bytes each), *n
 * of them: --small's (small, nsmall), then each --shapes value through
 * parse (0, or 2 after its message), or else the defaults.  0 or 2. */
int perf_shapes(const perf_args *a, int (*parse)(const char *, void *),
                size_t size, const void *small, int nsmall, const void *dflt,
                int ndflt, void *list, int max, int *n);
/* 2, after "cmd: what: arg" and usage on stderr. */
int perf_usage_error(const char *cmd, const char *usage, const char *what,
                     const char *arg);

#endif
