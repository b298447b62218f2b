/* Ranks of a host that drive the same GPU: whether they run at once (MPS)
 * or take turns (time slices), which SMs each may use (its partition,
 * src/core/sm_partition.h, or a share set by the user), and how many CTAs
 * a fused kernel that waits for its peers may take so that it never holds
 * the SMs a peer's kernel needs to get there (docs/shared-gpu.md). */
#ifndef MKX_CORE_GPU_SHARE_H
#define MKX_CORE_GPU_SHARE_H

/* Ordered: the communicator's mode is the largest of its ranks'. */
enum { MKX_SHARE_NONE = 0, MKX_SHARE_MPS = 1, MKX_SHARE_TIMESLICED = 2 };

/* Where a rank's SMs under MPS come from: nowhere in particular (every
 * SM, as every other rank: not safe for kernels that wait for peers), an
 * SM partition MKX made, or the MPS client's own share set by the user
 * (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, an execution affinity). */
enum { MKX_PART_NONE = 0, MKX_PART_GREEN = 1, MKX_PART_CLIENT = 2 };

typedef struct mkx_gpu_share {
  int ranks;    /* ranks of this host on this rank's GPU, itself included */
  int index;    /* this rank's place among them */
  int mode;     /* MKX_SHARE_*, the same on every rank */
  int part;     /* MKX_PART_*: where this rank's SMs come from */
  int unsafe;   /* agreed: some rank shares a GPU under MPS with no SMs of
                  its own (MKX_PART_NONE) */
  int dev_sms;  /* SMs of this rank's GPU (0: none) */
  int ctx_sms;  /* SMs its kernels may use: its partition, its MPS client's
                  share, or the GPU's */
  int ctas;     /* most CTAs of a kernel that waits for peers, the same on
                  every rank; 0: one per SM of the GPU (no limit) */
  int node_gpu; /* agreed: on every node, every rank of the node is on one
                   GPU (memory a peer writes is this GPU's own) */
} mkx_gpu_share;

/* SMs each rank sharing a GPU under MPS leaves to the work that its
 * waiting kernels may wait behind: a copy the driver runs as a kernel,
 * the next call's prologue.  Each one is an SM the GEMMs lose. */
#define MKX_SHARE_SPARE_SMS 2

/* This rank's bid for `ctas` (the smallest bid wins): opt_ctas (option
 * gpu_ctas) if set, else the SMs it has (ctx_sms), and with `ranks` > 1
 * under MPS, by where they come from (`part`, MKX_PART_*), less
 * MKX_SHARE_SPARE_SMS: its SM partition whole; its MPS client's share
 * divided by the ranks (undivided, the overlapped AllGather+GEMM of 4
 * ranks at 25% each stalled: docs/shared-gpu.md); without either, its even
 * share of the GPU (option shared_gpu=fused only).  At least 1. */
int mkx_gpu_share_bid(int ranks, int mps, int dev_sms, int ctx_sms, int part,
                      int opt_ctas);

/* "one GPU per rank", "MPS", "time slices". */
const char *mkx_gpu_share_name(int mode);
/* "no partition", "SM partition", "the MPS client's own share". */
const char *mkx_gpu_part_name(int part);

#endif
