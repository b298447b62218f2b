/*
 * What every fused path's kernels share (tensor-parallel calls, ring
 * attention, MoE): the layout of the symmetric workspace, the error word,
 * the wait sites it names, the sync descriptor every kernel of a call takes
 * and the call-level kernels of kernels/fused/sync.cu.  Includable from C11
 * (needs cuda_runtime.h, stdint.h).
 *
 * Every rank owns one symmetric workspace (same layout on every rank,
 * mapped into its node peers through CUDA IPC; MAX: MKX_FUSED_MAX, MAXCH:
 * MKX_FUSED_MAXCH):
 *
 *   +0     int epoch                this rank's call counter (GPU-side only)
 *   +64    int bar[MAX]             bar[q] = epoch at which rank q last arrived
 *   +192   int done[MAX]            GEMM+AllReduce: epoch at which owner q's
 *                                   reduced rows (clean tile rows) had all
 *                                   landed here
 *   +256   int count                late-row blocks finished (self-resetting)
 *   +320   int done_late[MAX]       GEMM+AllReduce: owner q's late rows landed
 *   +384   int late_ready[MAX]      rank q's late partials are complete
 *   +448   int pulled[MAX]          GEMM+RS/AR reading the peers' operands
 *                                   (mkx_tp_rs_pull): rank q's GEMM is done
 *   +512   int counters[MAX][MAXCH] GEMM+RS: sub-tiles of (owner, chunk)
 *                                   finished here; the copy engine waits on
 *                                   them; with SM pushes
 *                                   (mkx_tp_rs_desc.push_sm) instead the
 *                                   sub-tiles of (source, chunk) of this
 *                                   rank's rows landed in slot source (zeroed
 *                                   by the prologue of each call, before its
 *                                   arrival)
 *   +1024  int arrived[MAX][MAXCH]  GEMM+RS: epoch at which source s's
 *                                   partial of this rank's chunk c landed in
 *                                   slot s
 *   +1536  int drained[MAX]         split path: epoch at which rank q had
 *                                   read every rank's partial
 *                                   (mkx_tp_split_reduce)
 *   +1600  int pushed[MAX]          split path: epoch at which rank q's rows
 *                                   of A had landed in every gathered A
 *   +1664  int told[MAX]            nonzero once rank q gave up on a run (a
 *                                   wait ran out, or it was told): flags.cuh
 *   +4096  int src[src_cap]         src[i] = epoch: the copy engine copies
 *                                   these into peers' flags (graph-safe flag
 *                                   values)
 *   flags[flags_cap], data          at offsets fixed per workspace
 *                                   (src/ops/fused/workspace.c)
 *
 * Every flag holds the epoch at which it was last set (never a count), so
 * whatever operation or shape used a workspace before, its flags are all
 * below the current epoch: a workspace can be reused by any call.
 *
 * Every rank also owns one block of start records per communicator (made
 * with its first workspace, kept until MKX_Comm_free), where ranks that
 * run different plans meet, since each plan has a workspace of its own:
 *
 *   +0     int runs             this rank's prologues on the communicator
 *                               (GPU-side only, so graph replays count)
 *   +64    uint64 start[MAX]    start[q] = runs << 32 | ident of rank q's
 *                               latest prologue (mkx_fused_sync.ident)
 */
#ifndef MKX_KERNELS_FUSED_H
#define MKX_KERNELS_FUSED_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MKX_FUSED_MAX 8 /* ranks of a node the kernels handle */
#define MKX_FUSED_OFF_EPOCH 0
#define MKX_FUSED_OFF_BAR 64
#define MKX_FUSED_OFF_DONE 192
#define MKX_FUSED_OFF_COUNT 256
#define MKX_FUSED_OFF_DONE_LATE 320
#define MKX_FUSED_OFF_LATE_READY 384
#define MKX_FUSED_OFF_PULLED 448
#define MKX_FUSED_OFF_COUNTERS 512
#define MKX_FUSED_OFF_ARRIVED 1024
#define MKX_FUSED_MAXCH 16 /* chunk slots per owner (at most 8 used) */
#define MKX_FUSED_OFF_DRAINED 1536
#define MKX_FUSED_OFF_PUSHED 1600
#define MKX_FUSED_OFF_TOLD 1664
#define MKX_FUSED_OFF_SRC 4096
#define MKX_FUSED_STARTS_OFF_RUNS 0
#define MKX_FUSED_STARTS_OFF_START 64
#define MKX_FUSED_STARTS_BYTES 4096

/* The error word (host-mapped, MKX_FUSED_ERR_WORDS ints), the first failure
 * of a run:
 *   MKX_FUSED_ERR_TIMEOUT  a bounded wait of this rank ran out: err[1] =
 *                          the peer waited for (or -1), err[2] = tile,
 *                          err[3] = where;
 *   MKX_FUSED_ERR_PEER     a peer gave up on the run: err[1] = the rank
 *                          that gave up first, err[2] = the rank it waited
 *                          for (or -1), err[3] = where it waited; err[4..6]
 *                          = what this rank was waiting for when it was
 *                          told (peer, tile, where; where 0: no wait, told
 *                          after one);
 *   MKX_FUSED_ERR_MISMATCH at its prologue, rank err[1] had started
 *                          another run as its err[6]-th (err[2]: that
 *                          run's ident) while this rank's err[5]-th is
 *                          err[4] (where = MKX_FUSED_AT_BARRIER; a peer
 *                          this rank tells reports MKX_FUSED_ERR_PEER at
 *                          MKX_FUSED_AT_MISMATCH);
 *   all: err[7] = its workspace's epoch then (the run's; on the split
 *   path, which counts a run when it ends, the one before): which of the
 *   runs there failed, the host may have started many more since.
 * With both sides named, a stalled run says which rank waited on which.
 * (The values of MKX_ERR_SHAPE_MISMATCH, MKX_ERR_TIMEOUT and MKX_ERR_PEER.)  These void the run
 * and the communicator.  Words MKX_FUSED_ERR_INPUT.. hold apart the first
 * bad input a run found on the GPU (the MoE calls' expert ids and truncation
 * without a host wait, moe_engine.h): the run wrote no outputs, the
 * communicator stays usable, and the host clears the record once it has
 * reported it, so a timeout after it is still recorded. */
#define MKX_FUSED_ERR_WORDS 16
#define MKX_FUSED_ERR_INPUT 8
#define MKX_FUSED_ERR_MISMATCH 6
#define MKX_FUSED_ERR_TIMEOUT 11
#define MKX_FUSED_ERR_PEER 13
enum {
  MKX_FUSED_AT_BARRIER = 1,
  MKX_FUSED_AT_AG_TILE = 2,
  MKX_FUSED_AT_RS_TILE = 3,
  MKX_FUSED_AT_AR_DONE = 4,
  MKX_FUSED_AT_LATE = 5,
  MKX_FUSED_AT_DRAINED = 6,
  MKX_FUSED_AT_SPLIT_TILE = 7,
  MKX_FUSED_AT_KV_CHUNK = 8,
  MKX_FUSED_AT_MOE_ROWS = 9,
  MKX_FUSED_AT_MOE_OUT = 10,
  MKX_FUSED_AT_MOE_COUNTS = 11,
  MKX_FUSED_AT_MOE_EXPERT = 12,
  MKX_FUSED_AT_NET_ARRIVE = 13,
  MKX_FUSED_AT_NET_ROWS = 14,
  MKX_FUSED_AT_NET_SENT = 15,
  MKX_FUSED_AT_NODE_PART = 16,
  MKX_FUSED_AT_PULLED = 17,
  MKX_FUSED_AT_MISMATCH = 18
};

/* What every kernel of a call needs to meet its peers. */
typedef struct mkx_fused_sync {
  int rank, size;          /* local rank and node size */
  char *ws[MKX_FUSED_MAX]; /* every node rank's workspace, as mapped here */
  int src_n;               /* ints of src[] the prologue fills */
  uint64_t timeout_ns;
  int *err;                    /* device pointer of the host-mapped error word */
  int ctas;                    /* most CTAs of a kernel that waits for peers (0: one per SM);
               ranks sharing a GPU under MPS must not take them all */
  char *starts[MKX_FUSED_MAX]; /* every node rank's start records, as mapped
                                  here (NULL: the prologue checks nothing) */
  unsigned ident;              /* what this run is: the same on every rank for the same
                     plan or call, another for any other (the host's) */
} mkx_fused_sync;

/* Start of a call: epoch += 1 on this GPU, src[] = epoch, counters = 0,
 * runs += 1 and this run's start record into every peer's block, arrive at
 * every peer (bar), wait (bounded) until every peer has arrived at this
 * epoch: then each peer has finished its previous call, so its buffers may
 * be written.  A peer whose start record shows another run at the same
 * count (or a later one) started something else: MKX_FUSED_ERR_MISMATCH
 * at once, not a timeout.  <<<1, 32>>> on the user's stream. */
int mkx_fused_prologue(const mkx_fused_sync *s, cudaStream_t st);
/* The node's ranks meet (<<<1, 32>>>): each arrives at word `off` of every
 * node rank's workspace with the workspace's epoch, then waits (bounded,
 * `where` on a timeout) for all; the stream's earlier work is visible to
 * the node's ranks after it.  A peer's tell found after the meet voids the
 * run (MKX_FUSED_ERR_PEER). */
int mkx_fused_meet(const mkx_fused_sync *s, int off, int where, cudaStream_t st);
/* Load the prologue's kernel, launching nothing (lazy loading: see
 * mkx_fused_net_load). */
int mkx_fused_prologue_load(void);

/* fp8 scales checked on the GPU (src/ops/fused/scales_check.c), so that a
 * call reads a few words back instead of every scale: MKX_FUSED_SCAN_BLOCKS
 * blocks per array each write the first index of their share whose value
 * is not finite and > 0, or -1, into first[array * MKX_FUSED_SCAN_BLOCKS +
 * block] (host-mapped: read once the stream has passed the scan; the first
 * bad index of an array is the least of its blocks'). */
#define MKX_FUSED_SCAN_MAX 4
#define MKX_FUSED_SCAN_BLOCKS 32
typedef struct mkx_fused_scan_desc {
  const float *p[MKX_FUSED_SCAN_MAX];
  int64_t n[MKX_FUSED_SCAN_MAX];
  int count;
  long long *first;
} mkx_fused_scan_desc;
int mkx_fused_scales_scan(const mkx_fused_scan_desc *d, cudaStream_t st);

/* A stream memory operation for the copy engines' side streams (driver
 * entry point, so no libcuda link; addr: device memory): wait until
 * *(int32 *)addr >= value (wrap-safe); 0 or a cudaError_t. */
int mkx_fused_stream_wait_geq(cudaStream_t st, int *addr, int value);

#ifdef __cplusplus
}
#endif
#endif
