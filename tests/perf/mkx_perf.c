/*
 * mkx_perf: MKX benchmark tool.  Subcommands are listed in a table {name, fn, help}.
 *
 *   mkx_perf gemm [--out FILE] [--reps N] [--warmup N] [--layout k|n] [--tile 0|1|2|3]
 *                 [--ctas N] [--prewarm-ms MS] [--cool-ms MS] [--shape MxNxK]...
 *                 [--dtype bf16|fp8]
 *     Environment MKX_GEMM_EPI=direct selects the engine's direct-store epilogue.
 *     Times the MKX Hopper GEMM engine and cuBLAS (bf16 in, bf16 out, fp32 compute) in the same
 *     run, interleaved launch by launch, with CUDA events; prints the median TFLOP/s of each and
 *     the ratio.  --dtype fp8: e4m3 operands with per-tensor scales (B K-major), the engine's
 *     fp8 GEMM against cuBLASLt's (tests/perf/perf_lt.c); --tile 3 runs its tiles in clusters
 *     of 2 (gemm_engine.h); its tile column gives the CTAs launched too.  --out appends the
 *     table as markdown
 *     (date UTC, GPU name).
 *
 *   mpirun -np P mkx_perf tp [--op ag|rs|ar|all] [--shape MxNxK]... [--full] [--small] [--reps N]
 *                          [--out FILE] [--overlap auto|yes|no]
 *                          [--vnode G --hier host|gpu|nvlink [--net tcp|shm]]
 *                          [--versus KEY=VALUE] [--no-nccl] [--one-rank] [--graph] [--host-times]
 *     The fused tensor-parallel calls against cuBLAS + NCCL; without NCCL where ranks share a GPU
 *     (MPS) or with --no-nccl; --one-rank: also the same call on rank 0 alone; --graph: also its
 *     start replayed from a CUDA graph (tests/perf/perf_tp.c).
 *
 *   mpirun -np P mkx_perf attn [--shapes B,S,HQ,HKV,D ...] [--small] [--reps N] [--warmup N]
 *                            [--versus FILE] [--out FILE.md] [--no-lse] [--graph]
 *     MKX_Ring_attention on device buffers, causal and not: TFLOP/s of the whole attention,
 *     slowest rank; --versus: beside PyTorch SDPA's lines (tests/perf/torch_sdpa.py) on 1 rank
 *     (tests/perf/perf_attn.c).
 *
 *   mpirun -np P mkx_perf moe [--shapes T,H,E,K,F ...] [--small] [--reps N] [--warmup N]
 *                           [--versus FILE] [--out FILE.md] [--skew] [--graph]
 *     MKX_Moe_layer and MKX_Moe_dispatch_gemm on device buffers: ms and TFLOP/s of the expert
 *     GEMMs, slowest rank; --versus: beside the PyTorch chain around torch._grouped_mm
 *     (tests/perf/torch_moe.py) on 1 rank (tests/perf/perf_moe.c).
 *
 *   mpirun -np P mkx_perf net --vnode G [--net tcp|shm] [--bytes B]... [--reps N] [--out FILE]
 *     The network alone between virtual nodes: MKX's several-node exchange on host buffers
 *     (no GPU needed), ms, GB/s and the proxy thread's CPU (tests/perf/perf_net.c).
 *
 *   mpirun -np P mkx_perf tune --vnode G [--net tcp|shm] [--hier proxy|gpu] [--op ag|rs|ar|all]
 *                            [--shape MxNxK]... [--ctas N,N,...] [--runs N] [--reps N]
 *                            [--cache PATH] [--out FILE] [--plot FILE.svg]
 *     A role's CTAs pinned over a sweep, today's rule and the adaptive split (tune=adapt) of the
 *     fused tensor-parallel calls, as ratios to the best pinned count (tests/perf/perf_tune.c).
 *
 *   mpirun -np P mkx_perf tiles [--shape MxNxK]... [--chunk ROWS] [--reps N] [--out FILE]
 *     Data tiles against the fused calls and the serial chain: AllGather feeding cuBLAS, and
 *     cuBLAS's chunks feeding ReduceScatter, on one node (tests/perf/perf_tiles.c).
 */
#define _POSIX_C_SOURCE 200809L
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_check.h"
#include "gemm_engine.h"
#include "perf_lt.h"
#include "perf_util.h"

typedef struct {
  int64_t m, n, k;
} shape_t;

static const char *tile_name(int t) {
  return t == MKX_GEMM_TILE_128x256        ? "128x256"
         : t == MKX_GEMM_TILE_128x128_PAIR ? "2x128x128"
                                           : "128x128";
}

typedef struct {
  char s[32];
} tile_label;

/* The tile, and where known (fp8) the CTAs launched: a grid short of
 * the SMs (clusters that do not fit) shows there. */
static tile_label label_of(int tile, int grid) {
  tile_label l;
  if (grid > 0)
    snprintf(l.s, sizeof l.s, "%s, %d CTAs", tile_name(tile), grid);
  else
    snprintf(l.s, sizeof l.s, "%s", tile_name(tile));
  return l;
}

static int cmd_gemm(int argc, char **argv) {
  const char *out = NULL;
  int reps = 30, warmup = 5, bkm = 1, tile = 0, ctas = 0, prewarm_ms = 1500,
      cool_ms = 0, fp8 = 0;
  shape_t shapes[64];
  int ns = 0;
  for (int i = 0; i < argc; ++i) {
    if (!strcmp(argv[i], "--out") && i + 1 < argc)
      out = argv[++i];
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
      warmup = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--prewarm-ms") && i + 1 < argc)
      prewarm_ms = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--cool-ms") && i + 1 < argc)
      cool_ms = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--layout") && i + 1 < argc)
      bkm = argv[++i][0] != 'n';
    else if (!strcmp(argv[i], "--tile") && i + 1 < argc)
      tile = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--ctas") && i + 1 < argc)
      ctas = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--dtype") && i + 1 < argc)
      fp8 = !strcmp(argv[++i], "fp8");
    else if (!strcmp(argv[i], "--shape") && i + 1 < argc && ns < 64) {
      long long m, n, k;
      if (sscanf(argv[++i], "%lldx%lldx%lld", &m, &n, &k) != 3) {
        fprintf(stderr, "bad --shape\n");
        return 2;
      }
      shapes[ns].m = m;
      shapes[ns].n = n;
      shapes[ns].k = k;
      ++ns;
    } else {
      fprintf(stderr, "gemm: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (reps < 1) reps = 1;
  if (fp8 && !bkm) {
    fprintf(stderr, "gemm: --dtype fp8 takes B K-major only (--layout k)\n");
    return 2;
  }
  if (ns == 0) {
    static const int64_t nk[3][2] = {
        {8192, 8192}, {28672, 8192}, {8192, 28672}};
    static const int64_t ms[3] = {4096, 8192, 16384};
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b) {
        shapes[ns].m = ms[a];
        shapes[ns].n = nk[b][0];
        shapes[ns].k = nk[b][1];
        ++ns;
      }
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev <= 0) {
    fprintf(stderr, "no CUDA device\n");
    return 77;
  }
  struct cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  cublasHandle_t blas;
  CB(cublasCreate(&blas));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  CB(cublasSetStream(blas, st));
  size_t ws_bytes = (size_t)64 << 20; /* give cuBLAS a generous workspace */
  void *ws;
  CK(cudaMalloc(&ws, ws_bytes));
  CB(cublasSetWorkspace(blas, ws, ws_bytes));

  int64_t maxa = 0, maxb = 0, maxc = 0;
  for (int i = 0; i < ns; ++i) {
    if (shapes[i].m * shapes[i].k > maxa) maxa = shapes[i].m * shapes[i].k;
    if (shapes[i].n * shapes[i].k > maxb) maxb = shapes[i].n * shapes[i].k;
    if (shapes[i].m * shapes[i].n > maxc) maxc = shapes[i].m * shapes[i].n;
  }
  void *dA, *dB, *dC, *dC2;
  /* fp8: the tensors' scales, 1 each, SCALE_GAP floats apart, as
   * mkx_perf tp's separate allocations are: with the second 4 bytes after
   * the first, cuBLASLt's fp8 matmul returned NOT_SUPPORTED */
  enum { SCALE_GAP = 64 };
  float *dscale;
  const size_t esz = fp8 ? 1 : 2;
  CK(cudaMalloc(&dA, (size_t)maxa * esz));
  CK(cudaMalloc(&dB, (size_t)maxb * esz));
  CK(cudaMalloc(&dC, (size_t)maxc * 2));
  CK(cudaMalloc(&dC2, (size_t)maxc * 2));
  CK(cudaMalloc((void **)&dscale, 2 * SCALE_GAP * sizeof(float)));
  const float one_f = 1.f;
  CK(cudaMemcpy(dscale, &one_f, sizeof one_f, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dscale + SCALE_GAP, &one_f, sizeof one_f,
                cudaMemcpyHostToDevice));
  const mkx_gemm_scales sc = {
      .layout = MKX_GEMM_SCALE_TENSOR, .a = dscale, .b = dscale + SCALE_GAP};
  if (fp8) {
    perf_fill_e4m3(dA, (size_t)maxa, 1);
    perf_fill_e4m3(dB, (size_t)maxb, 2);
  } else {
    perf_fill_bf16(dA, (size_t)maxa, 1, 0);
    perf_fill_bf16(dB, (size_t)maxb, 2, 0);
  }
  const char *types =
      fp8 ? "e4m3 x e4m3 (per-tensor scales) -> bf16" : "bf16 x bf16 -> bf16";
  const char *versus = fp8 ? "cuBLASLt" : "cuBLAS";

  cudaEvent_t *ev =
      (cudaEvent_t *)malloc(sizeof(cudaEvent_t) * (size_t)(4 * reps));
  float *tm = (float *)malloc(sizeof(float) * (size_t)reps),
        *tb = (float *)malloc(sizeof(float) * (size_t)reps);
  double *res_m = (double *)malloc(sizeof(double) * (size_t)ns),
         *res_b = (double *)malloc(sizeof(double) * (size_t)ns);
  tile_label *res_tile = (tile_label *)malloc(sizeof(tile_label) * (size_t)ns);
  for (int i = 0; i < 4 * reps; ++i) CK(cudaEventCreate(&ev[i]));

  printf(
      "mkx_perf gemm on %s (%d SMs): %s, fp32 accumulate, B "
      "%s, median of %d, %s\n",
      prop.name, prop.multiProcessorCount, types,
      bkm ? "K-major (n x k)" : "N-major (k x n)", reps,
      cool_ms > 0 ? "idle before each launch (burst)"
                  : "back to back (sustained)");
  printf("%7s %7s %7s  %10s %10s %7s %20s\n", "M", "N", "K", "MKX TF/s", versus,
         "ratio", "tile");
  const float one = 1.0f, zero = 0.0f;
  for (int si = 0; si < ns; ++si) {
    const int64_t m = shapes[si].m, n = shapes[si].n, k = shapes[si].k;
    mkx_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.m = m;
    d.n = n;
    d.k = k;
    d.a = dA;
    d.lda = k;
    d.b = dB;
    d.b_kmajor = bkm;
    d.ldb = bkm ? k : n;
    d.c = dC;
    d.ldc = n;
    d.ab_type = fp8 ? MKX_GEMM_E4M3 : MKX_GEMM_BF16;
    d.c_type = MKX_GEMM_BF16;
    d.num_ctas = ctas;
    d.tile_override = tile;
    const char *why;
    if (fp8 ? !mkx_gemm_fp8_supported(&d, &sc, &why)
            : !mkx_gemm_supported(&d, &why)) {
      fprintf(stderr, "unsupported: %s\n", why);
      return 1;
    }
    int grid = 0;
    if (fp8) {
      const int grc = mkx_gemm_fp8_grid(&d, &sc, &grid);
      if (grc) {
        fprintf(stderr, "mkx_gemm_fp8_grid: %d\n", grc);
        return 1;
      }
    }
    res_tile[si] =
        label_of(fp8 ? mkx_gemm_fp8_pick_tile(&d, ctas)
                     : mkx_gemm_pick_tile(
                           &d, ctas > 0 ? ctas : prop.multiProcessorCount),
                 grid);
    perf_lt *lt = NULL;
    if (fp8 &&
        !(lt = perf_lt_make(m, n, k, dA, dB, dC2, dscale, dscale + SCALE_GAP)))
      return 1;
#define RUN_MKX()                                                              \
  do {                                                                         \
    int rc_ = fp8 ? mkx_gemm_run_fp8(&d, &sc, st) : mkx_gemm_run(&d, st);      \
    if (rc_) {                                                                 \
      fprintf(stderr, "mkx_gemm_run: %d\n", rc_);                              \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)
#define RUN_BLAS()                                                             \
  do {                                                                         \
    if (fp8) {                                                                 \
      const int lrc_ = perf_lt_run(lt, st);                                    \
      if (lrc_) {                                                              \
        fprintf(stderr, "cublasLtMatmul: status %d\n", lrc_);                  \
        exit(1);                                                               \
      }                                                                        \
    } else {                                                                   \
      CB(cublasGemmEx(blas, bkm ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N,      \
                      (int)n, (int)m, (int)k, &one, dB, CUDA_R_16BF,           \
                      (int)d.ldb, dA, CUDA_R_16BF, (int)k, &zero, dC2,         \
                      CUDA_R_16BF, (int)n, CUBLAS_COMPUTE_32F,                 \
                      CUBLAS_GEMM_DEFAULT));                                   \
    }                                                                          \
  } while (0)
    if (si == 0 &&
        prewarm_ms > 0) { /* bring clocks and power to steady state first */
      struct timespec t0, t1;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      for (;;) {
        for (int w = 0; w < 4; ++w) {
          RUN_MKX();
          RUN_BLAS();
        }
        CK(cudaStreamSynchronize(st));
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if ((t1.tv_sec - t0.tv_sec) * 1000.0 + (t1.tv_nsec - t0.tv_nsec) / 1e6 >
            prewarm_ms)
          break;
      }
    }
    for (int w = 0; w < warmup; ++w) {
      RUN_MKX();
      RUN_BLAS();
    }
    CK(cudaStreamSynchronize(st));
    /* rep r: events 4r..4r+3 = start/stop of the first and of the second launch; the order of
     * MKX and cuBLAS alternates.  With --cool-ms the GPU idles before every timed launch (burst
     * conditions, clocks not power-capped); without it the launches run back to back. */
    for (int r = 0; r < reps; ++r) {
      for (int h = 0; h < 2; ++h) {
        const int is_mkx = (h == 0) == ((r & 1) == 0);
        if (cool_ms > 0) {
          CK(cudaStreamSynchronize(st));
          struct timespec ts = {cool_ms / 1000,
                                (long)(cool_ms % 1000) * 1000000L};
          nanosleep(&ts, NULL);
        }
        CK(cudaEventRecord(ev[4 * r + 2 * h], st));
        if (is_mkx)
          RUN_MKX();
        else
          RUN_BLAS();
        CK(cudaEventRecord(ev[4 * r + 2 * h + 1], st));
      }
    }
    CK(cudaStreamSynchronize(st));
    CK(cudaGetLastError());
    perf_lt_free(lt);
    for (int r = 0; r < reps; ++r) {
      float t1, t2;
      CK(cudaEventElapsedTime(&t1, ev[4 * r], ev[4 * r + 1]));
      CK(cudaEventElapsedTime(&t2, ev[4 * r + 2], ev[4 * r + 3]));
      if (r & 1) {
        tb[r] = t1;
        tm[r] = t2;
      } else {
        tm[r] = t1;
        tb[r] = t2;
      }
    }
    const double flop = 2.0 * (double)m * (double)n * (double)k;
    res_m[si] = flop / (perf_median(tm, reps) * 1e-3) / 1e12;
    res_b[si] = flop / (perf_median(tb, reps) * 1e-3) / 1e12;
    printf("%7lld %7lld %7lld  %10.1f %10.1f %7.3f %20s\n", (long long)m,
           (long long)n, (long long)k, res_m[si], res_b[si],
           res_m[si] / res_b[si], res_tile[si].s);
    fflush(stdout);
  }
  if (out) {
    FILE *f = fopen(out, "a");
    if (!f) {
      perror(out);
      return 1;
    }
    char date[64];
    time_t now = time(NULL);
    struct tm g;
    gmtime_r(&now, &g);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", &g);
    fprintf(f, "\n### mkx_perf gemm, %s, %s (%d SMs)\n\n", date, prop.name,
            prop.multiProcessorCount);
    fprintf(f,
            "%s, fp32 accumulate, A row-major, B %s, median "
            "of %d interleaved launches"
            " (CUDA events), %d warm-up, %s.\n\n",
            types, bkm ? "K-major (n x k)" : "N-major (k x n)", reps, warmup,
            cool_ms > 0 ? "GPU idle before each timed launch (burst clocks)"
                        : "launches back to back after a 1.5 s pre-warm "
                          "(sustained, power-capped clocks)");
    fprintf(f,
            "| M | N | K | MKX TFLOP/s | %s TFLOP/s | MKX / %s | MKX "
            "tile |\n",
            versus, versus);
    fprintf(f, "|---:|---:|---:|---:|---:|---:|---|\n");
    for (int si = 0; si < ns; ++si)
      fprintf(f, "| %lld | %lld | %lld | %.1f | %.1f | %.3f | %s |\n",
              (long long)shapes[si].m, (long long)shapes[si].n,
              (long long)shapes[si].k, res_m[si], res_b[si],
              res_m[si] / res_b[si], res_tile[si].s);
    fclose(f);
  }
  for (int i = 0; i < 4 * reps; ++i) CK(cudaEventDestroy(ev[i]));
  CK(cudaFree(dA));
  CK(cudaFree(dB));
  CK(cudaFree(dC));
  CK(cudaFree(dC2));
  CK(cudaFree(dscale));
  CK(cudaFree(ws));
  CB(cublasDestroy(blas));
  CK(cudaStreamDestroy(st));
  free(ev);
  free(tm);
  free(tb);
  free(res_m);
  free(res_b);
  free(res_tile);
  return 0;
}

typedef struct {
  const char *name;
  int (*fn)(int argc, char **argv);
  const char *help;
} subcommand;

int mkx_perf_tp(int argc, char **argv);    /* tests/perf/perf_tp.c */
int mkx_perf_attn(int argc, char **argv);  /* tests/perf/perf_attn.c */
int mkx_perf_moe(int argc, char **argv);   /* tests/perf/perf_moe.c */
int mkx_perf_net(int argc, char **argv);   /* tests/perf/perf_net.c */
int mkx_perf_tune(int argc, char **argv);  /* tests/perf/perf_tune.c */
int mkx_perf_tiles(int argc, char **argv); /* tests/perf/perf_tiles.c */

static const subcommand kCommands[] = {
    {"gemm", cmd_gemm,
     "time the Hopper GEMM engine against cuBLAS (bf16): [--out FILE] [--reps "
     "N] [--warmup N] "
     "[--layout k|n] [--tile 0|1|2|3] [--ctas N] [--prewarm-ms MS] [--cool-ms "
     "MS] [--shape MxNxK]..."},
    {"tp", mkx_perf_tp,
     "fused tensor-parallel calls vs cuBLAS + NCCL (under mpirun): [--op "
     "ag|rs|ar|all] "
     "[--shape MxNxK]... [--full] [--small] [--reps N] [--out FILE] [--overlap "
     "auto|yes|no] "
     "[--vnode G --hier host|gpu|nvlink [--net tcp|shm]] [--versus KEY=VALUE] "
     "[--no-nccl] "
     "[--one-rank] "
     "[--host-times] (tp --help)"},
    {"attn", mkx_perf_attn,
     "MKX_Ring_attention on device buffers, TFLOP/s (under mpirun): "
     "[--shapes B,S,HQ,HKV,D ...] [--small] [--reps N] [--warmup N] "
     "[--versus SDPA_FILE] [--out FILE] [--no-lse] (attn --help)"},
    {"moe", mkx_perf_moe,
     "MKX_Moe_layer and MKX_Moe_dispatch_gemm on device buffers, ms and "
     "TFLOP/s (under mpirun): [--shapes T,H,E,K,F ...] [--small] [--reps N] "
     "[--warmup N] [--versus TORCH_MOE_FILE] [--out FILE] (moe --help)"},
    {"net", mkx_perf_net,
     "the network alone between virtual nodes, host buffers (under mpirun): "
     "--vnode G [--net tcp|shm] [--bytes B]... [--reps N] [--out FILE] (net "
     "--help)"},
    {"tiles", mkx_perf_tiles,
     "data tiles (AllGather into cuBLAS, a GEMM into ReduceScatter) against "
     "the fused calls and the serial chain (under mpirun, one node): "
     "[--shape MxNxK]... [--chunk ROWS] [--reps N] [--warmup N] [--out FILE]"},
    {"tune", mkx_perf_tune,
     "a role's CTAs pinned over a sweep against today's rule and tune=adapt "
     "(under mpirun): --vnode G [--net tcp|shm] [--hier proxy|gpu] [--op "
     "ag|rs|ar|all] [--shape MxNxK]... [--ctas N,N,...] [--runs N] [--reps N] "
     "[--cache PATH] [--out FILE] [--plot FILE.svg] (tune --help)"},
};

static void usage(void) {
  fprintf(stderr, "usage: mkx_perf SUBCOMMAND [options]\n");
  for (size_t i = 0; i < sizeof kCommands / sizeof kCommands[0]; ++i)
    fprintf(stderr, "  %-8s %s\n", kCommands[i].name, kCommands[i].help);
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  for (size_t i = 0; i < sizeof kCommands / sizeof kCommands[0]; ++i)
    if (!strcmp(argv[1], kCommands[i].name))
      return kCommands[i].fn(argc - 2, argv + 2);
  fprintf(stderr, "mkx_perf: unknown subcommand '%s'\n", argv[1]);
  usage();
  return 2;
}
