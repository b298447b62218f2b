/* Ranks of a host that drive the same GPU: whether they run at once (MPS)
 * or take turns (time slices), and how many CTAs a fused kernel that waits
 * for its peers may take so that it never holds the SMs a peer's kernel
 * needs to get there (docs/shared-gpu.md). */
#ifndef MKX_CORE_GPU_SHARE_H
#define MKX_CORE_GPU_SHARE_H

/* Ordered: the communicator's mode is the largest of its ranks'. */
enum { MKX_SHARE_NONE = 0, MKX_SHARE_MPS = 1, MKX_SHARE_TIMESLICED = 2 };

typedef struct mkx_gpu_share {
  int ranks;   /* ranks of this host on this rank's GPU, itself included */
  int mode;    /* MKX_SHARE_*, the same on every rank */
  int dev_sms; /* SMs of this rank's GPU (0: none) */
  int ctx_sms; /* SMs its context may use (MPS may give it fewer) */
  int ctas;    /* most CTAs of a kernel that waits for peers, the same on
                  every rank; 0: one per SM of the GPU (no limit) */
} mkx_gpu_share;

/* SMs each rank sharing a GPU under MPS leaves to the work that its
 * waiting kernels may wait behind: a copy the driver runs as a kernel,
 * the next call's prologue.  Each one is an SM the GEMMs lose. */
#define MKX_SHARE_SPARE_SMS 2

/* This rank's bid for `ctas` (the smallest bid wins): opt_ctas (option
 * gpu_ctas) if set, else the SMs its context has, and with `ranks` > 1
 * under MPS its even share of the GPU less MKX_SHARE_SPARE_SMS; at least 1. */
int mkx_gpu_share_bid(int ranks, int mps, int dev_sms, int ctx_sms,
                      int opt_ctas);

/* "one GPU per rank", "MPS", "time slices". */
const char *mkx_gpu_share_name(int mode);

#endif
