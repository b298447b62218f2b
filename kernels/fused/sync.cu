/*
 * The call-level synchronisation of every fused path: the prologue that
 * starts a call (epoch, src[], counters, the barrier), the meet of the
 * node's ranks between two kernels of a call, and the stream memory wait
 * of the copy engines' side streams (fused/fused.h).
 */
#include <atomic>
#include <cuda.h>
#include "fused/flags.cuh"
#include "fused/fused.h"
#include "gemm/gemm_engine.h"
#include "common/modules.cuh"

namespace {

__global__ void fused_prologue_kernel(mkx_fused_sync s) {
  __shared__ int e, n;
  int *ep = mkx::fused::own_word(s, MKX_FUSED_OFF_EPOCH);
  if (threadIdx.x == 0) {
    e = *ep + 1;
    *ep = e;
    n = mkx::fused::next_run(s);
    if (n) *mkx::fused::runs_word(s) = n;
  }
  __syncthreads();
  int *src = mkx::fused::own_word(s, MKX_FUSED_OFF_SRC);
  for (int i = threadIdx.x; i < s.src_n; i += blockDim.x) src[i] = e;
  /* counts start from zero whatever the last call left (one that failed
   * while being enqueued, say); nothing reads them before this kernel ends */
  int *cnt = mkx::fused::own_word(s, MKX_FUSED_OFF_COUNTERS);
  for (int i = threadIdx.x; i < MKX_FUSED_MAX * MKX_FUSED_MAXCH; i += blockDim.x) cnt[i] = 0;
  /* zero before this rank's arrival: with SM pushes the peers count into
   * them as soon as every rank has arrived */
  __threadfence();
  __syncthreads();
  mkx::fused::meet_start(s, e, n);
}

/* The node's ranks meet at `off` for this call's epoch (mkx_fused_meet). */
__global__ void fused_meet_kernel(mkx_fused_sync s, int off, int where) {
  mkx::fused::meet(s, off, *(volatile const int *)mkx::fused::own_word(s, MKX_FUSED_OFF_EPOCH), where);
  /* a rank that met peers which had already given up (they arrive all the
   * same) learns it here: no later wait of its own may */
  if (threadIdx.x == 0) mkx::fused::peer_gave_up(s);
}

int last_error() {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

}  // namespace

extern "C" int mkx_fused_prologue(const mkx_fused_sync *s, cudaStream_t st) {
  if (!s || s->size < 1 || s->size > MKX_FUSED_MAX) return MKX_GEMM_EINVAL;
  fused_prologue_kernel<<<1, 32, 0, st>>>(*s);
  return last_error();
}

extern "C" int mkx_fused_meet(const mkx_fused_sync *s, int off, int where, cudaStream_t st) {
  if (!s || s->size < 1 || s->size > MKX_FUSED_MAX || off < 0) return MKX_GEMM_EINVAL;
  fused_meet_kernel<<<1, 32, 0, st>>>(*s, off, where);
  return last_error();
}

extern "C" int mkx_fused_prologue_load(void) {
  cudaFuncAttributes a;
  return (int)cudaFuncGetAttributes(&a, (const void *)fused_prologue_kernel);
}

typedef CUresult (*WaitValueFn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

extern "C" int mkx_fused_stream_wait_geq(cudaStream_t st, int *addr, int value) {
  static std::atomic<WaitValueFn> cached{nullptr};
  WaitValueFn f = cached.load(std::memory_order_acquire);
  if (!f) {
    void *p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess || !p)
      return (int)cudaErrorNotSupported;
    f = reinterpret_cast<WaitValueFn>(p);
    cached.store(f, std::memory_order_release);
  }
  CUresult r = f((CUstream)st, (CUdeviceptr)(uintptr_t)addr, (cuuint32_t)value, CU_STREAM_WAIT_VALUE_GEQ);
  return r == CUDA_SUCCESS ? 0 : (int)cudaErrorUnknown;
}
