/*
 * MKX Hopper GEMM engine: C interface of the plain GEMM (kernels/gemm/gemm.cu).
 * Includable from C11; needs only cuda_runtime.h and stdint.h.
 *
 *   C = A * B        A: m x k row-major (lda >= k), C: m x n row-major (ldc >= n)
 *                    B: b_kmajor = 1: stored n x k row-major (K contiguous, ldb >= k), i.e. B^T
 *                       b_kmajor = 0: stored k x n row-major (N contiguous, ldb >= n)
 *   Operands bf16 or fp16 (same type for A and B), fp32 accumulation, C bf16, fp16 or fp32.
 *   Requirements (mkx_gemm_supported says which fails): sm_90 device; n % 8 == 0, k % 8 == 0;
 *   lda, ldb, ldc multiples of 8 elements; a, b, c 16-byte aligned; m, n, k < 2^31.
 *   Any m >= 0.  Partial tiles are handled (TMA zero fill, masked stores): nothing outside the
 *   m x n window of C (row stride ldc) is written.  k == 0 writes zeros.
 *
 * Column-major callers (BLAS convention) are served by operand swapping: a column-major r x c
 * matrix with leading dimension ld is, in memory, its transpose stored row-major (c x r, ld).
 * For Cc = op(Ac) * op(Bc), all column-major, Cc^T = op(Bc)^T * op(Ac)^T, and Cc's memory is
 * Cc^T row-major (n x m, ldc).  So call with
 *     m' = n, n' = m, k' = k, c = Cc, ldc' = ldc,
 *     a  = Bc, lda' = ldb            (needs op(B) = N: Bc^T is n x k, K contiguous)
 *     b  = Ac, ldb' = lda, b_kmajor = 0 if op(A) = N (Ac's memory is k x m, M contiguous)
 *                          b_kmajor = 1 if op(A) = T (Ac stored k x m col-major = m x k rows).
 * op(B) = T with column-major storage would make the engine's A operand M-contiguous, which the
 * engine does not take (A must be K-contiguous): transpose first or use another path.
 */
#ifndef MKX_GEMM_ENGINE_H
#define MKX_GEMM_ENGINE_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Values fixed: they equal the public MKX_Datatype values. */
enum mkx_gemm_dtype {
  MKX_GEMM_BF16 = 1,
  MKX_GEMM_FP16 = 2,
  MKX_GEMM_FP32 = 3,
  MKX_GEMM_E4M3 = 5, /* fp8 operands: mkx_gemm_run_fp8 only */
  MKX_GEMM_E5M2 = 6
};

/* tile_override values; MKX_GEMM_TILE_128x128_PAIR (fp8 only): 128 x 128 tiles run by clusters
 * of 2 CTAs on tile rows 2p and 2p + 1 of the same columns, each loading half of their B into
 * both (TMA multicast) */
enum mkx_gemm_tile {
  MKX_GEMM_TILE_AUTO = 0,
  MKX_GEMM_TILE_128x128 = 1,
  MKX_GEMM_TILE_128x256 = 2,
  MKX_GEMM_TILE_128x128_PAIR = 3
};

/* error codes besides cudaError_t values (which are >= 0) */
#define MKX_GEMM_EINVAL (-1) /* bad arguments / unsupported problem (see mkx_gemm_supported) */
#define MKX_GEMM_ENODEV (-2) /* current device is not sm_90 */
#define MKX_GEMM_ETMAP (-3)  /* cuTensorMapEncodeTiled unavailable or failed */

typedef struct {
  int64_t m, n, k;
  const void *a;
  int64_t lda; /* A row-major m x k */
  const void *b;
  int64_t ldb;
  int b_kmajor; /* 1: B stored n x k (K contiguous); 0: k x n (N contiguous) */
  void *c;
  int64_t ldc;       /* C row-major m x n */
  int ab_type;       /* MKX_GEMM_BF16 or MKX_GEMM_FP16 */
  int c_type;        /* MKX_GEMM_BF16, MKX_GEMM_FP16 or MKX_GEMM_FP32 */
  int num_ctas;      /* persistent CTAs; 0 = one per SM */
  int tile_override; /* enum mkx_gemm_tile; 0 = heuristic */
} mkx_gemm_desc;

/* 1 if the engine can run the problem, else 0 and (if why != NULL) a static reason string.
 * Does not look at the device. */
int mkx_gemm_supported(const mkx_gemm_desc *d, const char **why);

/* Enqueue C = A * B on stream s (current device).  Returns 0, a cudaError_t value (> 0), or a
 * negative MKX_GEMM_E* code. */
int mkx_gemm_run(const mkx_gemm_desc *d, cudaStream_t s);

/* Load the kernel mkx_gemm_run would launch for d, launching nothing.  With
 * lazy loading a kernel's first launch waits for the device to be idle
 * (under MPS: every client's work), so a call whose kernels wait for
 * peers loads them beforehand. */
int mkx_gemm_load(const mkx_gemm_desc *d);

/* Gated variant (the engine's composition hooks, reachable from C): before the producer loads A
 * rows [128 t, 128 t + 128) it waits until flags[t] >= target (flags: one int32 per 128-row tile
 * row of A, ceil(m / 128) of them, in device or host-mapped memory, read with ld.acquire.sys), and
 * the CTAs walk tile rows starting at tile row first_tile_m (mod the tile-row count).  For
 * AllGather+GEMM-style overlap: whoever fills A (copy engine, peer GPU) writes each row block and
 * then its flag.  The flags must be set by something that does not need this GPU's SMs (copy
 * engine, host, peer GPU): the persistent CTAs occupy every SM they are given. */
int mkx_gemm_run_gated(const mkx_gemm_desc *d, const int *flags, int target, int first_tile_m, cudaStream_t s);

/* fp8 GEMM (kernels/gemm/gemm_fp8.cu): C = (sa . A) * (sb . B) with A and B both
 * MKX_GEMM_E4M3 or both MKX_GEMM_E5M2 (ab_type), B stored n x k (b_kmajor = 1: fp8 wgmma reads
 * K-major operands only), C bf16, fp16 or fp32; every 128-wide K block's product is summed in
 * fp32 apart and added in fp32 times its scales.  Values fixed: the public MKX_Scale_layout's. */
enum mkx_gemm_scale_layout {
  MKX_GEMM_SCALE_NONE = 0,   /* every scale 1 */
  MKX_GEMM_SCALE_TENSOR = 1, /* a[0] for all of A, b[0] for all of B */
  MKX_GEMM_SCALE_ROW = 2,    /* a[i * a_row] for row i of A, b[j * b_col] for column j of C (row j
                                of B): strides 1 for dense arrays, 0 for one value for all */
  MKX_GEMM_SCALE_BLOCK = 3   /* a[i * a_row + kb * a_kb]: row i, K block kb of 128;
                                b[nb * b_col + kb * b_kb]: columns 128 nb .. of C, K block kb */
};
typedef struct {
  int layout;          /* enum mkx_gemm_scale_layout */
  const float *a, *b;  /* device memory, finite (NULL with MKX_GEMM_SCALE_NONE) */
  int64_t a_row, a_kb; /* MKX_GEMM_SCALE_ROW (a_row, b_col) and _BLOCK: element strides */
  int64_t b_col, b_kb;
} mkx_gemm_scales;

/* Requirements of the fp8 GEMM besides those of mkx_gemm_supported for its other arguments:
 * ab_type fp8, b_kmajor 1, k, lda and ldb multiples of 16 (TMA rows of 16-byte multiples), a
 * valid layout with its arrays. */
int mkx_gemm_fp8_supported(const mkx_gemm_desc *d, const mkx_gemm_scales *sc, const char **why);
/* Enqueue the fp8 GEMM on s; returns as mkx_gemm_run.  Tiles of 128 x 128, one CTA each;
 * tile_override MKX_GEMM_TILE_128x128_PAIR runs them in clusters of 2 (needs num_ctas 0 or
 * >= 2; with m <= 128 one CTA a tile runs: mkx_gemm_fp8_pick_tile says which). */
int mkx_gemm_run_fp8(const mkx_gemm_desc *d, const mkx_gemm_scales *sc, cudaStream_t s);

/* What mkx_gemm_run_fp8 runs for d with num_ctas CTAs (0: one per SM):
 * MKX_GEMM_TILE_128x128 or MKX_GEMM_TILE_128x128_PAIR. */
int mkx_gemm_fp8_pick_tile(const mkx_gemm_desc *d, int num_ctas);
/* The CTAs mkx_gemm_run_fp8 would launch for d and sc into *ctas (0: none; clusters of 2: no
 * more than fit on the device at once), launching nothing; returns as mkx_gemm_run_fp8. */
int mkx_gemm_fp8_grid(const mkx_gemm_desc *d, const mkx_gemm_scales *sc, int *ctas);

/* The tile the heuristic (or the override) picks for d on a device with num_sms SMs:
 * MKX_GEMM_TILE_128x128 or MKX_GEMM_TILE_128x256. */
int mkx_gemm_pick_tile(const mkx_gemm_desc *d, int num_sms);

#ifdef __cplusplus
}
#endif

#endif /* MKX_GEMM_ENGINE_H */
