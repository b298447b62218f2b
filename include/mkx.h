/*
 * mkx.h - the one public header of MKX, fused multi-GPU kernels for HPC.
 *
 * Every operation takes an MKX communicator (made once from an MPI_Comm)
 * and a CUDA stream, is enqueued on that stream like an NCCL call, and
 * returns an int error code (MKX_SUCCESS == 0).
 *
 * Conventions shared by every call:
 *  - Matrices are BLAS-like: a storage order (MKX_ROW_MAJOR or
 *    MKX_COL_MAJOR, one per call, for every matrix of the call), a leading
 *    dimension (>= columns for row-major, >= rows for column-major) and,
 *    for B, an optional transposition.  The element type of A and B is
 *    `dtype`; C may have its own type `ctype` among bf16, fp16 and fp32.
 *    Arithmetic accumulates in fp32.  fp64 runs end to end: MKX_FP64 in
 *    one of dtype and ctype requires it in the other, else the call
 *    returns MKX_ERR_UNSUPPORTED.
 *  - Pointers are either all device memory (cudaMalloc or MKX_Alloc_mem)
 *    or all host memory.  Host pointers run the host path: the call is
 *    synchronous and `stream` is ignored.  Device pointers run on the
 *    communicator's GPU, ordered on `stream`; where a shape or type has no
 *    fused GPU kernel MKX takes a correct slower path and logs the reason
 *    (MKX_LOG_LEVEL=info).  A fused call returns once its work is enqueued,
 *    and a GPU wait that ran out is returned (MKX_ERR_TIMEOUT) by the next
 *    call; with option blocking (MKX_BLOCKING=yes) the call waits for its
 *    work and returns its status (not while `stream` is being captured).
 *  - Inputs must be ready in `stream`'s order, as for NCCL: write them on
 *    `stream`, or order the stream after the writes (an event).  Work on
 *    the legacy default stream does not order a non-blocking stream, and
 *    cudaMemcpy between device buffers, cudaMemset and the last part of a
 *    large cudaMemcpy from pageable memory return before the device has
 *    finished them: a call enqueued right after may read the old inputs.
 *  - Several ranks of a node may drive one GPU (under MPS, or in time
 *    slices without it): the fused kernels then take each rank's share of
 *    the SMs, and without MPS the split path (options shared_gpu and
 *    gpu_ctas; mkx_info prints what a rank has).
 *  - Calls are collective over the communicator: every rank calls them in
 *    the same order with arguments that agree (global sizes, types, order,
 *    transposition).  Disagreement is detected and returned as
 *    MKX_ERR_SHAPE_MISMATCH on every rank, never a hang or a wrong answer.
 *  - After an error, MKX_Get_last_error() returns a message naming the
 *    argument or the peer at fault (per thread).
 */
#ifndef MKX_H
#define MKX_H

#include <stddef.h>
#include <stdint.h>
#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version ---------------------------------------------------------- */

#define MKX_VERSION_MAJOR 0
#define MKX_VERSION_MINOR 1
#define MKX_VERSION_PATCH 0
#define MKX_VERSION_CODE(a, b, c) ((a) * 10000 + (b) * 100 + (c))
#define MKX_VERSION \
  MKX_VERSION_CODE(MKX_VERSION_MAJOR, MKX_VERSION_MINOR, MKX_VERSION_PATCH)

/* The version of the library actually linked (may differ from the header). */
int MKX_Get_version(int *major, int *minor, int *patch);

/* ---- errors ------------------------------------------------------------ */

enum {
  MKX_SUCCESS = 0,
  MKX_ERR_INVALID_ARG = 1,    /* an argument is invalid (see the message) */
  MKX_ERR_NULL_POINTER = 2,   /* a required pointer is NULL */
  MKX_ERR_BAD_SIZE = 3,       /* a size is negative, zero or too large */
  MKX_ERR_BAD_LD = 4,         /* a leading dimension is too small */
  MKX_ERR_UNSUPPORTED = 5,    /* dtype/order/feature not supported here */
  MKX_ERR_SHAPE_MISMATCH = 6, /* ranks disagree on a collective argument */
  MKX_ERR_TRUNCATE = 7,       /* an output buffer is too small */
  MKX_ERR_CUDA = 8,           /* a CUDA runtime or library call failed */
  MKX_ERR_MPI = 9,            /* an MPI call failed */
  MKX_ERR_NET = 10,           /* a network transport failed */
  MKX_ERR_TIMEOUT = 11,       /* a bounded wait ran out (peer and tile named) */
  MKX_ERR_NOMEM = 12,         /* host or device memory exhausted */
  MKX_ERR_PEER = 13,          /* another rank failed during the call */
  MKX_ERR_INVALID_COMM = 14,  /* NULL or freed communicator */
  MKX_ERR_INVALID_REQUEST = 15, /* NULL or freed persistent request */
  MKX_ERR_INTERNAL = 16,      /* a bug in MKX: please report it */
  MKX_ERR_LASTCODE = 16
};

/* A static description of an error code ("invalid argument", ...). */
const char *MKX_Error_string(int err);

/* The message of the last failed MKX call on this thread: names the
 * argument, rank or tile at fault.  Empty string if none. */
const char *MKX_Get_last_error(void);

/* ---- types -------------------------------------------------------------- */

typedef enum {
  MKX_BF16 = 1, /* bfloat16 */
  MKX_FP16 = 2, /* IEEE half */
  MKX_FP32 = 3,
  MKX_FP64 = 4
} MKX_Datatype;

typedef enum {
  MKX_ROW_MAJOR = 101, /* C order: element (i,j) at i*ld + j */
  MKX_COL_MAJOR = 102  /* Fortran order: element (i,j) at i + j*ld */
} MKX_Order;

typedef enum {
  MKX_NO_TRANS = 111, /* B is stored k x n */
  MKX_TRANS = 112     /* B is stored n x k and used transposed */
} MKX_Trans;

/* A CUDA stream (cudaStream_t converts to it; NULL is the legacy stream). */
typedef void *MKX_Stream;

typedef struct MKX_Comm_s *MKX_Comm;
typedef struct MKX_Request_s *MKX_Request;

/* Size in bytes of one element, or 0 for an invalid type. */
size_t MKX_Type_size(MKX_Datatype type);

/* ---- communicators ------------------------------------------------------ */

/* Collective over `comm`.  Splits ranks into nodes (same host name and,
 * under srun, same SLURM_NODEID; or virtual nodes, see option
 * virtual_node_size), picks this rank's GPU, and exchanges what the
 * transports need.  `info` may be MPI_INFO_NULL; its "mkx_*" keys override
 * the MKX_* environment variables (see mkx_info for the list).
 * GPU choice, first match wins: option `device`; the only visible GPU;
 * the launcher's local rank (SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK,
 * MPI_LOCALRANKID) modulo the visible GPU count; the local rank within
 * `comm` modulo the count.  CUDA_VISIBLE_DEVICES is honoured by the CUDA
 * runtime itself.  The chosen device becomes current on the calling thread.
 * With no usable GPU the communicator runs the host path. */
int MKX_Comm_create(MPI_Comm comm, MPI_Info info, MKX_Comm *newcomm);

/* Collective.  Sets *comm to NULL.  Requests made on it must be freed first. */
int MKX_Comm_free(MKX_Comm *comm);

int MKX_Comm_rank(MKX_Comm comm, int *rank);
int MKX_Comm_size(MKX_Comm comm, int *size);
int MKX_Comm_node(MKX_Comm comm, int *node);           /* node index, 0-based */
int MKX_Comm_num_nodes(MKX_Comm comm, int *num_nodes);
int MKX_Comm_local_rank(MKX_Comm comm, int *local_rank); /* rank in node */
int MKX_Comm_local_size(MKX_Comm comm, int *local_size); /* ranks in node */
/* CUDA device ordinal this rank uses, or -1 when it runs the host path. */
int MKX_Comm_device(MKX_Comm comm, int *device);
/* Local, never blocks or synchronises: *async_error = MKX_SUCCESS, or the
 * failure of GPU work that calls on `comm` enqueued earlier (with option
 * blocking off, a call returns once its work is enqueued): MKX_ERR_TIMEOUT
 * when a wait on the GPU for another rank ran out (MKX_Get_last_error()
 * names the rank and what it waited for), MKX_ERR_PEER when another rank
 * gave up on a run this rank took part in (its result is void; the message
 * names that rank and what it waited for) - either way the communicator is
 * then unusable and later calls return MKX_ERR_INVALID_COMM - or
 * MKX_ERR_INVALID_COMM if it already was.  Poll it, e.g. while waiting on
 * the stream, to learn of a failure before the next call. */
int MKX_Comm_get_async_error(MKX_Comm comm, int *async_error);

/* Rows owned by block b when `rows` rows are split over `nblocks` blocks:
 * the first rows % nblocks blocks get one row more.  This is the split of
 * MKX_Gemm_reduce_scatter's output. */
int MKX_Block_range(int64_t rows, int nblocks, int b, int64_t *first,
                    int64_t *count);

/* ---- memory --------------------------------------------------------------- */

/* Collective: every rank asks for the same `size`.  Returns memory on the
 * communicator's GPU (host memory on the host path) aligned to 256 bytes,
 * mapped into every GPU of the node (symmetric: MKX's kernels reach peers'
 * copies directly, no registration).  MKX_Free_mem is collective too:
 * every rank frees its corresponding pointer (or NULL everywhere). */
int MKX_Alloc_mem(MKX_Comm comm, size_t size, void **ptr);
int MKX_Free_mem(MKX_Comm comm, void *ptr);

/* ---- tensor-parallel GEMM operations ------------------------------------- */

/*
 * AllGather + GEMM.  Rank r holds A_r, m_local x k (m_local may differ per
 * rank and may be 0; M = sum of m_local over ranks must be > 0), and B_r,
 * k x n (stored n x k when transb == MKX_TRANS).  On return
 *     C_r = [A_0; A_1; ...; A_{p-1}] x B_r        (M x n, rows in rank order)
 * If A_out is not NULL it receives the gathered A (M x k, leading dimension
 * ld_aout).  k must agree across ranks; n, B and C are per rank.
 */
int MKX_Allgather_gemm(const void *A, int64_t m_local, int64_t k, int64_t lda,
                       const void *B, int64_t n, int64_t ldb, MKX_Trans transb,
                       void *C, int64_t ldc, void *A_out, int64_t ld_aout,
                       MKX_Datatype dtype, MKX_Datatype ctype, MKX_Order order,
                       MKX_Comm comm, MKX_Stream stream);

/*
 * GEMM + ReduceScatter.  Rank r holds A_r, M x k_local, and B_r, k_local x n
 * (k_local may differ per rank and may be 0).  On return C_r holds rows
 * [first, first + count) of sum_q A_q x B_q, where MKX_Block_range(M, p, r,
 * &first, &count) gives the split; C_r is count x n.  M and n must agree.
 * The sum is formed in fp32 (fp64 for MKX_FP64) in a fixed order (the same
 * bits every run) and rounded once.  On the fused GPU path each rank's
 * partial product crosses NVLink in C's type, as with cuBLAS followed by
 * NCCL, unless option tp_partials=fp32.
 */
int MKX_Gemm_reduce_scatter(const void *A, int64_t M, int64_t k_local,
                            int64_t lda, const void *B, int64_t n, int64_t ldb,
                            MKX_Trans transb, void *C, int64_t ldc,
                            MKX_Datatype dtype, MKX_Datatype ctype,
                            MKX_Order order, MKX_Comm comm, MKX_Stream stream);

/*
 * GEMM + AllReduce.  As MKX_Gemm_reduce_scatter, but every rank receives the
 * whole M x n sum in C, with the same bits on every rank.
 */
int MKX_Gemm_allreduce(const void *A, int64_t M, int64_t k_local, int64_t lda,
                       const void *B, int64_t n, int64_t ldb, MKX_Trans transb,
                       void *C, int64_t ldc, MKX_Datatype dtype,
                       MKX_Datatype ctype, MKX_Order order, MKX_Comm comm,
                       MKX_Stream stream);

/* ---- sequence parallel attention ----------------------------------------- */

/*
 * Ring attention.  The sequence is sharded in contiguous blocks: rank r holds
 * global positions [r*seq_local, (r+1)*seq_local) of Q, K and V (seq_local
 * agrees across ranks).  Tensors are dense [batch][seq_local][heads][head_dim]
 * (heads_q for Q and O, heads_kv for K and V; heads_q must be a multiple of
 * heads_kv: grouped-query attention, query head h reads key/value head
 * h / (heads_q / heads_kv)).  On return
 *     O_r = softmax(scale * Q_r K^T + mask) V      over the whole K, V
 * with the causal mask on global positions when `causal` is non-zero.
 * scale <= 0 selects 1/sqrt(head_dim).  If LSE is not NULL it receives the
 * natural log-sum-exp of each row, fp32 [batch][heads_q][seq_local]; a row
 * with no visible key gets O = 0 and LSE = -inf.
 */
int MKX_Ring_attention(const void *Q, const void *K, const void *V, void *O,
                       float *LSE, int64_t batch, int64_t seq_local,
                       int64_t heads_q, int64_t heads_kv, int64_t head_dim,
                       int causal, double scale, MKX_Datatype dtype,
                       MKX_Comm comm, MKX_Stream stream);

/* ---- expert parallel MoE ------------------------------------------------- */

/*
 * Experts are spread in blocks: with E = num_experts (a multiple of the
 * communicator size p) rank r owns experts [r*E/p, (r+1)*E/p).
 * Rank r holds its tokens X_r, num_tokens x hidden (row-major), and for
 * each token `topk` global expert ids (int32, [num_tokens][topk], each in
 * [0, E), distinct within a token: else every rank returns
 * MKX_ERR_INVALID_ARG naming the rank, token and slot) and gate weights
 * (fp32, same shape).
 */

/*
 * MoE dispatch + GEMM.  Each token row is sent to the owner of each of its
 * experts, and each local expert e multiplies the rows routed to it by its
 * weight W[e] (hidden x n, row-major; W is [E/p][hidden][n] contiguous).
 * Y receives the products grouped by local expert (expert 0's rows first);
 * within an expert rows are ordered by (source rank, token, slot).
 * If topk_weight is not NULL each row is scaled by its gate weight.
 * expert_rows[e] (int64, E/p entries) receives each local expert's row count.
 * If origin is not NULL, origin[3*i .. 3*i+2] = (source rank, token, slot)
 * of row i.  Y holds at most y_rows rows: if more arrive the call returns
 * MKX_ERR_TRUNCATE (every rank) and fills expert_rows with the counts needed.
 */
int MKX_Moe_dispatch_gemm(const void *X, int64_t num_tokens, int64_t hidden,
                          const int32_t *topk_ids, const float *topk_weight,
                          int64_t topk, int64_t num_experts, const void *W,
                          int64_t n, void *Y, int64_t y_rows,
                          int64_t *expert_rows, int32_t *origin,
                          MKX_Datatype dtype, MKX_Comm comm, MKX_Stream stream);

/*
 * Whole MoE layer with SwiGLU experts.  For each token t of rank r:
 *   out[t] = sum_j topk_weight[t][j] * FFN_{e_j}(X[t]),
 *   FFN_e(x) = (silu(x W1[e][:, 0:ffn]) * (x W1[e][:, ffn:2ffn])) W2[e]
 * W1 is [E/p][hidden][2*ffn] (gate columns, then up columns), W2 is
 * [E/p][ffn][hidden], both row-major.  out is num_tokens x hidden, on the
 * token's own rank, of type dtype.
 */
int MKX_Moe_layer(const void *X, int64_t num_tokens, int64_t hidden,
                  const int32_t *topk_ids, const float *topk_weight,
                  int64_t topk, int64_t num_experts, const void *W1,
                  const void *W2, int64_t ffn, void *out, MKX_Datatype dtype,
                  MKX_Comm comm, MKX_Stream stream);

/* ---- persistent plans (MPI-4 style) --------------------------------------- */

/*
 * `_init` takes the arguments of the call (buffers are bound: their contents
 * may change between starts, their addresses may not), validates them and
 * checks agreement across ranks once, and sets up, registers and tunes.
 * MKX_Start enqueues one run on `stream` and does no collective host
 * work, so it can be captured in a CUDA graph (GPU path).  `info` may be
 * MPI_INFO_NULL.  All three _init calls and MKX_Request_free are collective.
 */
int MKX_Allgather_gemm_init(const void *A, int64_t m_local, int64_t k,
                            int64_t lda, const void *B, int64_t n, int64_t ldb,
                            MKX_Trans transb, void *C, int64_t ldc, void *A_out,
                            int64_t ld_aout, MKX_Datatype dtype,
                            MKX_Datatype ctype, MKX_Order order, MKX_Comm comm,
                            MPI_Info info, MKX_Request *request);
int MKX_Gemm_reduce_scatter_init(const void *A, int64_t M, int64_t k_local,
                                 int64_t lda, const void *B, int64_t n,
                                 int64_t ldb, MKX_Trans transb, void *C,
                                 int64_t ldc, MKX_Datatype dtype,
                                 MKX_Datatype ctype, MKX_Order order,
                                 MKX_Comm comm, MPI_Info info,
                                 MKX_Request *request);
int MKX_Gemm_allreduce_init(const void *A, int64_t M, int64_t k_local,
                            int64_t lda, const void *B, int64_t n, int64_t ldb,
                            MKX_Trans transb, void *C, int64_t ldc,
                            MKX_Datatype dtype, MKX_Datatype ctype,
                            MKX_Order order, MKX_Comm comm, MPI_Info info,
                            MKX_Request *request);
/* Collective over the request's communicator (every rank starts it). */
int MKX_Start(MKX_Request request, MKX_Stream stream);
/* Collective; waits for nothing (the stream orders work); sets *request
 * to NULL. */
int MKX_Request_free(MKX_Request *request);

/* ---- options ------------------------------------------------------------ */

/* Print version, build features, every option (environment variable,
 * MPI_Info key, type, default, current value, help) and, if comm is not
 * NULL, this rank's placement, to `stream` (a FILE *). */
int MKX_Info_print(MKX_Comm comm, void *file);

#ifdef __cplusplus
}
#endif
#endif /* MKX_H */
