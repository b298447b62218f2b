/*
 * Flags between GPUs of a node (kernels/tp): release/acquire at system scope
 * on unicast peer memory (never NVLink multicast), bounded waits, and the
 * error word a timed-out wait leaves for the host.
 *
 * Epoch scheme: every call of a plan bumps a per-workspace epoch on the GPU
 * (tp_prologue), never on the host, so back-to-back calls and CUDA-graph
 * replays need no host work.  Producers write or add to flags; consumers
 * wait for flag >= epoch (or >= epoch * producers for counters).  Flags are
 * never reset, so a late flag of an old epoch is simply too small.
 */
#pragma once
#include <stdint.h>
#include "common/sys_access.cuh"
#include "tp/tp.h"

namespace mkx {
namespace tp {

using sys::ld_acquire;
using sys::st_release;
using sys::globaltimer;

/* The int at byte offset `off` of this rank's own workspace (MKX_TP_OFF_*). */
__device__ __forceinline__ int *own_word(const mkx_tp_sync &s, int off) {
  return reinterpret_cast<int *>(s.ws[s.rank] + off);
}

/* a >= b for counters that may wrap (epochs never differ by 2^31). */
__device__ __forceinline__ bool geq(int a, int b) { return (int)((unsigned)a - (unsigned)b) >= 0; }

/* Record the first timeout of the plan in the host-mapped error word:
 * err[0] = MKX_TP_ERR_TIMEOUT, err[1] = the rank that did not arrive,
 * err[2] = what was waited for (tile index), err[3] = where (MKX_TP_AT_*). */
__device__ __forceinline__ void report_timeout(volatile int *err, int peer, int tile, int where) {
  if (!err) return;
  if (atomicCAS((int *)err, 0, -1) == 0) {
    err[1] = peer;
    err[2] = tile;
    err[3] = where;
    __threadfence_system();
    err[0] = MKX_TP_ERR_TIMEOUT;
    __threadfence_system();
  }
}

/* Spin until *flag >= target, at most timeout_ns (then report and return
 * false: the caller goes on with whatever data is there, so nothing hangs;
 * the call is then reported as MKX_ERR_TIMEOUT).  Once any wait of the
 * plan has timed out the others give up at once instead of each waiting
 * the full bound. */
__device__ __forceinline__ bool wait_geq(const int *flag, int target, uint64_t timeout_ns, volatile int *err,
                                         int peer, int tile, int where) {
  if (geq(ld_acquire(flag), target)) return true;
  const uint64_t t0 = globaltimer();
  for (unsigned i = 1;; ++i) {
    __nanosleep(100);
    if (geq(ld_acquire(flag), target)) return true;
    /* the error word is host memory: every read crosses PCIe (and every
     * waiting CTA reading it each spin slowed other CTAs' system-scope
     * fences to ~0.7 ms on H200), so look every 256 spins */
    if (i % 256) continue;
    if (err && err[0] != 0) return false;
    if (globaltimer() - t0 > timeout_ns) {
      report_timeout(err, peer, tile, where);
      return false;
    }
  }
}

/* All ranks of s meet at `off` (an int per rank in every workspace) for
 * this epoch: every block publishes (idempotent, so no block depends on
 * another being scheduled), then thread q waits for rank q.  The block's
 * earlier stores, and the stream's earlier kernels', are visible to the
 * peers before its arrival. */
__device__ __forceinline__ void meet(const mkx_tp_sync &s, int off, int epoch, int where) {
  if (threadIdx.x == 0) {
    __threadfence_system();
    for (int q = 0; q < s.size; ++q) st_release(reinterpret_cast<int *>(s.ws[q] + off) + s.rank, epoch);
  }
  if ((int)threadIdx.x < s.size)
    wait_geq(own_word(s, off) + threadIdx.x, epoch, s.timeout_ns, s.err,
             threadIdx.x, -1, where);
  __syncthreads();
}

/* Thread 0 of each block, once the block's work is done: true in the last
 * block to get here (the self-resetting count at MKX_TP_OFF_COUNT), after
 * a system fence, so every block's stores are visible before what the
 * last one does next (threadFenceReduction pattern at system scope). */
__device__ __forceinline__ bool last_block(const mkx_tp_sync &s) {
  __threadfence_system();
  int *count = own_word(s, MKX_TP_OFF_COUNT);
  if (atomicAdd(count, 1) != (int)gridDim.x - 1) return false;
  __threadfence_system();
  *count = 0;
  return true;
}

}  // namespace tp
}  // namespace mkx
