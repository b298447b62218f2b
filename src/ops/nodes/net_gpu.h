/* The fused calls across nodes driven by the GPU (option hier_gemm=proxy):
 * AllGather+GEMM (nodes/ag_net.c; also on nodes of several ranks),
 * GEMM+ReduceScatter and GEMM+AllReduce (nodes/rs_ar_net.c; nodes of one
 * rank, and ReduceScatter on nodes of several), their table entries, and what they share with each other and
 * with ring attention's network part (net_gpu.c). */
#ifndef MKX_OPS_NODES_NET_GPU_H
#define MKX_OPS_NODES_NET_GPU_H

#include <stddef.h>
#include <stdint.h>
#include "core/comm.h"
#include "ops/fused/fused.h"
#include "ops/fused/tuner.h"
#include "ops/roles.h"

struct mkx_agreed;

/* Whether the path takes this call (agreed values and options only);
 * else why not, into why. */
int mkx_ag_net_fits(MKX_Comm c, const void *args, const struct mkx_agreed *g,
                    char *why, size_t len);
int mkx_ag_net_plan(MKX_Comm c, int op, const void *args,
                    const struct mkx_agreed *g, void **plan);
int mkx_ag_net_start(MKX_Comm c, void *plan, const void *args,
                     MKX_Stream stream);
void mkx_ag_net_free(MKX_Comm c, void *plan);

int mkx_rs_ar_net_fits(MKX_Comm c, int op, const void *args,
                       const struct mkx_agreed *g, char *why, size_t len);
int mkx_rs_ar_net_plan(MKX_Comm c, int op, const void *args,
                       const struct mkx_agreed *g, void **plan);
int mkx_rs_ar_net_start(MKX_Comm c, void *plan, const void *args,
                        MKX_Stream stream);
void mkx_rs_ar_net_free(MKX_Comm c, void *plan);

/* The communicator's device words of these kernels
 * (mkx_comm_net_gpu_region): [0] the epoch, [1] the last command, then a
 * sum's chunk counts, the forward's epoch done and count, and the chunk
 * counts of a second sum running beside the first. */
#define MKX_NET_WORD_SUM 2
#define MKX_NET_WORD_FWD_DONE (MKX_NET_WORD_SUM + MKX_FUSED_NET_MAXCH)
#define MKX_NET_WORD_FWD_COUNT (MKX_NET_WORD_FWD_DONE + 1)
#define MKX_NET_WORD_SUM2 (MKX_NET_WORD_FWD_COUNT + 1)

/* Why no kernel of this communicator can drive the network (NULL: they
 * can): every stream of a rank in one hardware queue, no ring mapped for
 * the GPU, more than 32 ranks (the descriptor's peer masks). */
const char *mkx_net_ring_why_not(MKX_Comm c);
/* Shared: why the communicator cannot take the path (NULL: it can): nodes
 * of one rank, or equal nodes of several (the node's ranks meeting through
 * a symmetric workspace). */
const char *mkx_net_fits_comm(MKX_Comm c);

/* The region of these calls (and of ring attention's network part):
 * MKX_COMM_NET_GPU_HOST_REGION on nodes of several ranks over a transport
 * that copies device memory with CUDA (tcp, shm) where option
 * net_gpu_region is auto, else MKX_COMM_NET_GPU_REGION.  There the
 * kernels reach the region only through the node's forward or sums, and
 * no copy of a transport's thread can sit in a hardware queue behind a
 * kernel that waits for what the copy brings (a transport's thread
 * serves every peer in turn: one such copy holds up every later frame,
 * the next peer's arrival too). */
uint32_t mkx_net_region_index(MKX_Comm c);

/* The kernels' descriptor of a call on workspace ws (its bound and error
 * word) with the region's device words (mkx_comm_net_gpu_region): every
 * other rank a peer, no rows. */
void mkx_net_desc_fill(MKX_Comm c, mkx_fused_ws *ws, uint64_t *words,
                       mkx_fused_net_desc *d);

/* What every plan of these calls holds: a workspace (prologue, error
 * word; on nodes of several ranks also what the node shares) and the
 * communicator's region of `bytes` with its device words
 * (mkx_comm_net_gpu_region). */
typedef struct mkx_net_plan {
  mkx_fused_ws *ws;
  int src_n; /* ints of the workspace's src[] each call fills */
  size_t bytes;
  uint32_t index;  /* mkx_net_region_index */
  char *region;    /* looked up again at each start: a later plan may */
  uint64_t *words; /* have grown it */
  mkx_tuner *tune; /* nodes of several ranks: the CTAs of the plan's role,
                      run by run (the communicator's, mkx_tuner_for) */
} mkx_net_plan;
/* Collective; ws: what the workspace must hold (src_n, flags_n and
 * data_bytes of at least 1, 1 and 4096 are taken; never split).  On
 * failure nothing is held. */
int mkx_net_plan_init(MKX_Comm c, size_t bytes, const mkx_fused_need *ws,
                      mkx_net_plan *n);
void mkx_net_plan_fini(mkx_net_plan *n);
/* At plan time: the kernels' descriptor in *d (as at a start) and every
 * kernel of these paths loaded: with lazy loading a kernel's first launch
 * waits for the device to be idle (under MPS: every client's work), which
 * a peer's kernel waiting for this rank would never let happen.  The
 * plan then loads its GEMM's kernels likewise. */
int mkx_net_plan_load(MKX_Comm c, mkx_net_plan *n, mkx_fused_net_desc *d,
                      const char *fn);
/* The start of a call (also under graph capture: comm_net.h), after the
 * previous call of these paths on the communicator, the region, the prologue,
 * and the kernels' descriptor (no rows: bnd all 0) in *d. */
int mkx_net_call_begin(MKX_Comm c, mkx_net_plan *n, MKX_Stream st,
                       const char *fn, mkx_fused_net_desc *d);
/* Nodes of several ranks (the network forward, tp.h mkx_fused_net_fwd_desc):
 * the ranks of this rank's local index on the other nodes, as a mask (the
 * network's peers).  The CTAs of the forward and of the node sums of
 * GEMM+ReduceScatter and GEMM+AllReduce: ops/roles.h. */
unsigned mkx_net_column_peers(MKX_Comm c);
/* The forward of a call whose kernels' descriptor is *n (words: the
 * region's device words), into the node ranks' data and flags of ws, on
 * ws's side stream `side` forked from st: the caller sets f's kind, src
 * and the kind's own fields, the rest is filled here, with n->fwd_done so
 * that mkx_fused_net_end waits for it, on t's CTAs of the role (timed for
 * option trace, fused/tuner.h).  Called after mkx_fused_net_begin and
 * the call's posts: the streams of a context share a few hardware queues
 * and work in a queue starts in the order it came, so forked first the
 * forward could sit ahead of the very posts it waits for (the fork waits
 * for the meeting, which waits for arrivals only: no copy lands them).
 * Nothing joins it back (a stream that waits for the network's data holds
 * its queue, where the copies that land the data may sit;
 * mkx_fused_net_end waits for its end) but under graph capture, which must
 * join what it forks: mkx_net_fwd_join. */
/* ws's side stream `side` waits for st's work so far (fork); st waits
 * for the side stream's (join). */
int mkx_net_fork(const mkx_fused_ws *ws, int side, cudaStream_t st,
                 const char *fn);
int mkx_net_join(const mkx_fused_ws *ws, int side, cudaStream_t st,
                 const char *fn);
int mkx_net_fwd_start(MKX_Comm c, mkx_fused_ws *ws, int side,
                      mkx_fused_net_desc *n, uint64_t *words,
                      mkx_fused_net_fwd_desc *f, mkx_tuner *t, cudaStream_t st,
                      const char *fn);
int mkx_net_fwd_join(const mkx_fused_ws *ws, int side, cudaStream_t st,
                     const char *fn);
/* The end: until the proxy has completed the call's writes. */
int mkx_net_call_end(MKX_Comm c, mkx_net_plan *n, MKX_Stream st, const char *fn,
                     const mkx_fused_net_desc *d);

#endif
