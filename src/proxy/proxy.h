/* The GPU-driven proxy: producers (GPU CTAs, or host threads in tests)
 * write fixed-size commands into a ring in host memory (mapped for the
 * GPU); one proxy thread per GPU, pinned near the NIC, drains the ring,
 * posts each command to the transport as a write-with-signal, and
 * publishes in-order completions so producers reuse send buffers only
 * when the transport is done with them.
 *
 * Protocol (every step bounded by the timeout):
 *   producer: seq = ++reserved (atomic); wait until seq - completed <=
 *             entries; fill cmd[seq % entries]; store cmd.seq = seq last,
 *             with release semantics.
 *   proxy:    takes cmd[consumed % entries] once its seq == consumed + 1,
 *             posts it, counts it consumed; on each transport completion
 *             marks it done and advances `completed` over the done prefix.
 *   errors:   a bad command, a transport error or a lost peer stops the
 *             proxy with `error` set; producers and waiters see it and
 *             return it instead of waiting.  mkx_proxy_stop leaves
 *             MKX_ERR_NET there too (when nothing else was), so a producer
 *             that comes after the proxy is gone fails at once.
 *
 * GPU producers (kernels/proxy/proxy_dev.cuh, set up by proxy_gpu.h) follow
 * the same protocol on a ring in host memory mapped for the GPU, with the
 * layout of proxy_layout.h.  A ring has producers of one kind at a time:
 * the ticket is a system-scope atomic from the GPU, which is atomic among
 * that GPU's threads but not against a host thread's atomic on the same
 * word unless the device reports hostNativeAtomicSupported. */
#ifndef MKX_PROXY_PROXY_H
#define MKX_PROXY_PROXY_H

#include <stdatomic.h>
#include <stdint.h>
#include "net/net.h"
#include "proxy/proxy_layout.h" /* offsets shared with the GPU producer */

/* One command: 64 bytes, so a producer writes it with a few 16-byte
 * stores and the slot never straddles cache lines. */
typedef struct mkx_proxy_cmd {
  uint32_t op;  /* MKX_PROXY_OP_* */
  int32_t peer; /* destination rank */
  uint32_t src; /* local region index (mkx_proxy_add_region) */
  uint32_t dst; /* region index at the peer (same numbering) */
  uint64_t src_off, dst_off, len;
  uint32_t slot; /* the peer's signal word to set after the data */
  uint32_t pad;
  uint64_t value;       /* the signal's new value */
  _Atomic uint64_t seq; /* written last: the slot holds command `seq` */
} mkx_proxy_cmd;

typedef struct mkx_proxy_ring {
  _Atomic uint64_t reserved; /* tickets handed to producers */
  char pad0[56];
  _Atomic uint64_t consumed;  /* commands taken by the proxy */
  _Atomic uint64_t completed; /* commands finished, in order */
  _Atomic int32_t error;      /* MKX code that stopped the proxy, 0 if none */
  uint32_t entries;           /* a power of two */
  char pad1[40];
  mkx_proxy_cmd cmd[];
} mkx_proxy_ring;

typedef struct mkx_proxy mkx_proxy;

/* A proxy over an opened, connected endpoint.  entries: ring size (a power
 * of two).  The ring is ordinary host memory here; the GPU path allocates
 * it mapped (ring_mem != NULL: caller-provided, mkx_proxy_ring_bytes bytes,
 * 64-byte aligned; see proxy_gpu.h). */
size_t mkx_proxy_ring_bytes(uint32_t entries);
int mkx_proxy_create(mkx_net *net, uint32_t entries, void *ring_mem,
                     int64_t timeout_ms, mkx_proxy **out);
mkx_proxy_ring *mkx_proxy_ring_of(mkx_proxy *p);

/* Region `index` = the next free index, the same on every rank when
 * ranks add regions in the same order: mr is this rank's registration,
 * keys[r] rank r's key for the same region (mkx_net_exchange_keys).
 * Like mkx_proxy_set_region, only while the proxy is idle. */
int mkx_proxy_add_region(mkx_proxy *p, const mkx_net_mr *mr,
                         const mkx_net_rkey *keys, uint32_t *index);

/* Set region `index` (below 64; indices may be left unset, and a command
 * naming one fails) while the proxy is idle:
 * every command posted so far is complete.  The host thread that then
 * posts commands naming it is ordered after the update by the ring. */
int mkx_proxy_set_region(mkx_proxy *p, uint32_t index, const mkx_net_mr *mr,
                         const mkx_net_rkey *keys);

/* Start the proxy thread, pinned to the CPUs of `cpulist` ("0-13,112-125";
 * NULL or "" leaves it unpinned; a failure to pin is logged, not fatal). */
int mkx_proxy_start(mkx_proxy *p, const char *cpulist);
/* Stop the thread after the commands already posted are done (bounded).
 * The ring's error word is then MKX_ERR_NET if nothing else was there:
 * later posts and waits (a kernel still running) fail at once. */
int mkx_proxy_stop(mkx_proxy *p);
void mkx_proxy_destroy(mkx_proxy *p);

/* What the proxy has cost and carried since it was created: the CPU time
 * of its thread (busy polling and naps included: what a core gives to it),
 * the commands it took and their payload bytes.  From the thread that
 * owns the proxy (not during mkx_proxy_stop).
 * busy_ns: wall time with at least one taken command not yet complete
 * (the transport at work; an interval counts once it has ended).  A
 * transport that completes a write inside its post (shm placing device
 * memory) adds next to nothing. */
typedef struct mkx_proxy_stats {
  uint64_t cpu_ns, commands, bytes, busy_ns;
} mkx_proxy_stats;
void mkx_proxy_get_stats(const mkx_proxy *p, mkx_proxy_stats *s);

/* Host-side producer: post one command; *seq receives its sequence
 * number (0 when the ring had stopped already).  Safe from several
 * threads. */
int mkx_proxy_post(mkx_proxy_ring *r, const mkx_proxy_cmd *c, uint64_t *seq,
                   int64_t timeout_ms);
/* Wait until command `seq` (and every earlier one) is complete. */
int mkx_proxy_wait(mkx_proxy_ring *r, uint64_t seq, int64_t timeout_ms);

#endif
