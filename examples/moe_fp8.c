/*
 * One MoE layer in fp8 with MKX_Moe_layer_scaled, checking its own result.
 *
 * The layout of DeepSeek's fp8 checkpoints: each rank holds its tokens X in
 * e4m3 with one scale per token and 128 columns, and E / p experts whose
 * weights are stored with the output features as rows (MKX_TRANS: W1
 * [E/p][2 ffn][hidden], gate rows then up rows; W2 [E/p][hidden][ffn]),
 * each with one scale per 128 x 128 block.  Every token goes to its top-k
 * experts, wherever they live:
 *     out[t] = sum_j w[t][j] * W2_e (silu(gate) * up)(W1_e x[t]),  e = ids[t][j]
 * Each rank recomputes its tokens' out in double from the same e4m3 bytes
 * and scales, and compares.
 *
 * usage: moe_fp8 [-t tokens_per_rank] [-d hidden] [-f ffn] [-k topk]
 * Runs on the GPU when MKX picks one for the rank (the fp8 kernels with
 * option moe_fp8=yes, else staged), else on the host path.
 */
#define _POSIX_C_SOURCE 200809L /* getopt */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "mkx.h"
#ifdef MKX_EXAMPLE_CUDA
#include <cuda_runtime.h>
#endif

#define BS MKX_SCALE_BLOCK_SIZE
#define E4M3_MAX 448.0

/* A value in [-1, 1) named by (which, a, b, c): the same on every rank. */
static double value(int which, long a, long b, long c) {
  uint64_t x = (uint64_t)which * 0x9e3779b97f4a7c15ull ^ (uint64_t)a << 40 ^
               (uint64_t)b << 20 ^ (uint64_t)c;
  x ^= x >> 31, x *= 0xbf58476d1ce4e5b9ull, x ^= x >> 29;
  x *= 0x94d049bb133111ebull, x ^= x >> 32;
  return (double)(x >> 11) * 0x1.0p-53 * 2.0 - 1.0;
}

/* v (|v| <= 448) to the nearest e4m3 value, ties to even. */
static uint8_t to_e4m3(double v) {
  const uint8_t s = v < 0 ? 0x80 : 0;
  double a = fabs(v) > E4M3_MAX ? E4M3_MAX : fabs(v);
  if (a < 0x1p-6) return s | (uint8_t)nearbyint(a * 512); /* 2^-9 steps */
  int e;
  const double f = frexp(a, &e); /* a = f 2^e, f in [0.5, 1) */
  long m = lrint((2 * f - 1) * 8), ef = e - 1 + 7;
  if (m == 8) m = 0, ef++;
  return s | (uint8_t)(ef << 3 | m);
}

static double from_e4m3(uint8_t b) {
  const int ef = b >> 3 & 15, m = b & 7;
  const double v = ef ? ldexp(1 + m / 8.0, ef - 7) : ldexp(m / 8.0, -6);
  return b & 0x80 ? -v : v;
}

static float bf16_to_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

#define CHECK(call)                                                            \
  do {                                                                         \
    int rc_ = (call);                                                          \
    if (rc_ != MKX_SUCCESS) {                                                  \
      fprintf(stderr, "moe_fp8: %s failed: %s: %s\n", #call,                   \
              MKX_Error_string(rc_), MKX_Get_last_error());                    \
      MPI_Abort(MPI_COMM_WORLD, 1);                                            \
    }                                                                          \
  } while (0)

/* A rows x cols matrix (element (i, j) = v(i, j) of one expert) as e4m3
 * with one scale per 128 x 128 block ([ceil(rows/128)][ceil(cols/128)]:
 * with the output features as rows, the layout MKX_TRANS reads). */
static void quantize(long rows, long cols, double (*v)(long, long, long),
                     long e, uint8_t *q, float *s) {
  const long rb = (rows + BS - 1) / BS, cb = (cols + BS - 1) / BS;
  for (long bi = 0; bi < rb; bi++)
    for (long bj = 0; bj < cb; bj++) {
      double amax = 0;
      for (long i = bi * BS; i < rows && i < (bi + 1) * BS; i++)
        for (long j = bj * BS; j < cols && j < (bj + 1) * BS; j++)
          amax = fmax(amax, fabs(v(e, i, j)));
      const float sc = amax > 0 ? (float)(amax / E4M3_MAX) : 1.0f;
      s[bi * cb + bj] = sc;
      for (long i = bi * BS; i < rows && i < (bi + 1) * BS; i++)
        for (long j = bj * BS; j < cols && j < (bj + 1) * BS; j++)
          q[i * cols + j] = to_e4m3(v(e, i, j) / sc);
    }
}

/* A magnitude for element (i, j) of matrix e that changes from one 128 x
 * 128 block to the next (and from token to token), so that a scale applied
 * to the wrong block shows. */
static double spread(long e, long i, long j) {
  return (double)(1 + (e + i / BS + 2 * (j / BS)) % 4);
}

static long H, F; /* hidden, ffn */
/* The weights as values: W1 row n (gate rows, then up rows), W2 row h. */
static double w1_value(long e, long n, long k) {
  return value(2, e, n, k) * spread(e, n, k) / sqrt((double)H);
}
static double w2_value(long e, long h, long f) {
  return value(3, e, h, f) * spread(e, h, f) / sqrt((double)F);
}
/* Token t's element j on this rank. */
static double x_value(long r, long t, long j) {
  return value(1, r, t, j) * spread(r, t * BS, j);
}

/* Buffers live where MKX runs: device memory on a GPU, host otherwise. */
#ifdef MKX_EXAMPLE_CUDA
static int on_gpu;
#endif

static void *mkx_buffer(MKX_Comm comm, const void *init, size_t bytes) {
  void *p;
  CHECK(MKX_Alloc_mem(comm, bytes ? bytes : 1, &p));
  if (!init || !bytes) return p;
#ifdef MKX_EXAMPLE_CUDA
  if (on_gpu) {
    if (cudaMemcpy(p, init, bytes, cudaMemcpyHostToDevice)) {
      fprintf(stderr, "moe_fp8: cudaMemcpy failed\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
  }
#endif
  memcpy(p, init, bytes);
  return p;
}

static void fetch(void *dst, const void *src, size_t bytes) {
#ifdef MKX_EXAMPLE_CUDA
  if (on_gpu) {
    if (cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost)) {
      fprintf(stderr, "moe_fp8: cudaMemcpy failed\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return;
  }
#endif
  memcpy(dst, src, bytes);
}

/* The dequantized W of expert e (rows x cols, block scales s) into w. */
static void dequantize(long rows, long cols, double (*v)(long, long, long),
                       long e, double *w) {
  const long cb = (cols + BS - 1) / BS;
  uint8_t *q = malloc((size_t)(rows * cols));
  float *s = malloc(sizeof(float) * (size_t)((rows + BS - 1) / BS * cb));
  quantize(rows, cols, v, e, q, s);
  for (long i = 0; i < rows; i++)
    for (long j = 0; j < cols; j++)
      w[i * cols + j] = from_e4m3(q[i * cols + j]) * s[i / BS * cb + j / BS];
  free(q), free(s);
}

int main(int argc, char **argv) {
  long T = 32, K = 2;
  int rank, p, opt;
  H = 256, F = 256;
  MPI_Init(&argc, &argv);
  while ((opt = getopt(argc, argv, "t:d:f:k:")) != -1) {
    const long v = atol(optarg);
    if (v <= 0) opt = '?';
    if (opt == 't')
      T = v;
    else if (opt == 'd')
      H = v;
    else if (opt == 'f')
      F = v;
    else if (opt == 'k')
      K = v;
    else {
      fprintf(stderr, "usage: %s [-t tokens] [-d hidden] [-f ffn] [-k topk]\n",
              argv[0]);
      MPI_Finalize();
      return 2;
    }
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  const long El = 4, E = El * p; /* experts: 4 a rank */
  if (K > E) K = E;
  const long kb = (H + BS - 1) / BS;

  MKX_Comm comm;
  int dev;
  CHECK(MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL, &comm));
  CHECK(MKX_Comm_device(comm, &dev));
#ifdef MKX_EXAMPLE_CUDA
  on_gpu = dev >= 0;
#else
  if (dev >= 0) { /* built without CUDA: host buffers, so the host path */
    MPI_Info info;
    CHECK(MKX_Comm_free(&comm));
    if (MPI_Info_create(&info) != MPI_SUCCESS ||
        MPI_Info_set(info, "mkx_path", "host") != MPI_SUCCESS) {
      fprintf(stderr, "moe_fp8: MPI_Info failed\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    CHECK(MKX_Comm_create(MPI_COMM_WORLD, info, &comm));
    MPI_Info_free(&info);
  }
#endif

  /* This rank's tokens in e4m3, one scale per token and 128 columns. */
  uint8_t *xq = malloc((size_t)(T * H));
  float *xs = malloc(sizeof(float) * (size_t)(T * kb));
  for (long t = 0; t < T; t++)
    for (long b = 0; b < kb; b++) {
      double amax = 0;
      for (long j = b * BS; j < H && j < (b + 1) * BS; j++)
        amax = fmax(amax, fabs(x_value(rank, t, j)));
      xs[t * kb + b] = amax > 0 ? (float)(amax / E4M3_MAX) : 1.0f;
      for (long j = b * BS; j < H && j < (b + 1) * BS; j++)
        xq[t * H + j] = to_e4m3(x_value(rank, t, j) / xs[t * kb + b]);
    }
  /* Routing: K distinct experts a token, gate weights summing to 1. */
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)(T * K));
  float *gw = malloc(sizeof(float) * (size_t)(T * K));
  for (long t = 0; t < T; t++) {
    const long first = (long)((value(4, rank, t, 0) + 1) / 2 * (double)E);
    double sum = 0;
    for (long j = 0; j < K; j++) {
      ids[t * K + j] = (int32_t)((first + j * (E / K > 0 ? E / K : 1)) % E);
      gw[t * K + j] = (float)(1.5 + value(5, rank, t, j));
      sum += gw[t * K + j];
    }
    for (long j = 0; j < K; j++) gw[t * K + j] = (float)(gw[t * K + j] / sum);
  }
  /* This rank's experts' weights, and their block scales. */
  const long n1 = 2 * F, s1 = (n1 + BS - 1) / BS * kb,
             s2 = kb * ((F + BS - 1) / BS);
  uint8_t *w1 = malloc((size_t)(El * n1 * H)),
          *w2 = malloc((size_t)(El * H * F));
  float *w1s = malloc(sizeof(float) * (size_t)(El * s1)),
        *w2s = malloc(sizeof(float) * (size_t)(El * s2));
  for (long e = 0; e < El; e++) {
    quantize(n1, H, w1_value, rank * El + e, w1 + e * n1 * H, w1s + e * s1);
    quantize(H, F, w2_value, rank * El + e, w2 + e * H * F, w2s + e * s2);
  }

  void *X = mkx_buffer(comm, xq, (size_t)(T * H)),
       *Xs = mkx_buffer(comm, xs, sizeof(float) * (size_t)(T * kb)),
       *Ids = mkx_buffer(comm, ids, sizeof(int32_t) * (size_t)(T * K)),
       *Gw = mkx_buffer(comm, gw, sizeof(float) * (size_t)(T * K)),
       *W1 = mkx_buffer(comm, w1, (size_t)(El * n1 * H)),
       *W1s = mkx_buffer(comm, w1s, sizeof(float) * (size_t)(El * s1)),
       *W2 = mkx_buffer(comm, w2, (size_t)(El * H * F)),
       *W2s = mkx_buffer(comm, w2s, sizeof(float) * (size_t)(El * s2)),
       *Out = mkx_buffer(comm, NULL, sizeof(uint16_t) * (size_t)(T * H));
  const MKX_Scales sc = {MKX_SCALE_BLOCK, Xs, W1s, NULL},
                   sc2 = {MKX_SCALE_BLOCK, NULL, W2s, NULL};
  const double t0 = MPI_Wtime();
  CHECK(MKX_Moe_layer_scaled(X, T, H, Ids, Gw, K, E, W1, W2, F, MKX_TRANS, Out,
                             MKX_FP8_E4M3, MKX_BF16, &sc, &sc2, comm, NULL));
#ifdef MKX_EXAMPLE_CUDA
  if (on_gpu && cudaDeviceSynchronize()) {
    fprintf(stderr, "moe_fp8: cudaDeviceSynchronize failed\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
#endif
  const double seconds = MPI_Wtime() - t0;
  uint16_t *out = malloc(sizeof(uint16_t) * (size_t)(T * H));
  fetch(out, Out, sizeof(uint16_t) * (size_t)(T * H));
  const char *path = NULL;
  int capturable, ctas;
  CHECK(MKX_Comm_get_last_path(comm, &path, &capturable, &ctas));

  /* Reference for this rank's tokens, in double from the same bytes. */
  double *w1d = malloc(sizeof(double) * (size_t)(n1 * H)),
         *w2d = malloc(sizeof(double) * (size_t)(H * F)),
         *ref = calloc((size_t)(T * H), sizeof(double)),
         *h = malloc(sizeof(double) * (size_t)n1),
         *act = malloc(sizeof(double) * (size_t)F);
  for (long e = 0; e < E; e++) {
    dequantize(n1, H, w1_value, e, w1d);
    dequantize(H, F, w2_value, e, w2d);
    for (long t = 0; t < T; t++)
      for (long j = 0; j < K; j++) {
        if (ids[t * K + j] != e) continue;
        for (long n = 0; n < n1; n++) {
          double s = 0;
          for (long k = 0; k < H; k++)
            s +=
                from_e4m3(xq[t * H + k]) * xs[t * kb + k / BS] * w1d[n * H + k];
          h[n] = s;
        }
        for (long f = 0; f < F; f++)
          act[f] = h[f] / (1 + exp(-h[f])) * h[F + f];
        for (long c = 0; c < H; c++) {
          double s = 0;
          for (long f = 0; f < F; f++) s += act[f] * w2d[c * F + f];
          ref[t * H + c] += gw[t * K + j] * s;
        }
      }
  }
  double err = 0, norm = 0;
  for (long i = 0; i < T * H; i++) {
    const double d = bf16_to_float(out[i]) - ref[i];
    err += d * d, norm += ref[i] * ref[i];
  }
  /* bound: out rounded to bf16 (host and staged paths: fp32 steps), and on
   * the GPU's fp8 layer the activation rounded to e4m3 too (mkx.h: a
   * relative 2^-4 of each) */
  const int fp32_steps =
      path && (!strcmp(path, "host") || !strcmp(path, "staged"));
  const double rel = sqrt(err / (norm > 0 ? norm : 1)),
               bound = fp32_steps ? 1e-2 : 8e-2;
  double worst = 0;
  MPI_Allreduce(&rel, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0)
    printf(
        "moe_fp8: %d ranks (%s path), %ld tokens a rank, hidden %ld, ffn %ld, "
        "%ld experts, top %ld: %.3f ms, max rel error %.2e: %s\n",
        p, path ? path : "?", T, H, F, E, K, seconds * 1e3, worst,
        worst < bound ? "OK" : "FAILED");

  MKX_Free_mem(comm, X), MKX_Free_mem(comm, Xs), MKX_Free_mem(comm, Ids);
  MKX_Free_mem(comm, Gw), MKX_Free_mem(comm, W1), MKX_Free_mem(comm, W1s);
  MKX_Free_mem(comm, W2), MKX_Free_mem(comm, W2s), MKX_Free_mem(comm, Out);
  CHECK(MKX_Comm_free(&comm));
  free(xq), free(xs), free(ids), free(gw), free(w1), free(w2), free(w1s);
  free(w2s), free(out), free(w1d), free(w2d), free(ref), free(h), free(act);
  MPI_Finalize();
  return worst < bound ? 0 : 1;
}
