/*
 * MKX grouped expert GEMM: the Hopper GEMM engine (gemm_engine.cuh) over
 * the tiles of every local expert in one persistent launch (C interface in
 * moe_engine.h).
 *
 * Tile rows are numbered across experts: expert e owns tile rows
 * [prefix[e], prefix[e+1]), prefix[e] = sum over e' < e of
 * ceil(rows(e') / 128), computed on the GPU by a one-block scan before the
 * GEMM so the host never sees a count.  Each hook finds a tile row's
 * expert by binary search in the prefix: the producer once per tile (and
 * keeps it for the tile's B chunks), each consumer thread once per tile in
 * the epilogue.  A tile's last rows may belong to the next expert (A is
 * loaded whole); their products are computed and never stored.
 */
#include "gemm/gemm_engine.cuh"
#include "gemm/tmap.cuh"
#include "moe/moe_engine.h"
#include "moe/moe_tiles.cuh"

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "common/modules.cuh"

using namespace mkx::gemm;

namespace {

using mkx::moe::moe_ready_of;
using mkx::moe::MoeReady;
using mkx::moe::MoeRows;
using mkx::moe::silu;

constexpr int kGroupM = 8;  // tile rows walked before moving across columns (L2 reuse of W[e])

/* Tiles of this kernel: expert e takes ceil(rows / 128) tile rows. */
struct RowTiles {
  MoeRows rows;
  __device__ __forceinline__ int tiles(int e) const {
    int lo, hi;
    rows.span(e, lo, hi);
    return (hi - lo + kBM - 1) / kBM;
  }
};

/* first row of tile row v, its expert, and the end of its expert's rows */
__device__ __forceinline__ int first_row(const MoeRows &r, int v, int &e, int &end) {
  e = r.expert_of(v);
  int lo;
  r.span(e, lo, end);
  return lo + (v - r.prefix[e]) * kBM;
}

/* Producer hooks: A rows of the tile's expert, B chunks from W[e] (the
 * gate and up halves of the same output columns with SwiGLU). */
template <int BN, bool SWIGLU>
struct MoeGate {
  MoeRows r;
  int up;  // SwiGLU: first column of the up half
  int e;   // expert of the tile in hand (set by a_source)
  MoeReady ready;
  __device__ __forceinline__ void a_source(int tm, const CUtensorMap *&, int &row) {
    int end;
    row = first_row(r, tm, e, end);
  }
  __device__ __forceinline__ void wait_rows(int, int, int) { ready.wait(e); }
  __device__ __forceinline__ void wait_k(int, int) {}
  __device__ __forceinline__ void b_chunk(int, int tn, int j, int &col, int &z) {
    z = e;
    if constexpr (SWIGLU) {
      constexpr int H = BN / 128;  // gate chunks, then as many up chunks
      col = j < H ? tn * (BN / 2) + 64 * j : up + tn * (BN / 2) + 64 * (j - H);
    }
  }
};

/* Epilogue: rows of the tile's expert only, scaled, SwiGLU combined, in
 * pairs of columns straight to C. */
template <typename OutT, bool SWIGLU>
struct MoeStore {
  MoeRows r;
  OutT *c;
  int64_t ldc;
  int n;
  const float *scale;
  template <int BN>
  __device__ __forceinline__ void operator()(const TileCtx &t, float (&acc)[BN / 2]) {
    typedef typename OutCvt<OutT>::pair_t P;
    constexpr int W = SWIGLU ? BN / 2 : BN;  // output columns of a tile
    int e, end;
    const int row = first_row(r, t.tile_m, e, end) + t.wg * 64 + t.acc_row(0);
    const bool ok0 = row < end, ok1 = row + 8 < end;
    const float s0 = scale && ok0 ? scale[row] : 1.f, s1 = scale && ok1 ? scale[row + 8] : 1.f;
    const int col = t.tile_n * W + t.acc_col(0);
    OutT *p0 = c + (int64_t)row * ldc + col;
    OutT *p1 = p0 + 8 * ldc;
    const bool pairs = (ldc & 1) == 0;  // else element pairs are not aligned
#pragma unroll
    for (int q = 0; q < W / 8; ++q) {
      if (col + 8 * q >= n) break;
      float v[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) v[i] = SWIGLU ? silu(acc[4 * q + i]) * acc[4 * q + i + BN / 4] : acc[4 * q + i];
      if (pairs && col + 8 * q + 1 < n) {
        if (ok0) *reinterpret_cast<P *>(p0 + 8 * q) = OutCvt<OutT>::pack(v[0] * s0, v[1] * s0);
        if (ok1) *reinterpret_cast<P *>(p1 + 8 * q) = OutCvt<OutT>::pack(v[2] * s1, v[3] * s1);
      } else {
        const bool two = col + 8 * q + 1 < n;
        if (ok0) store1(p0 + 8 * q, v[0] * s0, v[1] * s0, two);
        if (ok1) store1(p1 + 8 * q, v[2] * s1, v[3] * s1, two);
      }
    }
  }
  /* one or two elements, one at a time (odd ldc, or the last column) */
  __device__ __forceinline__ static void store1(OutT *p, float a, float b, bool two) {
    p[0] = OutCvt<OutT>::pack(a, a).x;
    if (two) p[1] = OutCvt<OutT>::pack(b, b).x;
  }
  __device__ __forceinline__ void finish(const TileCtx &) {}
};

struct MoeParams {
  MoeRows rows;
  MoeReady ready;
  void *c;
  int64_t ldc;
  const float *scale;
  int n, k, tiles_n, up;
};

template <int BN, int STAGES, bool F16, typename OutT, bool SWIGLU>
__global__ void __launch_bounds__(kThreads, 1)
    mkx_moe_gemm_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmW,
                        const __grid_constant__ MoeParams p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ __align__(1024) uint8_t smem[];
  typedef Config<BN, STAGES, false, F16> Cfg;
  const int tiles_m = p.rows.prefix[p.rows.experts];
  GroupedTileOrder order{tiles_m, p.tiles_n, max(1, min(kGroupM, tiles_m))};
  MoeGate<BN, SWIGLU> gate{p.rows, p.up, 0, p.ready};
  MoeStore<OutT, SWIGLU> epi{p.rows, reinterpret_cast<OutT *>(p.c), p.ldc, p.n, p.scale};
  run_engine<Cfg>(smem, &tmA, &tmW, tiles_m * kBM, p.n, p.k, (int)blockIdx.x, (int)gridDim.x, order, gate, epi);
#endif
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* SwiGLU: the first column of W's up half. */
int64_t up_of(const mkx_moe_gemm_desc *d) { return d->up_col ? d->up_col : d->n; }

template <int BN, int STAGES, bool F16, typename OutT, bool SWIGLU>
int launch(const mkx_moe_gemm_desc *d, const MoeRows &rows, cudaStream_t s) {
  typedef Config<BN, STAGES, false, F16> Cfg;
  auto kern = mkx_moe_gemm_kernel<BN, STAGES, F16, OutT, SWIGLU>;
  CUtensorMap tmA, tmW;
  int rc = make_tmap(&tmA, d->a, d->ab_type, d->k, d->a_rows, d->lda, kBM);
  const int64_t wcols = SWIGLU ? up_of(d) + d->n : d->n;
  const int64_t dims[3] = {wcols, d->k, d->experts}, strides[3] = {1, d->ldw, d->k * d->ldw};
  const uint32_t box[3] = {64, 64, 1};
  if (!rc) rc = make_tmap_nd(&tmW, d->w, d->ab_type, 3, dims, strides, box);
  int sms = 0;
  if (!rc) rc = num_sms(&sms, d->num_ctas);
  if (!rc) rc = smem_attr_once<mkx_moe_gemm_kernel<BN, STAGES, F16, OutT, SWIGLU>>((int)Cfg::SMEM_BYTES);
  if (rc) return rc;
  MoeParams p = {rows,         moe_ready_of(d), d->c,      d->ldc,
                 d->row_scale, (int)d->n,       (int)d->k, (int)cdiv(d->n, SWIGLU ? BN / 2 : BN),
                 (int)up_of(d)};
  kern<<<sms, kThreads, Cfg::SMEM_BYTES, s>>>(tmA, tmW, p);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

template <int BN, int STAGES>
int launch_tile(const mkx_moe_gemm_desc *d, const MoeRows &rows, cudaStream_t s) {
  return with_types(d->ab_type, 0, d->c_type, [&](auto, auto f16, auto out) {
    typedef typename decltype(out)::type OutT;
    constexpr bool F16 = decltype(f16)::value;
    return d->swiglu ? launch<BN, STAGES, F16, OutT, true>(d, rows, s)
                     : launch<BN, STAGES, F16, OutT, false>(d, rows, s);
  });
}

}  // namespace

extern "C" int64_t mkx_moe_gemm_work_ints(int experts) { return experts < 0 ? 1 : (int64_t)experts + 1; }

static bool is_fp8(int t) { return t == MKX_GEMM_E4M3 || t == MKX_GEMM_E5M2; }

/* W's columns: n, or up + n with SwiGLU */
static int64_t w_cols(const mkx_moe_gemm_desc *d) { return d->swiglu ? up_of(d) + d->n : d->n; }

/* What fp8 operands add to the checks: the swapped kernel, 16-byte rows, the scales. */
static const char *fp8_why(const mkx_moe_gemm_desc *d) {
  const mkx_moe_fp8_scales &s = d->fp8;
  if (d->kernel == MKX_MOE_GEMM_ROWS) return "fp8: the swapped kernel only";
  if (d->k % 16 || d->lda % 16 || d->ldw % 16) return "fp8: k, lda and ldw must be multiples of 16";
  if ((int64_t)d->experts * w_cols(d) * d->ldw >= (1ll << 40)) return "fp8: W too large";
  const auto bad = [](int l) { return l < MKX_GEMM_SCALE_NONE || l > MKX_GEMM_SCALE_BLOCK; };
  if (bad(s.a_layout) || bad(s.w_layout)) return "fp8: bad scale layout";
  /* no rows, no A scales (a rank without tokens may pass none) */
  if ((s.a_layout != MKX_GEMM_SCALE_NONE && !s.a && d->a_rows > 0) || (s.w_layout != MKX_GEMM_SCALE_NONE && !s.w))
    return "fp8: null scale array";
  if (s.a_row < 0 || s.a_kb < 0 || s.w_e < 0 || s.w_col < 0 || s.w_kb < 0) return "fp8: negative scale stride";
  return nullptr;
}

extern "C" int mkx_moe_gemm_supported(const mkx_moe_gemm_desc *d, const char **why) {
  const char *w = nullptr;
  const int64_t lim = 1ll << 31;
  if (!d)
    w = "null descriptor";
  else if (d->ab_type != MKX_GEMM_BF16 && d->ab_type != MKX_GEMM_FP16 && !is_fp8(d->ab_type))
    w = "A/W type must be bf16, fp16, e4m3 or e5m2";
  else if (d->c_type != MKX_GEMM_BF16 && d->c_type != MKX_GEMM_FP16 && d->c_type != MKX_GEMM_FP32)
    w = "C type must be bf16, fp16 or fp32";
  else if (d->experts < 1 || d->k < 1 || d->n < 1 || d->a_rows < 0)
    w = "experts, k or n < 1, or a_rows < 0";
  else if (d->k >= lim || d->n >= lim / 2 || d->a_rows >= lim || (int64_t)d->experts * d->k >= lim)
    w = "a size is 2^31 or more";
  else if (d->lda % 8 || d->ldw % 8)
    w = "lda and ldw must be multiples of 8";
  else if (d->swiglu && (d->up_col < 0 || (d->up_col && d->up_col < d->n) || up_of(d) % 8))
    w = "SwiGLU: the up half must start at a multiple of 8 columns, at or after n";
  else if (d->lda < d->k || d->ldc < d->n || d->ldw < (is_fp8(d->ab_type) ? d->k : w_cols(d)))
    w = "leading dimension too small";
  else if (!d->offsets || !d->work || !d->w || (d->a_rows > 0 && (!d->a || !d->c)))
    w = "null offsets, work, W, A or C";
  else if (!aligned16(d->a) || !aligned16(d->w) || !aligned16(d->c))
    w = "A, W and C must be 16-byte aligned";
  else if (d->block_n != 0 && d->block_n != 128 && d->block_n != 256)
    w = "block_n must be 0, 128 or 256";
  else if (d->num_ctas < 0)
    w = "num_ctas < 0";
  else if (d->kernel != 0 && d->kernel != MKX_MOE_GEMM_ROWS && d->kernel != MKX_MOE_GEMM_SWAP)
    w = "kernel must be 0, MKX_MOE_GEMM_ROWS or MKX_MOE_GEMM_SWAP";
  else if (d->ready && (!d->sync || d->sync->size < 1 || d->sync->size > MKX_FUSED_MAX))
    w = "ready flags need a sync of 1 to MKX_FUSED_MAX ranks";
  else if (is_fp8(d->ab_type))
    w = fp8_why(d);
  if (why) *why = w ? w : "ok";
  return w ? 0 : 1;
}

/* 256 columns of W per tile where the output is wide enough to fill the
 * SMs with them (the engine's faster tile), else 128. */
static int pick_block_n(const mkx_moe_gemm_desc *d) {
  if (d->block_n) return d->block_n;
  const int64_t wcols = d->swiglu ? 2 * d->n : d->n;
  return wcols >= 2048 ? 256 : 128;
}

/* The swapped kernel up to MKX_MOE_SWAP_ROWS rows per expert on average:
 * there the weights' bytes set the time, and it reads them once and
 * computes rows rounded up to 8 instead of 128.  Beyond, an expert's rows
 * spill into a second block that reads the weights again, while the rows
 * kernel's tile rows of one expert share them in L2 (docs/moe.md). */
static bool pick_swap(const mkx_moe_gemm_desc *d) {
  if (d->kernel || is_fp8(d->ab_type)) return d->kernel != MKX_MOE_GEMM_ROWS;
  return d->a_rows <= (int64_t)MKX_MOE_SWAP_ROWS * d->experts;
}

extern "C" int mkx_moe_gemm_run(const mkx_moe_gemm_desc *d, cudaStream_t s) {
  if (!mkx_moe_gemm_supported(d, nullptr)) return MKX_GEMM_EINVAL;
  if (d->a_rows == 0) return 0;
  if (!device_is_sm90()) return MKX_GEMM_ENODEV;
  const MoeRows rows = {d->offsets, d->work, d->experts, (int)d->a_rows, d->gate};
  if (pick_swap(d)) return mkx::moe::swap_gemm_run(d, s);
  const int rc = mkx::moe::tile_prefix_run(RowTiles{rows}, d->work, s);
  if (rc) return rc;
  return pick_block_n(d) == 256 ? launch_tile<256, 4>(d, rows, s) : launch_tile<128, 6>(d, rows, s);
}
