/* The options table: every MKX_* environment variable and mkx_* MPI_Info
 * key, with type, default and help.  Base owns the machinery (parsing,
 * precedence, printing) and its own rows; a layer above base may own the
 * rows of options only it reads (the transports do) and registers them
 * (mkx_options_add_rows), so base never names them.  mkx_info prints all
 * rows. */
#ifndef MKX_CORE_OPTIONS_H
#define MKX_CORE_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "mkx.h"

enum { MKX_PATH_OPT_AUTO = 0, MKX_PATH_OPT_HOST, MKX_PATH_OPT_GPU };
enum { MKX_FUSED_OFF = 0, MKX_FUSED_AUTO };
enum { MKX_PARTIALS_OUT = 0, MKX_PARTIALS_FP32 };
enum { MKX_PUSH_AUTO = 0, MKX_PUSH_COPY, MKX_PUSH_SM };
enum { MKX_PULL_AUTO = 0, MKX_PULL_YES, MKX_PULL_NO };
enum { MKX_TUNE_OFF = 0, MKX_TUNE_FIXED, MKX_TUNE_ADAPT };
enum { MKX_OVERLAP_AUTO = 0, MKX_OVERLAP_YES, MKX_OVERLAP_NO };
enum { MKX_SPLIT_GEMM_ENGINE = 0, MKX_SPLIT_GEMM_CUBLAS };
enum { MKX_ONESHOT_AUTO = 0, MKX_ONESHOT_YES, MKX_ONESHOT_NO };
enum {
  MKX_HIER_GEMM_HOST = 0,
  MKX_HIER_GEMM_GPU,
  MKX_HIER_GEMM_NVLINK,
  MKX_HIER_GEMM_PROXY,
  MKX_HIER_GEMM_AUTO
};
enum {
  MKX_SHARED_AUTO = 0,
  MKX_SHARED_FUSED,
  MKX_SHARED_SPLIT,
  MKX_SHARED_STAGED
};
enum { MKX_GPU_PART_AUTO = 0, MKX_GPU_PART_GREEN, MKX_GPU_PART_NONE };
enum { MKX_ATTN_CONTIGUOUS = 0, MKX_ATTN_ZIGZAG, MKX_ATTN_STRIPED };
enum { MKX_ATTN_BLOCK_AUTO = 0, MKX_ATTN_BLOCK_128, MKX_ATTN_BLOCK_192 };
enum { MKX_HIER_ATTN_HOST = 0, MKX_HIER_ATTN_PROXY, MKX_HIER_ATTN_AUTO };
enum { MKX_HIER_MOE_HOST = 0, MKX_HIER_MOE_PROXY, MKX_HIER_MOE_AUTO };
enum { MKX_NET_REGION_DEVICE = 0, MKX_NET_REGION_HOST, MKX_NET_REGION_AUTO };
enum { MKX_TILES_REDUCE_PERSISTENT = 0, MKX_TILES_REDUCE_STAGED };
enum { MKX_MOE_GPU_ONE = 0, MKX_MOE_GPU_ALL, MKX_MOE_GPU_OFF };
enum {
  MKX_MOE_GEMM_OPT_AUTO = 0,
  MKX_MOE_GEMM_OPT_ROWS,
  MKX_MOE_GEMM_OPT_SWAP
};

/* Text options live in fixed arrays so mkx_options stays a plain value. */
#define MKX_OPT_STRING_MAX 256

typedef struct mkx_options {
  int log_level;         /* MKX_LOG_* */
  int path;              /* MKX_PATH_* */
  int device;            /* -1: choose */
  int64_t timeout_ms;    /* bound on every wait for a peer */
  int virtual_node_size; /* 0: one node per host */
  int attn_layout;       /* MKX_ATTN_*: which positions a rank's shard holds */
  int attn_block_n;      /* MKX_ATTN_BLOCK_*: keys per block of the engine */
  int hier_attn;         /* MKX_HIER_ATTN_*: who drives the network */
  int hier_moe;          /* MKX_HIER_MOE_*: likewise for MoE calls */
  int moe_gpu;           /* MKX_MOE_GPU_*: which MoE calls run on the GPU */
  int moe_sync;          /* MoE GPU path: the host waits for the routing */
  int moe_fp8;           /* the fp8 layer on the GPU (src/ops/moe/moe_fp8.c) */
  int moe_release;       /* MKX_OVERLAP_*: MoE rows released as they land */
  int moe_gemm;       /* MKX_MOE_GEMM_OPT_*: the grouped expert GEMM kernel */
  int fused;          /* MKX_FUSED_*: fused GPU kernels */
  int blocking;       /* GPU-path calls wait for their run and report it */
  int tp_partials;    /* MKX_PARTIALS_*: type of fused RS/AR partials */
  int tp_push;        /* MKX_PUSH_*: who moves fused RS/AR partials */
  int tp_pull;        /* MKX_PULL_*: read the node ranks' operands in place */
  int fused_pad;      /* awkward shapes through padded temporaries */
  int tp_overlap;     /* MKX_OVERLAP_*: overlapped or split GPU path */
  int tp_split_gemm;  /* MKX_SPLIT_GEMM_*: the split path's GEMM */
  int tp_ag_oneshot;  /* MKX_ONESHOT_*: split AllGather+GEMM in one kernel */
  int tp_stream_k;    /* overlapped AllGather+GEMM: last wave split on K */
  int shared_gpu;     /* MKX_SHARED_*: ranks of a node on one GPU */
  int gpu_ctas;       /* CTAs of a fused kernel that waits for peers; 0: auto */
  int gpu_partition;  /* MKX_GPU_PART_*: SM partitions on a GPU shared
                         under MPS */
  int hier_gemm;      /* MKX_HIER_GEMM_*: device buffers on several nodes */
  int net_gpu_region; /* MKX_NET_REGION_*: where the GPU-driven calls' network
                         region lives */
  int net_fwd_ctas;   /* CTAs of the network forward, pinned; 0: its share */
  int net_sum_ctas;   /* CTAs of the node sums, pinned; 0: their share */
  int tune;           /* MKX_TUNE_*: the roles' CTAs adapt across runs */
  char tune_cache[MKX_OPT_STRING_MAX]; /* "": none; else the cache's file */
  char trace[MKX_OPT_STRING_MAX];      /* "": none; else the role timeline */
  int64_t tiles_ag_sm_bytes; /* MKX_Allgather_tiles: an SM kernel up to this */
  int tiles_reduce_ctas;     /* the tile reductions' persistent CTAs */
  int tiles_reduce;          /* MKX_TILES_REDUCE_*: how they wait */
  /* Set only through the rows the transports register (src/net), which
   * own these fields; base stores them and never reads them. */
  int net; /* MKX_NET_* (src/net/net.h): transport */
  char net_tcp_bind[MKX_OPT_STRING_MAX];       /* "": the hostname's address */
  char net_tcp_port_range[MKX_OPT_STRING_MAX]; /* "0" or "lo-hi" */
  int net_ib_gid_index;      /* GID table index for RoCE/IB global routes */
  int64_t net_shm_bandwidth; /* shm: MB/s of the emulated link, 0: none */
  int net_shm_latency_us;    /* shm: emulated latency */
  int64_t net_shm_ring;      /* shm: bytes of each ring */
  int net_shm_cma;           /* shm: direct placement into host regions */
  int net_shm_ipc;           /* shm: CUDA IPC copies into device regions */
} mkx_options;

typedef enum {
  MKX_OPT_INT,
  MKX_OPT_LONG,
  MKX_OPT_BOOL,
  MKX_OPT_ENUM,
  MKX_OPT_STRING /* char[MKX_OPT_STRING_MAX]; choices describes the form */
} mkx_opt_type;

typedef struct mkx_option_desc {
  const char *name; /* "log_level": env MKX_LOG_LEVEL, info key mkx_log_level */
  mkx_opt_type type;
  size_t offset; /* into mkx_options */
  const char *defval;
  const char *choices; /* enum: "a|b|c" (stored as the index); int: "min:max";
                          string: a description of the accepted form */
  const char *help;
  int agree; /* 1: every rank must hold the same value (it decides
                          a collective path or protocol); MKX_Comm_create
                          checks it */
  /* string options (NULL: any text that fits): 1 if value is of the
   * form `choices` describes, checked when the options are loaded */
  int (*valid)(const char *value);
} mkx_option_desc;

/* The seam through which a layer above base adds its rows.
 * - Owner: the layer that reads the options defines the rows (an array
 *   ended by a row whose name is NULL) and their fields in mkx_options.
 *   The array is static: it stays valid and unchanged for the life of the
 *   process and is never removed.
 * - When: before the options are loaded.  comm, which knows the layers
 *   above base, registers their rows before it loads options for
 *   MKX_Comm_create and MKX_Info_print; code that loads options without a
 *   communicator (tests) registers them itself first.  A load does not see
 *   rows registered after it: their fields stay zero, their MKX_* variables
 *   are ignored and their mkx_* keys are unknown.
 * - Registering the same array again does nothing, so comm does it for
 *   every communicator; any thread may.  A name that is already a row's is
 *   MKX_ERR_INTERNAL, and so is a field outside mkx_options.
 * - Rows are listed (mkx_option_at, mkx_info) base's first, then each
 *   array in the order it was first registered. */
int mkx_options_add_rows(const mkx_option_desc *rows);

/* Row i of the table (base's rows, then the registered ones); NULL past
 * the last. */
const mkx_option_desc *mkx_option_at(size_t i);

/* Every registered row: defaults, then MKX_* environment variables, then
 * `info` keys (may be MPI_INFO_NULL).  A bad value returns
 * MKX_ERR_INVALID_ARG naming the variable or key; an unknown mkx_* info
 * key is an error too. */
int mkx_options_load(mkx_options *opt, MPI_Info info);

/* Parse one value for option `d` into `opt` (source names it in errors). */
int mkx_option_parse(const mkx_option_desc *d, const char *value,
                     const char *source, mkx_options *opt);

/* The current value of `d` in `opt` as text (buf of at least 32 bytes). */
const char *mkx_option_format(const mkx_option_desc *d, const mkx_options *opt,
                              char *buf, size_t len);

void mkx_options_print(const mkx_options *opt, FILE *f);

#endif
