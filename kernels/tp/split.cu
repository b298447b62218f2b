/*
 * The split path of the tensor-parallel calls on one node: the GEMM and the
 * communication one after the other, each in one kernel, for shapes whose
 * GEMM is too short to hide a collective behind (option tp_overlap).  The
 * overlapped path pays a barrier kernel, copy-engine set-up and 4-5 launches
 * per call; here a call is two kernels and each meets the other GPUs once
 * in flags over NVLink.
 *
 *   AllGather+GEMM:  tp_split_push_kernel, then the gated GEMM (ag_gemm.cu)
 *                    or cuBLAS (option tp_split_gemm)
 *   GEMM+RS / +AR:   a plain GEMM (the engine or cuBLAS) into the workspace, then
 *                    tp_split_reduce_kernel (one shot: each rank reads its
 *                    rows of every rank's partial over NVLink)
 */
#include "gemm/gemm_engine.cuh"
#include "gemm/gemm_engine.h"
#include "gemm/tmap.cuh"
#include "fused/flags.cuh"
#include "tp/tp.h"
#include "common/modules.cuh"

using mkx::gemm::OutCvt;

namespace {

__device__ __forceinline__ int *epoch_of(const mkx_fused_sync &s) {
  return mkx::fused::own_word(s, MKX_FUSED_OFF_EPOCH);
}

__device__ __forceinline__ int next_epoch(const mkx_fused_sync &s) { return *(volatile const int *)epoch_of(s) + 1; }

/* The run is over: its epoch and run number count from now on. */
__device__ __forceinline__ void end_run(const mkx_fused_sync &s, int e, int n) {
  *epoch_of(s) = e;
  if (n) *mkx::fused::runs_word(s) = n;
}

/* Work items of 16 bytes (or 8 elements) spread over at most 2 blocks per
 * SM of H100/H200, and at most the CTAs a waiting kernel may take (every
 * block meets the peers: on a GPU shared under MPS they must not sit on
 * every SM); at least one block, which still meets the peers. */
int blocks_for(int64_t items, int ctas) {
  const int64_t cap = mkx::gemm::at_most(264, ctas), b = (items + 255) / 256;
  return b < 1 ? 1 : b > cap ? (int)cap : (int)b;
}

/* ---- AllGather ----------------------------------------------------------- */

__global__ void __launch_bounds__(256) tp_split_push_kernel(const __grid_constant__ mkx_tp_split_ag_desc d) {
  const mkx_fused_sync &s = d.sync;
  const int e = next_epoch(s), n = mkx::fused::next_run(s);
  mkx::fused::meet_start(s, e, n);
  const int64_t vrow = d.k * d.esz / 16, total = d.rows * vrow, dld = d.k * d.esz;
  const char *a = static_cast<const char *>(d.a);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / vrow, v = i % vrow;
    const uint4 x = __ldg(reinterpret_cast<const uint4 *>(a + r * d.lda * d.esz) + v);
    for (int q = 0; q < s.size; ++q)
      reinterpret_cast<uint4 *>(static_cast<char *>(d.gathered[q]) + (d.row0 + r) * dld)[v] = x;
  }
  const int64_t ns = d.rows * d.s_cols;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < ns; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / d.s_cols, j = i % d.s_cols;
    const float x = __ldg(d.sa + r * d.sa_ld + j);
    for (int q = 0; q < s.size; ++q)
      reinterpret_cast<float *>(static_cast<char *>(d.gathered[q]) + d.s_off)[(d.row0 + r) * d.s_cols + j] = x;
  }
  /* the last block, once every block's stores are visible everywhere,
   * tells the peers (and with wait_all waits until theirs are here) */
  __shared__ int last;
  __syncthreads();
  if (threadIdx.x == 0) last = mkx::fused::last_block(s);
  __syncthreads();
  if (!last) return;
  if (threadIdx.x == 0)
    for (int q = 0; q < s.size; ++q)
      for (int t = d.t0; t < d.t1; ++t) mkx::fused::st_release(d.flags[q] + s.rank * d.tiles_m + t, e);
  if (d.wait_all) mkx::fused::meet(s, MKX_FUSED_OFF_PUSHED, e, MKX_FUSED_AT_AG_TILE);
  if (threadIdx.x == 0) {
    if (d.wait_all) mkx::fused::peer_gave_up(s);  // a plain GEMM reads the peers' rows next
    end_run(s, e, n);
  }
}

/* ---- ReduceScatter / AllReduce ------------------------------------------- */

/* Eight elements of a partial as fp32 (16 or 32 bytes, through L2 only:
 * peers' memory). */
template <typename P>
__device__ __forceinline__ void load8(const P *p, float (&v)[8]);
template <>
__device__ __forceinline__ void load8<float>(const float *p, float (&v)[8]) {
  const float4 a = __ldcg(reinterpret_cast<const float4 *>(p)), b = __ldcg(reinterpret_cast<const float4 *>(p) + 1);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
template <typename H2>
__device__ __forceinline__ float2 to_f2(uint32_t u);
template <>
__device__ __forceinline__ float2 to_f2<__nv_bfloat162>(uint32_t u) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u));
}
template <>
__device__ __forceinline__ float2 to_f2<__half2>(uint32_t u) {
  return __half22float2(*reinterpret_cast<const __half2 *>(&u));
}
template <typename P>
__device__ __forceinline__ void load8(const P *p, float (&v)[8]) {
  typedef typename OutCvt<P>::pair_t H2;
  const uint4 u = __ldcg(reinterpret_cast<const uint4 *>(p));
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = to_f2<H2>(w[i]);
    v[2 * i] = f.x, v[2 * i + 1] = f.y;
  }
}

/* Eight fp32 values as OutT, rounded once. */
template <typename OutT>
__device__ __forceinline__ void store8(OutT *p, const float (&v)[8]) {
  if constexpr (sizeof(OutT) == 4) {
    reinterpret_cast<float4 *>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4 *>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    typedef typename OutCvt<OutT>::pair_t H2;
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const H2 h = OutCvt<OutT>::pack(v[2 * i], v[2 * i + 1]);
      w[i] = *reinterpret_cast<const uint32_t *>(&h);
    }
    *reinterpret_cast<uint4 *>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

template <typename OutT, typename P>
__global__ void __launch_bounds__(256) tp_split_reduce_kernel(const __grid_constant__ mkx_tp_split_red_desc d) {
  const mkx_fused_sync &s = d.sync;
  const int e = next_epoch(s), n = mkx::fused::next_run(s);
  mkx::fused::meet_start(s, e, n);
  if (threadIdx.x == 0) mkx::fused::peer_gave_up(s);  // the partials are read next
  const int64_t vrow = d.n / 8, total = (d.r1 - d.r0) * vrow;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = d.r0 + i / vrow, col = (i % vrow) * 8, off = row * d.n + col;
    float acc[8], v[8];
    load8(static_cast<const P *>(d.part[0]) + off, acc);
    for (int q = 1; q < s.size; ++q) {  // rank order: the same bits on every rank
      load8(static_cast<const P *>(d.part[q]) + off, v);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j] += v[j];
    }
    store8(static_cast<OutT *>(d.c) + (row - d.c_row0) * d.ldc + col, acc);
  }
  /* every block's reads are done before it counts itself; the last one
   * meets the peers there, after which no partial is read any more */
  __shared__ int last;
  __syncthreads();
  if (threadIdx.x == 0) last = mkx::fused::last_block(s);
  __syncthreads();
  if (!last) return;
  mkx::fused::meet(s, MKX_FUSED_OFF_DRAINED, e, MKX_FUSED_AT_DRAINED);
  if (threadIdx.x == 0) end_run(s, e, n);
}

template <typename OutT>
int launch_reduce(const mkx_tp_split_red_desc *d, int blocks, cudaStream_t st) {
  /* partials in fp32 or in C's type (checked by the caller) */
  if (d->p_type == MKX_GEMM_FP32)
    tp_split_reduce_kernel<OutT, float><<<blocks, 256, 0, st>>>(*d);
  else
    tp_split_reduce_kernel<OutT, OutT><<<blocks, 256, 0, st>>>(*d);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

bool sync_ok(const mkx_fused_sync &s) {
  return s.size >= 1 && s.size <= MKX_FUSED_MAX && s.rank >= 0 && s.rank < s.size;
}

}  // namespace

extern "C" int mkx_tp_split_push(const mkx_tp_split_ag_desc *d, cudaStream_t st) {
  if (!d || !sync_ok(d->sync) || d->esz <= 0 || (d->k * d->esz) % 16 || (d->rows > 0 && (d->lda * d->esz) % 16) ||
      d->rows < 0 || (d->rows > 0 && reinterpret_cast<uintptr_t>(d->a) % 16) || d->t0 < 0 || d->t1 < d->t0 ||
      d->t1 > d->tiles_m || d->s_cols < 0 || d->sa_ld < 0 ||
      (d->s_cols > 0 && ((d->rows > 0 && !d->sa) || d->s_off % 4)))
    return MKX_GEMM_EINVAL;
  /* the rows' 16-byte pieces, or their scales where more (k = 0: the
   * scales alone) */
  const int64_t pieces = d->rows * (d->k * d->esz / 16), scales = d->rows * d->s_cols;
  const int blocks = blocks_for(pieces > scales ? pieces : scales, d->sync.ctas);
  tp_split_push_kernel<<<blocks, 256, 0, st>>>(*d);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

extern "C" int mkx_tp_split_reduce(const mkx_tp_split_red_desc *d, cudaStream_t st) {
  if (!d || !sync_ok(d->sync) || d->n % 8 || d->ldc % 8 || d->r0 < 0 || d->r1 < d->r0 || d->r1 > d->m)
    return MKX_GEMM_EINVAL;
  if (d->p_type != MKX_GEMM_FP32 && d->p_type != d->c_type) return MKX_GEMM_EINVAL;
  const int blocks = blocks_for((d->r1 - d->r0) * (d->n / 8), d->sync.ctas);
  switch (d->c_type) {
    case MKX_GEMM_BF16:
      return launch_reduce<__nv_bfloat16>(d, blocks, st);
    case MKX_GEMM_FP16:
      return launch_reduce<__half>(d, blocks, st);
    case MKX_GEMM_FP32:
      return launch_reduce<float>(d, blocks, st);
  }
  return MKX_GEMM_EINVAL;
}
