/*
 * One tensor-parallel MLP step with MKX, checking its own result.
 *
 * Each of p ranks holds m rows of the activations X (sequence parallel),
 * a column block of W1 and the matching row block of W2 (Megatron-style):
 *     H_r = AllGather(X) x W1_r           MKX_Allgather_gemm
 *     G_r = relu(H_r)
 *     Y_r = rows r of sum_q G_q x W2_q    MKX_Gemm_reduce_scatter
 * so Y (row blocks over ranks) = relu(X W1) W2.  Data are bf16; each rank
 * recomputes its rows of Y in double and compares.
 *
 * usage: tp_mlp [-m rows_per_rank] [-d hidden] [-f ffn] [-i iterations]
 * Runs on the GPU when MKX picks one for the rank, else on the host path.
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

typedef uint16_t bf16;

static bf16 to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1); /* round to nearest even */
  return (bf16)(u >> 16);
}

static double from_bf16(bf16 h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Element (i, j) of global matrix `which`: the same on every rank. */
static float value(int which, long i, long j) {
  uint64_t x =
      (uint64_t)which * 0x9e3779b97f4a7c15ull ^ (uint64_t)i << 32 ^ (uint64_t)j;
  x ^= x >> 31, x *= 0xbf58476d1ce4e5b9ull, x ^= x >> 29;
  return (float)((x >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

#define CHECK(call)                                                            \
  do {                                                                         \
    int rc_ = (call);                                                          \
    if (rc_ != MKX_SUCCESS) {                                                  \
      fprintf(stderr, "tp_mlp: %s failed: %s: %s\n", #call,                    \
              MKX_Error_string(rc_), MKX_Get_last_error());                    \
      MPI_Abort(MPI_COMM_WORLD, 1);                                            \
    }                                                                          \
  } while (0)

/* Buffers live where MKX runs: device memory on a GPU, host otherwise. */
static int on_gpu;

static void copy(void *dst, const void *src, size_t bytes, int to_mkx) {
#ifdef MKX_EXAMPLE_CUDA
  if (on_gpu) {
    if (cudaMemcpy(dst, src, bytes,
                   to_mkx ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost)) {
      fprintf(stderr, "tp_mlp: cudaMemcpy failed\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return;
  }
#endif
  (void)to_mkx;
  memcpy(dst, src, bytes);
}

static void *mkx_buffer(MKX_Comm comm, const bf16 *init, size_t n) {
  void *p;
  CHECK(MKX_Alloc_mem(comm, n * sizeof(bf16), &p));
  if (init) copy(p, init, n * sizeof(bf16), 1);
  return p;
}

int main(int argc, char **argv) {
  long m = 128, d = 256, f = 1024, iters = 3;
  int rank, p, opt;
  MPI_Init(&argc, &argv);
  while ((opt = getopt(argc, argv, "m:d:f:i:")) != -1) {
    long v = atol(optarg);
    if (v <= 0) opt = '?';
    switch (opt) {
      case 'm':
        m = v;
        break;
      case 'd':
        d = v;
        break;
      case 'f':
        f = v;
        break;
      case 'i':
        iters = v;
        break;
      default:
        fprintf(stderr, "usage: %s [-m rows] [-d hidden] [-f ffn] [-i iters]\n",
                argv[0]);
        MPI_Finalize();
        return 2;
    }
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  if (f % p) f += p - f % p; /* ffn splits evenly over ranks */
  long fl = f / p, M = m * p;

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
      fprintf(stderr, "tp_mlp: MPI_Info failed\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    CHECK(MKX_Comm_create(MPI_COMM_WORLD, info, &comm));
    MPI_Info_free(&info);
  }
#endif

  /* This rank's shards, row-major bf16. */
  bf16 *x = malloc(sizeof(bf16) * m * d), *w1 = malloc(sizeof(bf16) * d * fl),
       *w2 = malloc(sizeof(bf16) * fl * d), *h = malloc(sizeof(bf16) * M * fl),
       *y = malloc(sizeof(bf16) * m * d);
  for (long i = 0; i < m; i++)
    for (long j = 0; j < d; j++)
      x[i * d + j] = to_bf16(value(1, rank * m + i, j));
  for (long i = 0; i < d; i++)
    for (long j = 0; j < fl; j++)
      w1[i * fl + j] = to_bf16(value(2, i, rank * fl + j) / sqrtf(d));
  for (long i = 0; i < fl; i++)
    for (long j = 0; j < d; j++)
      w2[i * d + j] = to_bf16(value(3, rank * fl + i, j) / sqrtf(f));
  void *X = mkx_buffer(comm, x, m * d), *W1 = mkx_buffer(comm, w1, d * fl),
       *W2 = mkx_buffer(comm, w2, fl * d), *H = mkx_buffer(comm, NULL, M * fl),
       *Y = mkx_buffer(comm, NULL, m * d);

  double t0 = MPI_Wtime();
  for (long it = 0; it < iters; it++) {
    CHECK(MKX_Allgather_gemm(X, m, d, d, W1, fl, fl, MKX_NO_TRANS, H, fl, NULL,
                             0, MKX_BF16, MKX_BF16, MKX_ROW_MAJOR, comm, NULL));
    copy(h, H, sizeof(bf16) * M * fl, 0);
    for (long i = 0; i < M * fl; i++)
      if (from_bf16(h[i]) < 0) h[i] = 0; /* relu */
    copy(H, h, sizeof(bf16) * M * fl, 1);
    CHECK(MKX_Gemm_reduce_scatter(H, M, fl, fl, W2, d, d, MKX_NO_TRANS, Y, d,
                                  MKX_BF16, MKX_BF16, MKX_ROW_MAJOR, comm,
                                  NULL));
  }
  double seconds = (MPI_Wtime() - t0) / iters;
  copy(y, Y, sizeof(bf16) * m * d, 0);

  /* Reference for this rank's rows of Y, in double from the bf16 inputs. */
  double err = 0, ref_norm = 0;
  double *hrow = malloc(sizeof(double) * f);
  for (long i = 0; i < m; i++) {
    long gi = rank * m + i;
    for (long j = 0; j < f; j++) {
      double s = 0;
      for (long k = 0; k < d; k++)
        s += from_bf16(to_bf16(value(1, gi, k))) *
             from_bf16(to_bf16(value(2, k, j) / sqrtf(d)));
      hrow[j] = s > 0 ? from_bf16(to_bf16((float)s)) : 0;
    }
    for (long j = 0; j < d; j++) {
      double s = 0;
      for (long k = 0; k < f; k++)
        s += hrow[k] * from_bf16(to_bf16(value(3, k, j) / sqrtf(f)));
      double e = from_bf16(y[i * d + j]) - s;
      err += e * e;
      ref_norm += s * s;
    }
  }
  double rel = sqrt(err / (ref_norm > 0 ? ref_norm : 1)), worst = 0;
  MPI_Allreduce(&rel, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  double flops = 2.0 * M * d * f * 2; /* two GEMMs over all ranks */
  if (rank == 0)
    printf(
        "tp_mlp: %d ranks (%s), tokens %ld, hidden %ld, ffn %ld: "
        "%.3f ms/step, %.2f GFLOP/s, max rel error %.2e: %s\n",
        p, on_gpu ? "GPU" : "host path", M, d, f, seconds * 1e3,
        flops / seconds * 1e-9, worst, worst < 2e-2 ? "OK" : "FAILED");

  MKX_Free_mem(comm, X), MKX_Free_mem(comm, W1), MKX_Free_mem(comm, W2);
  MKX_Free_mem(comm, H), MKX_Free_mem(comm, Y);
  CHECK(MKX_Comm_free(&comm));
  free(x), free(w1), free(w2), free(h), free(y), free(hrow);
  MPI_Finalize();
  return worst < 2e-2 ? 0 : 1;
}
