/* Helpers the mkx_perf subcommands share (perf_util.h). */
#include "perf_util.h"
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

void perf_fill_bf16(void *dst, size_t count, uint64_t seed, cudaStream_t st) {
  const size_t chunk = count < ((size_t)1 << 22) ? count : ((size_t)1 << 22);
  uint16_t *h = calloc(chunk ? chunk : 1, 2);
  if (!h) {
    fprintf(stderr, "mkx_perf: out of host memory\n");
    exit(1);
  }
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < chunk; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    float f = (float)((s >> 20) & 0xffff) / 32768.0f - 1.0f;
    h[i] = mt_f32_to_bf16(f == 0.0f ? 0.5f : f);
  }
  CK(cudaMemcpyAsync(dst, h, chunk * 2, cudaMemcpyHostToDevice, st));
  for (size_t done = chunk; done < count;) { /* doubling device copies */
    const size_t n = done < count - done ? done : count - done;
    CK(cudaMemcpyAsync((uint16_t *)dst + done, dst, n * 2,
                       cudaMemcpyDeviceToDevice, st));
    done += n;
  }
  CK(cudaStreamSynchronize(st));
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
