/* The kernel of the SM-partition checks (tests/gpu/test_sm_partition.c,
 * tests/gpu/probe_sm_partition.c): every CTA takes a whole SM, records
 * which one, arrives, and holds it until one CTA of every rank sharing the
 * GPU has arrived, or until a bound.  Where the ranks' kernels are not kept
 * to SMs of their own, the first kernel on the GPU holds every SM and the
 * others never arrive: the bound is what ends the wait. */
#include <stdint.h>
#include "sm_hold_kernels.h"

static __device__ __forceinline__ unsigned smid(void) {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

static __device__ __forceinline__ uint64_t now_ns(void) {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

static __device__ __forceinline__ int load_acquire(const int *p) {
  int v;
  asm volatile("ld.acquire.sys.global.b32 %0, [%1];"
               : "=r"(v)
               : "l"(p)
               : "memory");
  return v;
}

/* arrived[r]: CTAs of rank r that got an SM (on the GPU every rank maps). */
__global__ void __launch_bounds__(128, 1)
    sm_hold_kernel(int *arrived, int rank, int ranks, int *sm_of_cta,
                   int *timed_out, uint64_t bound_ns) {
  /* the launch's dynamic shared memory, unused, is what takes the SM */
  if (threadIdx.x != 0) return;
  sm_of_cta[blockIdx.x] = (int)smid();
  atomicAdd_system(&arrived[rank], 1);
  const uint64_t t0 = now_ns();
  for (int q = 0; q < ranks; q++)
    while (load_acquire(&arrived[q]) == 0) {
      if (now_ns() - t0 > bound_ns) {
        atomicExch_system(timed_out, 1);
        return;
      }
    }
}

extern "C" int sm_hold_launch(const sm_hold_args *a, cudaStream_t st) {
  static size_t set_for = 0;
  if (set_for != a->smem) {
    cudaError_t e = cudaFuncSetAttribute(
        sm_hold_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
        (int)a->smem);
    if (e != cudaSuccess) return (int)e;
    set_for = a->smem;
  }
  sm_hold_kernel<<<a->grid, 128, a->smem, st>>>(
      a->arrived, a->rank, a->ranks, a->sm_of_cta, a->timed_out, a->bound_ns);
  return (int)cudaGetLastError();
}

__global__ void sm_idle_kernel(void) {}

extern "C" int sm_idle_launch(cudaStream_t st) {
  sm_idle_kernel<<<1, 32, 0, st>>>();
  return (int)cudaGetLastError();
}

/* One CTA that spins for ns nanoseconds of the GPU's clock: a run of a
 * modelled length (tests/gpu/test_tuner.c). */
__global__ void sm_spin_kernel(uint64_t ns) {
  const uint64_t t0 = now_ns();
  while (now_ns() - t0 < ns) {}
}

extern "C" int sm_spin_launch(uint64_t ns, cudaStream_t st) {
  sm_spin_kernel<<<1, 32, 0, st>>>(ns);
  return (int)cudaGetLastError();
}
