/*
 * Flags between GPUs of a node, for the kernels of every fused path:
 * release/acquire at system scope on unicast peer memory (never NVLink
 * multicast), bounded waits, and the error word a timed-out wait leaves for
 * the host.
 *
 * Epoch scheme: every call of a plan bumps a per-workspace epoch on the GPU
 * (fused_prologue_kernel, fused/sync.cu), never on the host, so
 * back-to-back calls and CUDA-graph replays need no host work.  Producers write or add to flags; consumers
 * wait for flag >= epoch (or >= epoch * producers for counters).  Flags are
 * never reset, so a late flag of an old epoch is simply too small.
 */
#pragma once
#include <stdint.h>
#include "common/sys_access.cuh"
#include "fused/fused.h"

namespace mkx {
namespace fused {

using sys::globaltimer;
using sys::ld_acquire;
using sys::st_release;

/* The int at byte offset `off` of this rank's own workspace (MKX_FUSED_OFF_*). */
__device__ __forceinline__ int *own_word(const mkx_fused_sync &s, int off) {
  return reinterpret_cast<int *>(s.ws[s.rank] + off);
}

/* a >= b for counters that may wrap (epochs never differ by 2^31). */
__device__ __forceinline__ bool geq(int a, int b) { return (int)((unsigned)a - (unsigned)b) >= 0; }

/* A rank that gives up tells every peer, since a peer that was merely late
 * would otherwise finish its run on what the one that gave up sent after
 * giving up, and return success: told[q] (an int per rank at
 * MKX_FUSED_OFF_TOLD of every workspace, the giver's own included) =
 * told_word(...) once rank q gave up.  Never reset: the communicator is
 * unusable from then on. */
__device__ __forceinline__ int told_word(int origin, int peer, int where) {
  return 1 << 28 | origin << 20 | where << 8 | (peer + 1);
}

/* A record in a host-mapped error word (fused/fused.h): claimed by the first to
 * get there (err[0]: 0 -> -1; false: one is there already), then words
 * 1..N, then the code in err[0], each visible to the host before the
 * next (the host reads the code first). */
__device__ __forceinline__ bool claim_error(volatile int *err) { return err && atomicCAS((int *)err, 0, -1) == 0; }
template <int N>
__device__ __forceinline__ void publish_error(volatile int *err, int code, const int (&words)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) err[1 + i] = words[i];
  __threadfence_system();
  err[0] = code;
  __threadfence_system();
}

/* Record the first failure of the plan in the host-mapped error word
 * (err[0] = code, err[1] = peer, err[2] = tile, err[3] = where, err[7] =
 * the workspace's epoch), after
 * telling the peers (first: another wait of this rank that sees err[0]
 * set goes on and may publish garbage, and a peer that takes it must find
 * the tell by then).  err[0] = -1 while it is being written. */
__device__ __forceinline__ void give_up(const mkx_fused_sync &s, int code, int peer, int tile, int where, int tell,
                                        int my_peer = -1, int my_tile = -1, int my_where = 0) {
  volatile int *err = s.err;
  if (!claim_error(err)) return;
  for (int q = 0; q < s.size; ++q) st_release(reinterpret_cast<int *>(s.ws[q] + MKX_FUSED_OFF_TOLD) + s.rank, tell);
  const int epoch = *(volatile const int *)own_word(s, MKX_FUSED_OFF_EPOCH);
  publish_error(err, code, {peer, tile, where, my_peer, my_tile, my_where, epoch});
}

/* Whether the run is void: this rank gave up on it (give_up marks its own
 * entry of told[] too) or a peer told it so.  Kernels that store into a
 * peer's output buffers read it at their start: after a failed meet the
 * peer may not have joined the run, and its buffers are the user's (a
 * give-up later in the kernel is not seen).  Device memory only. */
__device__ __forceinline__ bool run_void(const int *told, int size) {
  volatile const int *w = told;
  bool any = false;
  for (int q = 0; q < size; ++q) any |= w[q] != 0;
  return any;
}
__device__ __forceinline__ bool run_void(const mkx_fused_sync &s) {
  return run_void(own_word(s, MKX_FUSED_OFF_TOLD), s.size);
}

/* If a peer told this rank that it gave up (and no failure of this rank's
 * own is recorded yet), record MKX_FUSED_ERR_PEER naming the rank that gave
 * up first, the rank it waited for (as tile) and where, and the wait this
 * rank was in (my_*: none after its last wait), pass the tell on, and
 * return true.  Called in every wait, and after a block's last wait:
 * whatever the block took from the peers it took after any tell sent
 * before it (release/acquire), so a tell found then voids the run. */
__device__ __forceinline__ bool peer_gave_up(const mkx_fused_sync &s, int my_peer = -1, int my_tile = -1,
                                             int my_where = 0) {
  /* relaxed loads, all in flight at once: they follow the caller's
   * acquires in program order, which is all the order needed */
  volatile const int *w = own_word(s, MKX_FUSED_OFF_TOLD);
  for (int q = 0; q < s.size; ++q) {
    const int v = w[q];
    if (!v) continue;
    give_up(s, MKX_FUSED_ERR_PEER, v >> 20 & 0xff, (v & 0xff) - 1, v >> 8 & 0xff, v, my_peer, my_tile, my_where);
    return true;
  }
  return false;
}

/* Spin until ready(), at most timeout_ns (then report, tell the
 * peers and return false: the caller goes on with whatever data is there,
 * so nothing hangs; the call is then reported as MKX_ERR_TIMEOUT).  Once
 * any wait of the plan has given up, or a peer has, the others give up
 * at once instead of each waiting the full bound. */
template <typename Ready>
__device__ __forceinline__ bool wait_for(Ready ready, const mkx_fused_sync &s, int peer, int tile, int where) {
  if (ready()) return true;
  const uint64_t t0 = globaltimer();
  for (unsigned i = 1;; ++i) {
    __nanosleep(100);
    if (ready()) return true;
    /* the error word is host memory: every read crosses PCIe, and many
     * waiting CTAs reading it each spin slow other CTAs' system-scope
     * fences by orders of magnitude, so look every 256 spins */
    if (i % 256) continue;
    if (s.err && ((volatile const int *)s.err)[0] > 0) return false;
    if (peer_gave_up(s, peer, tile, where)) return false;
    if (globaltimer() - t0 > s.timeout_ns) {
      give_up(s, MKX_FUSED_ERR_TIMEOUT, peer, tile, where, told_word(s.rank, peer, where));
      return false;
    }
  }
}

__device__ __forceinline__ bool wait_geq(const int *flag, int target, const mkx_fused_sync &s, int peer, int tile,
                                         int where) {
  return wait_for([&] { return geq(ld_acquire(flag), target); }, s, peer, tile, where);
}

/* The same on a network signal word (host memory mapped for the GPU; the
 * endpoint sets it after the data, kernels/proxy/proxy_dev.h), for a peer
 * on another node: its values only grow. */
__device__ __forceinline__ bool wait_signal(const uint64_t *word, uint64_t target, const mkx_fused_sync &s, int peer,
                                            int tile, int where) {
  return wait_for([&] { return ld_acquire(word) >= target; }, s, peer, tile, where);
}

/* All ranks of s meet at `off` (an int per rank in every workspace) for
 * this epoch: every block publishes (idempotent, so no block depends on
 * another being scheduled), then thread q waits for rank q.  The block's
 * earlier stores, and the stream's earlier kernels', are visible to the
 * peers before its arrival. */
__device__ __forceinline__ void meet(const mkx_fused_sync &s, int off, int epoch, int where) {
  if (threadIdx.x == 0) {
    __threadfence_system();
    for (int q = 0; q < s.size; ++q) st_release(reinterpret_cast<int *>(s.ws[q] + off) + s.rank, epoch);
  }
  if ((int)threadIdx.x < s.size) wait_geq(own_word(s, off) + threadIdx.x, epoch, s, threadIdx.x, -1, where);
  __syncthreads();
}

/* The count of this rank's runs on the communicator, in its start records
 * (kernels/fused/fused.h), and the number of the run about to start: one
 * more (0 where the call has no start records).  The prologue stores it at
 * once, the split path's last block at the end of the run, with its
 * epoch. */
__device__ __forceinline__ int *runs_word(const mkx_fused_sync &s) {
  return reinterpret_cast<int *>(s.starts[s.rank] + MKX_FUSED_STARTS_OFF_RUNS);
}
__device__ __forceinline__ int next_run(const mkx_fused_sync &s) {
  return s.starts[s.rank] ? *(volatile const int *)runs_word(s) + 1 : 0;
}

/* Thread q of meet_start: wait for rank q's arrival at the call barrier,
 * or for its start record to show that its n-th run is another plan or
 * call, or that it is past its n-th run (it ran something else then),
 * which no wait for its arrival would see end. */
__device__ __forceinline__ void wait_start(const mkx_fused_sync &s, int q, int e, int n) {
  const int *bar = own_word(s, MKX_FUSED_OFF_BAR) + q;
  const uint64_t *theirs =
      n ? reinterpret_cast<const uint64_t *>(s.starts[s.rank] + MKX_FUSED_STARTS_OFF_START) + q : nullptr;
  uint64_t other = 0;
  bool mismatch = false;
  const auto ready = [&] {
    if (geq(ld_acquire(bar), e)) return true;
    if (!theirs) return false;
    other = ld_acquire(theirs);
    const int runs = (int)(other >> 32);
    if (!(runs == n && (unsigned)other != s.ident) && !(other && !geq(n, runs))) return false;
    /* a peer past its n-th run may have arrived since the bar was read
     * (stalled between the two loads, in time slices say): its arrival
     * was released before that record */
    mismatch = !geq(ld_acquire(bar), e);
    return true;
  };
  if (wait_for(ready, s, q, -1, MKX_FUSED_AT_BARRIER) && mismatch)
    give_up(s, MKX_FUSED_ERR_MISMATCH, q, (int)(unsigned)other, MKX_FUSED_AT_BARRIER,
            told_word(s.rank, q, MKX_FUSED_AT_MISMATCH), (int)s.ident, n, (int)(other >> 32));
}

/* The node's ranks meet at the call barrier (bar) for epoch e, as meet()
 * does, in run n (next_run): each block first puts this run's start
 * record (n, ident) into every peer's block, so that ranks that started
 * different plans or calls, each of which waits in a workspace of its
 * own, find it at once (MKX_FUSED_ERR_MISMATCH) instead of at the bound. */
__device__ __forceinline__ void meet_start(const mkx_fused_sync &s, int e, int n) {
  if (threadIdx.x == 0) {
    const uint64_t mine = (uint64_t)(unsigned)n << 32 | s.ident;
    __threadfence_system();
    for (int q = 0; q < s.size; ++q) {
      if (n) st_release(reinterpret_cast<uint64_t *>(s.starts[q] + MKX_FUSED_STARTS_OFF_START) + s.rank, mine);
      st_release(reinterpret_cast<int *>(s.ws[q] + MKX_FUSED_OFF_BAR) + s.rank, e);
    }
  }
  if ((int)threadIdx.x < s.size) wait_start(s, threadIdx.x, e, n);
  __syncthreads();
}

/* Thread 0 of each block, once the block's work is done: true in the last
 * block to get here (the self-resetting count at MKX_FUSED_OFF_COUNT), after
 * a system fence, so every block's stores are visible before what the
 * last one does next (threadFenceReduction pattern at system scope). */
__device__ __forceinline__ bool last_block(const mkx_fused_sync &s) {
  __threadfence_system();
  int *count = own_word(s, MKX_FUSED_OFF_COUNT);
  if (atomicAdd(count, 1) != (int)gridDim.x - 1) return false;
  __threadfence_system();
  *count = 0;
  return true;
}

}  // namespace fused
}  // namespace mkx
