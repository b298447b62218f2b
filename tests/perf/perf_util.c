/* Helpers the mkx_perf subcommands share (perf_util.h). */
#include "perf_util.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_check.h"
#include "num16.h"

int perf_cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

float perf_median(float *v, int n) {
  qsort(v, (size_t)n, sizeof *v, perf_cmp_float);
  return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

/* bytes of host memory h into dst on st, then replicated by doubling device
 * copies up to total bytes (random data that is quick to set up), waited
 * for. */
static void replicate(void *dst, const void *h, size_t bytes, size_t total,
                      cudaStream_t st) {
  CK(cudaMemcpyAsync(dst, h, bytes, cudaMemcpyHostToDevice, st));
  for (size_t done = bytes; done < total;) {
    const size_t n = done < total - done ? done : total - done;
    CK(cudaMemcpyAsync((uint8_t *)dst + done, dst, n, cudaMemcpyDeviceToDevice,
                       st));
    done += n;
  }
  CK(cudaStreamSynchronize(st));
}

static void *host_block(size_t bytes) {
  void *h = malloc(bytes);
  if (!h) {
    fprintf(stderr, "mkx_perf: no memory for %zu bytes\n", bytes);
    exit(1);
  }
  return h;
}

void perf_fill_bf16(void *dst, size_t count, uint64_t seed, cudaStream_t st) {
  if (count == 0) return;
  const size_t chunk = count < ((size_t)1 << 22) ? count : ((size_t)1 << 22);
  uint16_t *h = host_block(chunk * 2);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < chunk; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    float f = (float)((s >> 20) & 0xffff) / 32768.0f - 1.0f;
    h[i] = mt_f32_to_bf16(f == 0.0f ? 0.5f : f);
  }
  replicate(dst, h, chunk * 2, count * 2, st);
  free(h);
}

void perf_fill_e4m3(void *dst, size_t count, uint64_t seed) {
  if (count == 0) return;
  const size_t chunk = count < ((size_t)1 << 22) ? count : ((size_t)1 << 22);
  uint8_t *h = host_block(chunk);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < chunk; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    /* sign, exponent 5..7 (bias 7), any mantissa */
    h[i] = (uint8_t)((x & 0x80) | (5 + (x >> 8) % 3) << 3 | ((x >> 16) & 7));
  }
  replicate(dst, h, chunk, count, 0);
  free(h);
}

void perf_fill_scales(float *dst, size_t count, float lo, uint64_t seed) {
  if (count == 0) return;
  const size_t chunk = count < ((size_t)1 << 20) ? count : ((size_t)1 << 20);
  float *h = host_block(sizeof(float) * chunk);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < chunk; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    h[i] = lo * (1.0f + (float)((x >> 20) & 0xffff) / 65536.0f);
  }
  replicate(dst, h, sizeof(float) * chunk, sizeof(float) * count, 0);
  free(h);
}

void perf_cat(char *s, size_t len, const char *fmt, ...) {
  size_t used = strlen(s);
  va_list ap;
  if (used + 1 >= len) return;
  va_start(ap, fmt);
  vsnprintf(s + used, len - used, fmt, ap);
  va_end(ap);
}

void perf_args_init(perf_args *a) {
  memset(a, 0, sizeof *a);
  a->reps = 10, a->warmup = 2;
}

int perf_usage_error(const char *cmd, const char *usage, const char *what,
                     const char *arg) {
  fprintf(stderr, "%s: %s: %s\n%s", cmd, what, arg, usage);
  return 2;
}

/* An int in [lo, 1000000] from v into *x: 1, or 0 if v is not one. */
static int int_arg(const char *v, int lo, int *x) {
  char *end;
  errno = 0;
  long l = strtol(v, &end, 10);
  if (errno || end == v || *end || l < lo || l > 1000000) return 0;
  *x = (int)l;
  return 1;
}

int perf_common_arg(int argc, char **argv, int *i, perf_args *a,
                    const char *cmd, const char *usage) {
  const char *o = argv[*i];
  if (!strcmp(o, "--small")) {
    a->small = 1;
    return 1;
  }
  if (!strcmp(o, "--graph")) {
    a->graph = 1;
    return 1;
  }
  if (!strcmp(o, "--shapes")) {
    const int before = a->ng;
    for (; *i + 1 < argc && strncmp(argv[*i + 1], "--", 2); ++*i) {
      if (a->ng == PERF_MAX_SHAPES)
        return perf_usage_error(cmd, usage, "too many shapes", argv[*i + 1]);
      a->shapes[a->ng++] = argv[*i + 1];
    }
    return a->ng == before
               ? perf_usage_error(cmd, usage, "missing its value", o)
               : 1;
  }
  if (strcmp(o, "--reps") && strcmp(o, "--warmup") && strcmp(o, "--versus") &&
      strcmp(o, "--out"))
    return 0;
  if (*i + 1 >= argc)
    return perf_usage_error(cmd, usage, "missing its value", o);
  const char *v = argv[++*i];
  if (!strcmp(o, "--reps") && !int_arg(v, 1, &a->reps))
    return perf_usage_error(cmd, usage, "--reps takes a positive integer", v);
  if (!strcmp(o, "--warmup") && !int_arg(v, 0, &a->warmup))
    return perf_usage_error(cmd, usage, "--warmup takes an integer >= 0", v);
  if (!strcmp(o, "--versus")) a->versus = v;
  if (!strcmp(o, "--out")) a->outname = v;
  return 1;
}

static void add_shapes(const void *from, int k, size_t size, void *list,
                       int max, int *n) {
  for (int i = 0; i < k && *n < max; i++, ++*n)
    memcpy((char *)list + (size_t)*n * size, (const char *)from + i * size,
           size);
}

int perf_shapes(const perf_args *a, int (*parse)(const char *, void *),
                size_t size, const void *small, int nsmall, const void *dflt,
                int ndflt, void *list, int max, int *n) {
  *n = 0;
  if (a->small) add_shapes(small, nsmall, size, list, max, n);
  for (int g = 0; g < a->ng && *n < max; g++, ++*n)
    if (parse(a->shapes[g], (char *)list + (size_t)*n * size)) return 2;
  if (*n == 0) add_shapes(dflt, ndflt, size, list, max, n);
  return 0;
}
