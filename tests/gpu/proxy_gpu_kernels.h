/* Kernels of tests/gpu/test_proxy_gpu (C interface; built by nvcc into
 * tests/libproxygputest.la).  Every kernel drives the proxy through
 * kernels/proxy/proxy_dev.cuh and leaves each CTA's MKX code in rc[]. */
#ifndef MKX_TESTS_PROXY_GPU_KERNELS_H
#define MKX_TESTS_PROXY_GPU_KERNELS_H

#include <cuda_runtime.h>
#include <stdint.h>
#include "proxy/proxy_dev.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define PG_HD __host__ __device__
#else
#define PG_HD
#endif

#define PG_MAX_CHUNKS 8

/* Word w of message `msg` that CTA `cta` of rank `src` sends. */
static inline PG_HD uint32_t pg_word(int src, int cta, int msg, uint32_t w) {
  uint32_t x = (uint32_t)src * 0x9E3779B1u ^ (uint32_t)cta * 0x85EBCA77u ^
               (uint32_t)msg * 0xC2B2AE3Du ^ w * 0x27D4EB2Fu;
  x ^= x >> 15;
  x *= 0x2C1B3C6Du;
  x ^= x >> 12;
  return x;
}

/* CTAs [0, ctas) produce: CTA b sends `msgs` messages of `bytes` bytes to
 * rank `to`, each from one of its `chunks` send chunks (rewritten only
 * after the command that used it last has completed), into place
 * ((rank * ctas + b) * msgs + i) * bytes of the peer's receive region,
 * with signal slot rank * ctas + b set to base + i + 1.  CTAs [ctas,
 * 2 ctas) consume: CTA ctas + b waits for each of rank `from`'s messages
 * of CTA b in turn and compares it, in the kernel, word by word (mismatched
 * words are added to *bad). */
typedef struct pg_exchange {
  int rank, to, from;
  int ctas, msgs, chunks;
  uint32_t bytes;   /* a multiple of 16 */
  uint64_t base;    /* signal values of this run start above it */
  char *send;       /* region send_region: ctas * chunks * bytes */
  const char *recv; /* region recv_region */
  uint32_t send_region, recv_region;
  int *rc; /* [2 * ctas] */
  unsigned long long *bad;
} pg_exchange;
int pg_exchange_run(const mkx_proxy_dev *d, const pg_exchange *x,
                    cudaStream_t s);

/* One CTA posts `count` writes of 16 bytes (to rank `to`, region src ->
 * dst, slot `slot`): rc[0] is the first failure, *posted the number of
 * posts that succeeded. */
int pg_post_many(const mkx_proxy_dev *d, int to, uint32_t src, uint32_t dst,
                 uint32_t slot, int count, int *rc, int *posted,
                 cudaStream_t s);

/* One CTA waits for signal `slot` >= value: rc[0]. */
int pg_wait_signal(const mkx_proxy_dev *d, uint32_t slot, uint64_t value,
                   int *rc, cudaStream_t s);

/* `ctas` CTAs post one 16-byte write each, CTA 0's naming region
 * `bad_region`, and wait for their own completion: rc[b]. */
int pg_bad_command(const mkx_proxy_dev *d, int ctas, int to, uint32_t src,
                   uint32_t dst, uint32_t bad_region, uint32_t slot, int *rc,
                   cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
