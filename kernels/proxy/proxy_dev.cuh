/*
 * The GPU side of the network proxy: a kernel's producer for the
 * command ring of src/proxy (proxy.h), and bounded waits for completions
 * and for signal words.  The ring and the signal words are host memory
 * mapped for the GPU (src/proxy/proxy_gpu.c); the descriptor is
 * mkx_proxy_dev (proxy_dev.h).
 *
 * The protocol is mkx_proxy_post's, step for step:
 *   seq = ++reserved            system-scope atomic on the mapped ring
 *   wait seq - completed <= entries     (acquire; bounded by %globaltimer)
 *   fill cmd[(seq - 1) % entries]       three 16-byte stores and the value
 *   cmd.seq = seq                        last, st.release.sys
 * The proxy thread takes the slot once it reads seq, posts it to the
 * transport and advances `completed` over the finished prefix; a send
 * buffer may be rewritten once completed >= its command's seq.
 *
 * Every wait gives up, with the code, after timeout_ns or as soon as the
 * ring's error word is set (a bad command, a transport error, a lost peer,
 * or mkx_proxy_stop); the first failure is recorded in the descriptor's
 * status record (MKX_PROXY_AT_*) for the host.  A producer that took a
 * ticket and then ran out of time leaves its slot empty for ever, so it
 * sets the ring's error word itself (MKX_ERR_TIMEOUT): the proxy and every
 * other producer then stop instead of waiting behind it.
 *
 * Threads: the mkx::proxy::post/wait_* functions are for one thread; the
 * cta_* versions are called by every thread of a CTA (they synchronise
 * it, so data the CTA wrote before cta_post is in the command, and a
 * buffer may be rewritten by any thread after cta_wait_complete).
 *
 * Atomicity: the ticket is a GPU atomic on host memory.  It is atomic
 * among the GPU's threads; a host thread must not take tickets on the same
 * ring at the same time (that would need hostNativeAtomicSupported).
 */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "common/sys_access.cuh"
#include "proxy/proxy_dev.h"
#include "proxy/proxy_layout.h"

namespace mkx {
namespace proxy {

/* mkx_proxy_cmd and the ring header of proxy.h, as plain words. */
struct __align__(16) Cmd {
  uint32_t op;
  int32_t peer;
  uint32_t src, dst;
  uint64_t src_off, dst_off, len;
  uint32_t slot, pad;
  uint64_t value;
  uint64_t seq;
};

struct RingHeader {
  uint64_t reserved;
  char pad0[56];
  uint64_t consumed;
  uint64_t completed;
  int32_t error;
  uint32_t entries;
  char pad1[40];
};

static_assert(sizeof(Cmd) == MKX_PROXY_CMD_BYTES, "command size");
static_assert(offsetof(Cmd, op) == MKX_PROXY_CMD_OP, "cmd.op");
static_assert(offsetof(Cmd, peer) == MKX_PROXY_CMD_PEER, "cmd.peer");
static_assert(offsetof(Cmd, src) == MKX_PROXY_CMD_SRC, "cmd.src");
static_assert(offsetof(Cmd, dst) == MKX_PROXY_CMD_DST, "cmd.dst");
static_assert(offsetof(Cmd, src_off) == MKX_PROXY_CMD_SRC_OFF, "cmd.src_off");
static_assert(offsetof(Cmd, dst_off) == MKX_PROXY_CMD_DST_OFF, "cmd.dst_off");
static_assert(offsetof(Cmd, len) == MKX_PROXY_CMD_LEN, "cmd.len");
static_assert(offsetof(Cmd, slot) == MKX_PROXY_CMD_SLOT, "cmd.slot");
static_assert(offsetof(Cmd, pad) == MKX_PROXY_CMD_PAD, "cmd.pad");
static_assert(offsetof(Cmd, value) == MKX_PROXY_CMD_VALUE, "cmd.value");
static_assert(offsetof(Cmd, seq) == MKX_PROXY_CMD_SEQ, "cmd.seq");
static_assert(sizeof(RingHeader) == MKX_PROXY_HEADER_BYTES, "ring header");
static_assert(offsetof(RingHeader, reserved) == MKX_PROXY_OFF_RESERVED, "reserved");
static_assert(offsetof(RingHeader, consumed) == MKX_PROXY_OFF_CONSUMED, "consumed");
static_assert(offsetof(RingHeader, completed) == MKX_PROXY_OFF_COMPLETED, "completed");
static_assert(offsetof(RingHeader, error) == MKX_PROXY_OFF_ERROR, "error");
static_assert(offsetof(RingHeader, entries) == MKX_PROXY_OFF_ENTRIES, "entries");
static_assert(MKX_PROXY_OFF_CMD == MKX_PROXY_HEADER_BYTES, "commands follow the header");
/* The 48 bytes before `value` go as three 16-byte stores. */
static_assert(MKX_PROXY_CMD_VALUE == 48 && MKX_PROXY_CMD_SEQ == 56, "store plan");

/* ---- system-scope accesses (the other side is a host thread; loads,
 * stores and the timer: common/sys_access.cuh) ---- */

__device__ __forceinline__ uint64_t fetch_add_sys(uint64_t *p, uint64_t v) {
  uint64_t old;
  asm volatile("atom.relaxed.sys.global.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
  return old;
}

__device__ __forceinline__ RingHeader *header(const mkx_proxy_dev &d) { return reinterpret_cast<RingHeader *>(d.ring); }
__device__ __forceinline__ Cmd *slot_of(const mkx_proxy_dev &d, uint64_t seq) {
  return reinterpret_cast<Cmd *>(static_cast<char *>(d.ring) + MKX_PROXY_OFF_CMD) +
         ((seq - 1) & (uint64_t)(d.entries - 1));
}

/* The MKX code that stopped the proxy, 0 while it runs. */
__device__ __forceinline__ int ring_error(const mkx_proxy_dev &d) { return sys::ld_acquire(&header(d)->error); }

/* Record the first failure of the kernels sharing d.status. */
__device__ __forceinline__ void report(const mkx_proxy_dev &d, int code, int where, uint32_t slot, uint64_t what,
                                       uint64_t seen) {
  mkx_proxy_dev_status *st = d.status;
  if (!st || code == 0) return;
  if (atomicCAS_system(&st->code, 0, -1) == 0) {
    st->where = where;
    st->block = (int32_t)blockIdx.x;
    st->slot = slot;
    st->what = what;
    st->seen = seen;
    __threadfence_system();
    *(volatile int32_t *)&st->code = code;
    __threadfence_system();
  }
}

/* Spin until ready() (checked first, so work that finished before the
 * proxy stopped still counts), the ring's error word, or the bound. */
template <typename Ready>
__device__ __forceinline__ int wait_until(const mkx_proxy_dev &d, Ready ready) {
  const uint64_t t0 = sys::globaltimer();
  unsigned nap = 32;
  for (;;) {
    if (ready()) return 0;
    int err = ring_error(d);
    if (err != 0) return err;
    if (sys::globaltimer() - t0 > d.timeout_ns) return MKX_PROXY_DEV_ERR_TIMEOUT;
    __nanosleep(nap);
    if (nap < 2048) nap *= 2;
  }
}

/* Post one write-with-signal: `len` bytes at src_off of region `src` to
 * dst_off of region `dst` at rank `peer`, then the peer's signal word
 * `slot` becomes `value`.  *seq receives the command's number (for
 * wait_complete), also on failure.  One thread; the data it names must be
 * written (and, if by other threads, synchronised with this one) before. */
__device__ __forceinline__ int post(const mkx_proxy_dev &d, int peer, uint32_t src, uint32_t dst, uint64_t src_off,
                                    uint64_t dst_off, uint64_t len, uint32_t slot, uint64_t value, uint64_t *seq) {
  RingHeader *h = header(d);
  *seq = 0;
  int err = ring_error(d);
  if (err != 0) { /* no ticket on a dead ring: it would be left unfilled */
    report(d, err, MKX_PROXY_AT_POST, slot, 0, 0);
    return err;
  }
  /* The data (device memory the transport reads, maybe by DMA) first. */
  __threadfence_system();
  const uint64_t s = fetch_add_sys(&h->reserved, 1) + 1;
  *seq = s;
  const uint64_t entries = d.entries;
  int rc = wait_until(d, [&] { return s - sys::ld_acquire(&h->completed) <= entries; });
  if (rc != 0) {
    /* This ticket's slot will never be filled: nobody can pass it. */
    if (rc == MKX_PROXY_DEV_ERR_TIMEOUT) atomicCAS_system(&h->error, 0, rc);
    report(d, rc, MKX_PROXY_AT_POST, slot, s, sys::ld_acquire(&h->completed));
    return rc;
  }
  Cmd c;
  c.op = MKX_PROXY_OP_WRITE;
  c.peer = peer;
  c.src = src;
  c.dst = dst;
  c.src_off = src_off;
  c.dst_off = dst_off;
  c.len = len;
  c.slot = slot;
  c.pad = 0;
  c.value = value;
  Cmd *out = slot_of(d, s);
  const uint4 *w = reinterpret_cast<const uint4 *>(&c);
  uint4 *o = reinterpret_cast<uint4 *>(out);
  o[0] = w[0];
  o[1] = w[1];
  o[2] = w[2];
  *(volatile uint64_t *)&out->value = value;
  sys::st_release(&out->seq, s); /* the proxy takes the slot from here */
  return 0;
}

/* Wait until command `seq` and every earlier one are complete: their
 * source buffers may be rewritten. */
__device__ __forceinline__ int wait_complete(const mkx_proxy_dev &d, uint64_t seq) {
  RingHeader *h = header(d);
  int rc = wait_until(d, [&] { return sys::ld_acquire(&h->completed) >= seq; });
  if (rc != 0) report(d, rc, MKX_PROXY_AT_COMPLETE, 0, seq, sys::ld_acquire(&h->completed));
  return rc;
}

/* Wait until this rank's signal word `slot` is >= value: the data of the
 * write that set it has landed (tcp copies it to the device before the
 * signal; verbs writes the signal after the data on one QP). */
__device__ __forceinline__ int wait_signal(const mkx_proxy_dev &d, uint32_t slot, uint64_t value) {
  if (slot >= d.num_signals) {
    report(d, MKX_PROXY_DEV_ERR_INVALID_ARG, MKX_PROXY_AT_SIGNAL, slot, value, 0);
    return MKX_PROXY_DEV_ERR_INVALID_ARG;
  }
  const uint64_t *w = d.signals + slot;
  int rc = wait_until(d, [&] { return sys::ld_acquire(w) >= value; });
  if (rc != 0) report(d, rc, MKX_PROXY_AT_SIGNAL, slot, value, sys::ld_acquire(w));
  return rc;
}

/* ---- the same for a whole CTA (every thread calls; 1-D blocks) ---- */

__device__ __forceinline__ bool cta_leader() { return threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0; }

__device__ __forceinline__ int cta_post(const mkx_proxy_dev &d, int peer, uint32_t src, uint32_t dst, uint64_t src_off,
                                        uint64_t dst_off, uint64_t len, uint32_t slot, uint64_t value, uint64_t *seq) {
  __shared__ int s_rc;
  __shared__ uint64_t s_seq;
  __syncthreads(); /* the CTA's writes of the data are done */
  if (cta_leader()) s_rc = post(d, peer, src, dst, src_off, dst_off, len, slot, value, &s_seq);
  __syncthreads();
  *seq = s_seq;
  return s_rc;
}

__device__ __forceinline__ int cta_wait_complete(const mkx_proxy_dev &d, uint64_t seq) {
  __shared__ int s_rc;
  __syncthreads();
  if (cta_leader()) s_rc = wait_complete(d, seq);
  __syncthreads();
  return s_rc;
}

__device__ __forceinline__ int cta_wait_signal(const mkx_proxy_dev &d, uint32_t slot, uint64_t value) {
  __shared__ int s_rc;
  __syncthreads();
  if (cta_leader()) s_rc = wait_signal(d, slot, value);
  __syncthreads();
  return s_rc;
}

}  // namespace proxy
}  // namespace mkx
