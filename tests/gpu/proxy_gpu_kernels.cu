/* Kernels of tests/gpu/test_proxy_gpu: see proxy_gpu_kernels.h. */
#include "proxy/proxy_dev.cuh"
#include "proxy_gpu_kernels.h"

using namespace mkx::proxy;

namespace {

constexpr int kThreads = 256;

__device__ void produce(const mkx_proxy_dev &d, const pg_exchange &x, int b) {
  uint64_t seq[PG_MAX_CHUNKS] = {0};
  uint64_t last = 0;
  const uint32_t words = x.bytes / 4;
  int rc = 0;
  for (int i = 0; i < x.msgs && rc == 0; i++) {
    const int c = i % x.chunks;
    /* The chunk's previous write must be complete before it is rewritten. */
    if (i >= x.chunks) rc = cta_wait_complete(d, seq[c]);
    if (rc != 0) break;
    const uint64_t off = ((uint64_t)b * x.chunks + c) * x.bytes;
    uint32_t *w = reinterpret_cast<uint32_t *>(x.send + off);
    for (uint32_t k = threadIdx.x; k < words; k += blockDim.x)
      w[k] = pg_word(x.rank, b, i, k);
    const uint64_t dst =
        (((uint64_t)x.rank * x.ctas + b) * x.msgs + i) * x.bytes;
    rc = cta_post(d, x.to, x.send_region, x.recv_region, off, dst, x.bytes,
                  (uint32_t)(x.rank * x.ctas + b), x.base + i + 1, &seq[c]);
    last = seq[c];
  }
  if (rc == 0 && last) rc = cta_wait_complete(d, last);
  if (cta_leader()) x.rc[b] = rc;
}

__device__ void consume(const mkx_proxy_dev &d, const pg_exchange &x, int b) {
  __shared__ unsigned long long s_bad;
  const uint32_t words = x.bytes / 4;
  const uint32_t slot = (uint32_t)(x.from * x.ctas + b);
  unsigned long long bad = 0;
  int rc = 0;
  for (int i = 0; i < x.msgs && rc == 0; i++) {
    rc = cta_wait_signal(d, slot, x.base + i + 1);
    if (rc != 0) break;
    const uint64_t at =
        (((uint64_t)x.from * x.ctas + b) * x.msgs + i) * x.bytes;
    const uint32_t *w = reinterpret_cast<const uint32_t *>(x.recv + at);
    for (uint32_t k = threadIdx.x; k < words; k += blockDim.x)
      bad += w[k] != pg_word(x.from, b, i, k);
  }
  if (cta_leader()) s_bad = 0;
  __syncthreads();
  if (bad) atomicAdd(&s_bad, bad);
  __syncthreads();
  if (cta_leader()) {
    x.rc[x.ctas + b] = rc;
    if (s_bad) atomicAdd(x.bad, s_bad);
  }
}

__global__ void __launch_bounds__(kThreads)
    exchange_kernel(mkx_proxy_dev d, pg_exchange x) {
  const int b = (int)blockIdx.x;
  if (b < x.ctas)
    produce(d, x, b);
  else
    consume(d, x, b - x.ctas);
}

__global__ void post_many_kernel(mkx_proxy_dev d, int to, uint32_t src,
                                 uint32_t dst, uint32_t slot, int count,
                                 int *rc, int *posted) {
  int r = 0, n = 0;
  uint64_t seq = 0;
  for (; n < count && r == 0; n++) {
    r = post(d, to, src, dst, 0, 0, 16, slot, (uint64_t)n + 1, &seq);
    if (r != 0) break;
  }
  rc[0] = r;
  *posted = n;
}

__global__ void wait_signal_kernel(mkx_proxy_dev d, uint32_t slot,
                                   uint64_t value, int *rc) {
  rc[0] = wait_signal(d, slot, value);
}

__global__ void bad_kernel(mkx_proxy_dev d, int to, uint32_t src, uint32_t dst,
                           uint32_t bad_region, uint32_t slot, int *rc) {
  uint64_t seq = 0;
  const int b = (int)blockIdx.x;
  int r = cta_post(d, to, src, b == 0 ? bad_region : dst, 0, 16 * (uint64_t)b,
                   16, slot, 1, &seq);
  if (r == 0) r = cta_wait_complete(d, seq);
  if (cta_leader()) rc[b] = r;
}

int launched(cudaError_t e) { return e == cudaSuccess ? 0 : (int)e; }

}  // namespace

extern "C" int pg_exchange_run(const mkx_proxy_dev *d, const pg_exchange *x,
                               cudaStream_t s) {
  if (x->chunks < 1 || x->chunks > PG_MAX_CHUNKS || x->bytes % 16) return -1;
  exchange_kernel<<<2 * x->ctas, kThreads, 0, s>>>(*d, *x);
  return launched(cudaGetLastError());
}

extern "C" int pg_post_many(const mkx_proxy_dev *d, int to, uint32_t src,
                            uint32_t dst, uint32_t slot, int count, int *rc,
                            int *posted, cudaStream_t s) {
  post_many_kernel<<<1, 1, 0, s>>>(*d, to, src, dst, slot, count, rc, posted);
  return launched(cudaGetLastError());
}

extern "C" int pg_wait_signal(const mkx_proxy_dev *d, uint32_t slot,
                              uint64_t value, int *rc, cudaStream_t s) {
  wait_signal_kernel<<<1, 1, 0, s>>>(*d, slot, value, rc);
  return launched(cudaGetLastError());
}

extern "C" int pg_bad_command(const mkx_proxy_dev *d, int ctas, int to,
                              uint32_t src, uint32_t dst, uint32_t bad_region,
                              uint32_t slot, int *rc, cudaStream_t s) {
  bad_kernel<<<ctas, kThreads, 0, s>>>(*d, to, src, dst, bad_region, slot, rc);
  return launched(cudaGetLastError());
}
