/* Host helpers of the engine's launchers (kernels/gemm, kernels/tp): TMA
 * tensor maps, tile counts, the SM count. */
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <atomic>
#include <type_traits>
#include <stdint.h>
#include "gemm/gemm_engine.h"

namespace mkx {
namespace gemm {

typedef CUresult (*EncodeTiledFn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                  const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                  CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* cuTensorMapEncodeTiled without linking libcuda (its stub would keep
 * programs from starting on machines without a driver). */
static inline EncodeTiledFn get_encode() {
  static std::atomic<EncodeTiledFn> cached{nullptr};
  EncodeTiledFn f = cached.load(std::memory_order_acquire);
  if (f) return f;
  void *p = nullptr;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || !p)
    return nullptr;
  f = reinterpret_cast<EncodeTiledFn>(p);
  cached.store(f, std::memory_order_release);
  return f;
}

static inline CUtensorMapDataType tmap_type(int dtype) {
  return dtype == MKX_GEMM_FP32                             ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
         : dtype == MKX_GEMM_FP16                           ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
         : dtype == MKX_GEMM_E4M3 || dtype == MKX_GEMM_E5M2 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                                            : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
}

/* Bytes of an element of dtype. */
static inline int elem_bytes(int dtype) {
  return dtype == MKX_GEMM_FP32 ? 4 : dtype == MKX_GEMM_E4M3 || dtype == MKX_GEMM_E5M2 ? 1 : 2;
}

/* A dense tensor of `rank` (<= 5) dimensions, innermost first, element
 * strides strides[1..rank-1] (strides[0] is 1), box box[0..rank-1] (box[0]
 * covering 128 bytes), 128B swizzle; 0 or MKX_GEMM_ETMAP. */
static inline int make_tmap_nd(CUtensorMap *map, const void *ptr, int dtype, int rank, const int64_t *dims,
                               const int64_t *strides, const uint32_t *box) {
  EncodeTiledFn enc = get_encode();
  if (!enc || rank < 1 || rank > 5) return MKX_GEMM_ETMAP;
  const int esz = elem_bytes(dtype);
  cuuint64_t gd[5], gs[4];
  cuuint32_t bx[5], es[5];
  for (int i = 0; i < rank; ++i) {
    gd[i] = (cuuint64_t)dims[i];
    bx[i] = box[i];
    es[i] = 1;
    if (i) gs[i - 1] = (cuuint64_t)strides[i] * esz;
  }
  CUresult r = enc(map, tmap_type(dtype), (cuuint32_t)rank, const_cast<void *>(ptr), gd, gs, bx, es,
                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? 0 : MKX_GEMM_ETMAP;
}

/* 2-D tensor {inner, outer}, row stride ld elements, box {128 bytes of
 * inner, box_outer}; 0 or MKX_GEMM_ETMAP. */
static inline int make_tmap(CUtensorMap *map, const void *ptr, int dtype, int64_t inner, int64_t outer, int64_t ld,
                            int box_outer) {
  const int64_t dims[2] = {inner, outer}, strides[2] = {1, ld};
  const uint32_t box[2] = {(uint32_t)(128 / elem_bytes(dtype)), (uint32_t)box_outer};
  return make_tmap_nd(map, ptr, dtype, 2, dims, strides, box);
}

static inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* C = 0 (a product with k == 0), on s; 0 or a cudaError_t. */
static inline int zero_c(const mkx_gemm_desc *d, cudaStream_t s) {
  const int esz = elem_bytes(d->c_type);
  const cudaError_t e = cudaMemset2DAsync(d->c, (size_t)d->ldc * esz, 0, (size_t)d->n * esz, (size_t)d->m, s);
  return e == cudaSuccess ? 0 : (int)e;
}

/* The current device's SM count, asked once per device: small calls are
 * timed from their enqueue, where every driver call shows. */
static inline int num_sms(int *sms) {
  static std::atomic<int> known[64];
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return (int)e;
  if (dev >= 0 && dev < 64 && (*sms = known[dev].load(std::memory_order_relaxed)) > 0) return 0;
  e = cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev);
  if (e != cudaSuccess) return (int)e;
  if (dev >= 0 && dev < 64) known[dev].store(*sms, std::memory_order_relaxed);
  return 0;
}

/* Whether the current device is sm_90 (the engines' wgmma and TMA code),
 * asked once per device. */
static inline bool device_is_sm90() {
  static std::atomic<int> known[64];  // 0 unknown, 1 yes, 2 no
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  std::atomic<int> *k = dev >= 0 && dev < 64 ? &known[dev] : nullptr;
  const int v = k ? k->load(std::memory_order_relaxed) : 0;
  if (v) return v == 1;
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return false;
  const bool yes = major == 9 && minor == 0;
  if (k) k->store(yes ? 1 : 2, std::memory_order_relaxed);
  return yes;
}

/* n, or cap where 0 < cap < n: the CTAs a kernel that waits for other
 * ranks may take (mkx_fused_sync::ctas; 0 is no limit). */
static inline int at_most(int n, int cap) { return cap > 0 && cap < n ? cap : n; }

/* The SM count, at most cap. */
static inline int num_sms(int *sms, int cap) {
  const int rc = num_sms(sms);
  if (!rc) *sms = at_most(*sms, cap);
  return rc;
}

/* cudaFuncSetAttribute(MaxDynamicSharedMemorySize) once per kernel and
 * device, for the same reason; 0 or a cudaError_t. */
template <auto Kern>
static inline int smem_attr_once(int bytes) {
  static std::atomic<uint64_t> done{0};
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return (int)e;
  const uint64_t bit = dev >= 0 && dev < 64 ? 1ull << dev : 0;
  if (bit && (done.load(std::memory_order_acquire) & bit)) return 0;
  e = cudaFuncSetAttribute(Kern, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess) return (int)e;
  done.fetch_or(bit, std::memory_order_acq_rel);
  return 0;
}

template <typename T>
struct type_tag {
  typedef T type;
};

/* f(bkm, f16, out) with the runtime B layout and operand type as
 * std::true_type / std::false_type and C's type as a type_tag, so that a
 * launcher instantiates its kernel for each: returns f's result, or
 * MKX_GEMM_EINVAL for a C type the engine does not write. */
template <typename F>
static inline int with_types(int ab_type, int b_kmajor, int c_type, F &&f) {
  auto ab = [&](auto out) {
    if (b_kmajor)
      return ab_type == MKX_GEMM_FP16 ? f(std::true_type{}, std::true_type{}, out)
                                      : f(std::true_type{}, std::false_type{}, out);
    return ab_type == MKX_GEMM_FP16 ? f(std::false_type{}, std::true_type{}, out)
                                    : f(std::false_type{}, std::false_type{}, out);
  };
  switch (c_type) {
    case MKX_GEMM_BF16:
      return ab(type_tag<__nv_bfloat16>{});
    case MKX_GEMM_FP16:
      return ab(type_tag<__half>{});
    case MKX_GEMM_FP32:
      return ab(type_tag<float>{});
  }
  return MKX_GEMM_EINVAL;
}

}  // namespace gemm
}  // namespace mkx
