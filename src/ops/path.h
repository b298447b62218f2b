/* The paths an operation's call can take, named once for logs and counted
 * per process, so that tests check the path a call took by asking for it
 * by name. */
#ifndef MKX_OPS_PATH_H
#define MKX_OPS_PATH_H

typedef enum mkx_path {
  MKX_PATH_HOST,          /* host buffers: the host path */
  MKX_PATH_STAGED,        /* device buffers through host memory */
  MKX_PATH_TP_OVERLAP,    /* one node: a GEMM overlapped with the copies */
  MKX_PATH_TP_SPLIT,      /* one node: the GEMM, then one-shot NVLink */
  MKX_PATH_TP_ONE_KERNEL, /* a split AllGather+GEMM in one kernel (also
                              counted as MKX_PATH_TP_SPLIT) */
  MKX_PATH_TP_ADAPTED,    /* operands adapted around a fused call */
  MKX_PATH_TP_PULL,       /* one node: the GEMM reads every rank's operands
                             in place (ranks sharing one GPU) */
  MKX_PATH_HIER_GPU,      /* several nodes: GEMM on the GPU, network by host */
  MKX_PATH_HIER_NVLINK,   /* several nodes: the node's part fused over NVLink */
  MKX_PATH_HIER_PROXY,    /* several nodes: the kernels post to the network
                             proxy, the GEMM waits for the rows' signals */
  MKX_PATH_ATTN,          /* attention engine on one rank's buffers */
  MKX_PATH_ATTN_RING,     /* one node: K/V chunks copied into every rank's
                             workspace while the engine runs on them */
  MKX_PATH_ATTN_HIER,     /* several nodes: the ring inside each node, the
                             other nodes' chunks over the network by the
                             host while the engine runs */
  MKX_PATH_ATTN_NET,      /* several nodes: the other nodes' chunks posted
                             by the GPU to the network proxy, landing in
                             the engine's ring (nodes of several ranks:
                             handed on into it by the network forward) */
  MKX_PATH_MOE,           /* one rank: routing, grouped expert GEMMs (and the
                             layer's SwiGLU and combine) on the GPU */
  MKX_PATH_MOE_NODE,      /* several ranks of one node: the same, token rows
                             pushed into the owners by GPU stores */
  MKX_PATH_MOE_NODES,     /* several nodes: the same inside each node, the
                             rows between nodes over the network by the
                             host */
  MKX_PATH_MOE_NET,       /* several nodes: the same, the rows between nodes
                             posted by the GPU to the network proxy */
  MKX_PATH_COUNT
} mkx_path;

const char *mkx_path_name(mkx_path p);
/* Whether a call or MKX_Start on p may be captured in a CUDA graph: its
 * run does no host work that waits (the MoE paths: only with option
 * moe_sync=no, which the caller checks).  The one list of mkx.h's rule. */
int mkx_path_capturable(mkx_path p);
/* One more start on p (thread-safe). */
void mkx_path_count(mkx_path p);
/* The path the calling thread's starts took since mkx_path_track_begin
 * (MKX_PATH_COUNT: none counted): the first counted, which names a path
 * around an inner one (adapted, several nodes over NVLink), except that
 * one kernel refines split. */
void mkx_path_track_begin(void);
mkx_path mkx_path_track_end(void);
/* Starts on p in this process so far. */
long mkx_path_starts(mkx_path p);

#endif
