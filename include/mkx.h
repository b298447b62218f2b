/*
 * mkx.h - the public header of MKX, fused multi-GPU kernels for HPC (data
 * tiles, for composing other kernels with MKX: mkx_tiles.h).
 *
 * This header is the contract: what every call needs and what it
 * guarantees.  The man pages (man mkx, man MKX_Allgather_gemm, ...) say
 * the same at more length.  Anything not stated here is not promised.
 *
 * ==== Rules shared by every call ==========================================
 *
 * Collective calls.  Every operation takes an MKX communicator (made once
 * from an MPI_Comm by MKX_Comm_create) and a stream, and returns an int
 * error code (MKX_SUCCESS == 0).  The operations, MKX_Comm_create,
 * MKX_Comm_free, MKX_Alloc_mem, MKX_Free_mem, the _init calls, MKX_Start
 * and MKX_Request_free are collective: every rank of the communicator
 * makes them, in the same order.  Everything else (the MKX_Comm_rank
 * family, MKX_Comm_get_async_error, MKX_Block_range, MKX_Type_size,
 * MKX_Error_string, MKX_Get_last_error, MKX_Get_version, MKX_Info_print)
 * is local.  Ranks that call different collective calls at the same point
 * get undefined results (an error or a timeout, not reliably a message).
 *
 * Threads.  MKX makes MPI calls only on the thread that calls it (its
 * helper threads, for the network transports and the GPU proxy, make
 * none): MPI_THREAD_FUNNELED is enough when that thread also makes the
 * program's MPI calls.  Calls on one communicator and its requests must
 * not overlap in time: make them from one thread at a time.  Concurrent
 * calls on different communicators from several threads are not
 * supported.  MKX_Get_last_error() is per thread.  A call that uses the
 * GPU may make the communicator's device current on the calling thread
 * (cudaSetDevice) and leaves it so.
 *
 * Buffers and paths.  The buffers of one call are either all device
 * memory (cudaMalloc, cudaMallocManaged, MKX_Alloc_mem) or all host memory
 * (malloc, cudaMallocHost, ...); a mix returns MKX_ERR_INVALID_ARG, and so
 * do device buffers on a communicator that runs the host path
 * (MKX_Comm_device() gives -1).  The kind must be the same on every rank.
 * NULL pointers allowed by a call (optional outputs, empty shares) do not
 * count, and a rank whose buffers are all NULL counts as host memory (so
 * it cannot join a device-buffer call that way).  Outputs must not overlap
 * inputs or each other (not supported, not checked).  Inputs are never
 * written.  Padding between the rows (or columns) of a matrix is left as
 * it was.
 *  - Host buffers run the host path (CBLAS and MPI): the call is
 *    synchronous, outputs are complete on return, `stream` is ignored.
 *  - Device buffers run on the communicator's GPU, ordered on `stream`.
 *    Where a GPU path fits (bf16/fp16 operands: the three tensor-parallel
 *    GEMM calls, options fused and hier_gemm; MKX_Ring_attention; both MoE
 *    calls, option moe_gpu; each call's comment below says the rest), its
 *    work runs on the GPU.  Most such calls return once the work is
 *    enqueued, like NCCL; a few wait on the host for part of it and so
 *    synchronise `stream`: on several nodes those whose network part the
 *    host drives (options hier_gemm=gpu or nvlink, hier_attn=host,
 *    hier_moe=host), and the MoE calls with option moe_sync=yes (the
 *    default).  Otherwise the call takes the staged path: it synchronises
 *    `stream`, copies the buffers to host memory, runs the host path and
 *    copies the outputs back, and returns when they are in place.
 *    MKX_LOG_LEVEL=info logs the path each call takes and why.
 *
 * Streams.  An MKX_Stream is a cudaStream_t (NULL: the legacy stream).
 * Inputs must be ready in `stream`'s order, as for NCCL: write them on
 * `stream`, or order the stream after the writes (an event).  Work on the
 * legacy default stream does not order a non-blocking stream, and
 * cudaMemcpy between device buffers, cudaMemset and the last part of a
 * large cudaMemcpy from pageable memory return before the device has
 * finished them: a call enqueued right after may read the old inputs.
 * Outputs of a fused call are ready in `stream`'s order; its buffers
 * must stay valid until the stream has passed the call.  Several ranks of
 * a node may drive one GPU (under MPS, or in time slices without it).
 * Under MPS each rank's GPU work of MKX then runs in an SM partition of its
 * own, on a stream of MKX's ordered after `stream` and before what comes
 * next on it (the caller's own kernels keep the whole GPU); options
 * shared_gpu, gpu_partition and gpu_ctas; mkx_info prints what a rank
 * has.
 *
 * CUDA graphs.  A call or MKX_Start on a fused single-node GPU path
 * (logged at info as "fused overlapped", "fused split", "fused split in
 * one kernel", "fused, operands adapted", "fused, operands read in
 * place", "attention engine" or "attention ring, one node"), on the
 * several-node paths driven by the GPU ("several nodes, driven by the GPU
 * (hier_gemm=proxy)", "attention ring, several nodes, driven by the GPU
 * (hier_attn=proxy)"), or on the MoE GPU paths ("MoE on one rank's GPU",
 * "MoE on one node's GPUs") with option moe_sync=no, may be captured into
 * a CUDA graph and replayed (MKX_Request_get_path and
 * MKX_Comm_get_last_path say which path ran and whether it may).  Every
 * rank captures the call or none does (a plain call captured on some
 * ranks only returns MKX_ERR_SHAPE_MISMATCH on every rank), and every
 * rank replays its graphs the same number of times, in the same order
 * with its other calls on the communicator.  A captured plain call makes
 * no workspace: it takes one that an earlier call of the same or a larger
 * shape made and left free, and keeps it for the graph until
 * MKX_Comm_free (so make the call once outside the capture first; a plan
 * makes its own at _init).  Where none is left it returns
 * MKX_ERR_UNSUPPORTED on every rank, saying so.  A call or MKX_Start whose
 * path is not among those above, on a stream being captured, returns
 * MKX_ERR_UNSUPPORTED before it touches the stream, so the capture stays
 * valid (they do host work that waits).  _init takes no stream and is
 * never captured.  A graph must not be replayed after MKX_Comm_free, nor
 * one of MKX_Start after MKX_Request_free.
 *
 * Agreement across ranks.  Each call first checks its arguments on every
 * rank, then exchanges the verdict and the values that must agree once,
 * before any data moves.  Below, every argument is marked "agreed" (the
 * same value on every rank) or "per rank" (may differ).
 *  - A rank whose own arguments are bad returns their code; every other
 *    rank returns MKX_ERR_PEER naming it.
 *  - Ranks that differ on an agreed value, or where some pass host
 *    buffers and others device buffers, all return MKX_ERR_SHAPE_MISMATCH
 *    naming the value and two ranks.
 *  - The options that choose a collective path or protocol (fused,
 *    fused_pad, tp_*, shared_gpu, gpu_partition, hier_gemm, hier_attn,
 *    hier_moe, attn_layout, moe_gpu, moe_sync, moe_release, net_fwd_ctas,
 *    net_sum_ctas, tune, virtual_node_size, net) are
 *    agreed once, by MKX_Comm_create (MKX_ERR_INVALID_ARG on every rank,
 *    naming the first that differs).  Other options may differ per rank.
 * Not checked: buffer contents (except MoE expert ids) and that buffers
 * are as large as their arguments say.
 *
 * Sizes.  Sizes, counts and leading dimensions are int64_t.  Each must be
 * at most 2^40 (else MKX_ERR_BAD_SIZE, MKX_ERR_BAD_LD for a leading
 * dimension).  Every buffer whose size is a product of arguments must
 * also hold at most 2^40 elements: for the GEMM calls the elements a
 * matrix spans (its rows, or columns, times its leading dimension), for
 * MKX_Ring_attention and the MoE calls each tensor (MKX_ERR_BAD_SIZE
 * naming the buffer, at the call or at _init).
 *
 * Errors and outputs.  After a failed call MKX_Get_last_error() names the
 * argument, rank or tile at fault.  A call that fails in its checks or in
 * the agreement (MKX_ERR_INVALID_ARG, _NULL_POINTER, _BAD_SIZE, _BAD_LD,
 * _UNSUPPORTED, _SHAPE_MISMATCH, MKX_ERR_PEER for a rank's arguments,
 * MKX_ERR_INVALID_COMM) has written no output.  MKX_ERR_TRUNCATE writes
 * only MKX_Moe_dispatch_gemm's expert_rows.  After any other failure the
 * outputs are undefined (they may be partly written).
 *
 * Timeouts.  Every wait for another rank, on the host and on the GPU, is
 * bounded by option timeout_ms (MKX_TIMEOUT_MS, default 300000 ms); then
 * the waiting rank gets MKX_ERR_TIMEOUT, whose message names the step it
 * waited in (on the GPU: the rank and tile it waited for).  Nothing
 * hangs.  What a rank that arrives after the others gave up gets depends
 * on the path:
 *  - Host work (the host and staged paths, and the checks and set-up of
 *    every call and _init, fused ones included): a rank that gives up
 *    tells the others; a late rank whose exchange then completes with
 *    what they had sent returns MKX_ERR_PEER (naming the rank that gave
 *    up) at the end of that exchange or of the call, not success.  A tell
 *    still in flight then is not waited for: the call's result stands and
 *    the late rank's next call fails.  A late rank may also wait its own
 *    timeout in a step the others never reached (MKX_ERR_TIMEOUT).  The
 *    several-node GPU paths give no more than this.
 *  - Ranks out of step (one skipped a call, makes another call than the
 *    others, or frees the communicator while they call): each exchange
 *    carries what it is, so a rank whose exchange meets another returns
 *    MKX_ERR_PEER naming both (MKX_ERR_SHAPE_MISMATCH naming both calls
 *    where both are calls' agreements), never an MPI error that ends the
 *    job.  MKX_Comm_free of such a communicator returns.
 *  - Fused single-node GPU paths (MKX_Start of a fused plan, and the GPU
 *    part of a fused call): a rank that gives up tells its peers; a late
 *    rank that was told reports MKX_ERR_PEER (naming the rank that gave
 *    up), never success on a void result.  With more than two ranks, a
 *    rank that was itself waiting may report that instead of its own
 *    MKX_ERR_TIMEOUT.  A rank that gave up waiting for a peer's arrival
 *    writes nothing into that peer's output buffers.
 * A fused call returns once enqueued, so a failure of its GPU work is
 * reported later: by the next call or _init on the communicator that
 * takes or sets up a fused path, by MKX_Comm_get_async_error, or, with
 * option blocking (MKX_BLOCKING=yes, not while `stream` is being
 * captured), by the call itself, which then waits for its work.  The
 * outputs of such a run are undefined.
 *
 * The communicator after a failure.  MKX_ERR_TIMEOUT, MKX_ERR_MPI,
 * MKX_ERR_NET, MKX_ERR_PEER of ranks out of step, and a GPU failure
 * reported as MKX_ERR_TIMEOUT, MKX_ERR_PEER or MKX_ERR_SHAPE_MISMATCH
 * (MKX_Start of different plans), make the communicator unusable on the
 * rank that gets them:
 * later calls on it return MKX_ERR_INVALID_COMM quoting the first failure
 * (the MKX_Comm_rank family still works); free it (MKX_Comm_free works,
 * its waits are bounded) and create another.  There is no recovery in
 * place.  After any other error the communicator stays usable.
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
#define MKX_VERSION_CODE(a, b, c) ((a)*10000 + (b)*100 + (c))
#define MKX_VERSION                                                            \
  MKX_VERSION_CODE(MKX_VERSION_MAJOR, MKX_VERSION_MINOR, MKX_VERSION_PATCH)

/* The version of the library actually linked (may differ from the header). */
int MKX_Get_version(int *major, int *minor, int *patch);

/* ---- errors ------------------------------------------------------------ */

enum {
  MKX_SUCCESS = 0,
  MKX_ERR_INVALID_ARG = 1,      /* an argument is invalid (see the message) */
  MKX_ERR_NULL_POINTER = 2,     /* a required pointer is NULL */
  MKX_ERR_BAD_SIZE = 3,         /* a size is negative, zero or too large */
  MKX_ERR_BAD_LD = 4,           /* a leading dimension is too small */
  MKX_ERR_UNSUPPORTED = 5,      /* dtype/order/feature not supported here */
  MKX_ERR_SHAPE_MISMATCH = 6,   /* ranks disagree on a collective argument */
  MKX_ERR_TRUNCATE = 7,         /* an output buffer is too small */
  MKX_ERR_CUDA = 8,             /* a CUDA runtime or library call failed */
  MKX_ERR_MPI = 9,              /* an MPI call failed */
  MKX_ERR_NET = 10,             /* a network transport failed */
  MKX_ERR_TIMEOUT = 11,         /* a bounded wait for another rank ran out */
  MKX_ERR_NOMEM = 12,           /* host or device memory exhausted */
  MKX_ERR_PEER = 13,            /* another rank failed during the call */
  MKX_ERR_INVALID_COMM = 14,    /* NULL or freed communicator */
  MKX_ERR_INVALID_REQUEST = 15, /* NULL or freed persistent request */
  MKX_ERR_INTERNAL = 16,        /* a bug in MKX: please report it */
  MKX_ERR_LASTCODE = 16
};

/* A static description of an error code ("invalid argument", ...). */
const char *MKX_Error_string(int err);

/* The message of the last failed MKX call on this thread: names the
 * argument, rank or tile at fault.  Empty string if none. */
const char *MKX_Get_last_error(void);

/* ---- types -------------------------------------------------------------- */

/* Element types.  16- and 8-bit values are passed as their bit patterns
 * (uint16_t, uint8_t).  Arithmetic accumulates in fp32, or fp64 for
 * MKX_FP64.  The fp8 types (OCP FP8, as Hopper's tensor cores take them)
 * are operand types of the three tensor-parallel GEMM calls only, with
 * optional scales (MKX_Scales); the other operations (attention, MoE,
 * tile sets) return MKX_ERR_UNSUPPORTED for them. */
typedef enum {
  MKX_BF16 = 1, /* bfloat16 */
  MKX_FP16 = 2, /* IEEE half */
  MKX_FP32 = 3,
  MKX_FP64 = 4,
  MKX_FP8_E4M3 = 5, /* fp8 E4M3: largest 448, no infinity, NaN S.1111.111 */
  MKX_FP8_E5M2 = 6  /* fp8 E5M2: largest 57344, IEEE-like inf and NaN */
} MKX_Datatype;

/* Storage order, one per call for every matrix of the call.  A leading
 * dimension must be >= the columns (row-major) or rows (column-major) of
 * its matrix, and >= 1, else MKX_ERR_BAD_LD. */
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

/* Collective over `comm`.  Duplicates it, reads the options, splits ranks
 * into nodes (same host name and, under srun, same SLURM_NODEID; or
 * virtual nodes, see option virtual_node_size), picks this rank's GPU,
 * and exchanges what the transports need.  `info` may be MPI_INFO_NULL;
 * its "mkx_*" keys override the MKX_* environment variables (see mkx_info
 * for the list; other keys are ignored).  Options are fixed for the life
 * of the communicator.  The options that choose a collective path or
 * protocol (listed under "Agreement across ranks" above) must be the same
 * on every rank: else every rank
 * returns MKX_ERR_INVALID_ARG naming the first that differs.
 * GPU choice, first match wins: option `device`; the only visible GPU;
 * the launcher's local rank (SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK,
 * MPI_LOCALRANKID) modulo the visible GPU count; the local rank within
 * `comm` modulo the count.  CUDA_VISIBLE_DEVICES is honoured by the CUDA
 * runtime itself.  The chosen device becomes current on the calling thread.
 * With no usable GPU the communicator runs the host path.
 * Errors: MKX_ERR_INVALID_ARG (comm is MPI_COMM_NULL, an unknown mkx_*
 * key, a bad option value, options that differ), MKX_ERR_NULL_POINTER
 * (newcomm), MKX_ERR_UNSUPPORTED (option path=gpu without a usable GPU),
 * MKX_ERR_MPI, MKX_ERR_CUDA, MKX_ERR_NOMEM, MKX_ERR_TIMEOUT, MKX_ERR_PEER.
 * A failure on one rank is a failure on every rank (*newcomm = NULL),
 * except that a rank passing MPI_COMM_NULL returns at once and the others
 * time out. */
int MKX_Comm_create(MPI_Comm comm, MPI_Info info, MKX_Comm *newcomm);

/* Collective.  Sets *comm to NULL.  Requests made on it must be freed
 * first (else MKX_ERR_INVALID_ARG, nothing freed); memory from
 * MKX_Alloc_mem should be freed before, and work enqueued with it must be
 * complete.  Works on a communicator made unusable by a failure. */
int MKX_Comm_free(MKX_Comm *comm);

/* Local queries; they work on an unusable communicator too. */
int MKX_Comm_rank(MKX_Comm comm, int *rank);
int MKX_Comm_size(MKX_Comm comm, int *size);
int MKX_Comm_node(MKX_Comm comm, int *node); /* node index, 0-based */
int MKX_Comm_num_nodes(MKX_Comm comm, int *num_nodes);
int MKX_Comm_local_rank(MKX_Comm comm, int *local_rank); /* rank in node */
int MKX_Comm_local_size(MKX_Comm comm, int *local_size); /* ranks in node */
/* CUDA device ordinal this rank uses, or -1 when it runs the host path. */
int MKX_Comm_device(MKX_Comm comm, int *device);
/* Local, never blocks or synchronises: *async_error = MKX_SUCCESS, or the
 * failure of GPU work that calls on `comm` enqueued earlier (with option
 * blocking off, a fused call returns once its work is enqueued):
 * MKX_ERR_TIMEOUT when a wait on the GPU for another rank ran out
 * (MKX_Get_last_error() names the rank and what it waited for),
 * MKX_ERR_PEER when another rank gave up on a run this rank took part in
 * (its result is void; the message names that rank and what it waited
 * for) - either way the communicator is then unusable and later calls
 * return MKX_ERR_INVALID_COMM - or MKX_ERR_INVALID_COMM if it already was.
 * Poll it, e.g. while waiting on the stream, to learn of a failure before
 * the next call. */
int MKX_Comm_get_async_error(MKX_Comm comm, int *async_error);

/* Rows owned by block b when `rows` rows are split over `nblocks` blocks:
 * the first rows % nblocks blocks get one row more.  This is the split of
 * MKX_Gemm_reduce_scatter's output. */
int MKX_Block_range(int64_t rows, int nblocks, int b, int64_t *first,
                    int64_t *count);

/* ---- memory --------------------------------------------------------------- */

/* Collective: every rank asks for the same `size` (agreed; else
 * MKX_ERR_SHAPE_MISMATCH on every rank; 0 is allowed).  Returns memory on
 * the communicator's GPU (host memory on the host path) aligned to 256
 * bytes; device memory is mapped into every GPU of the node (symmetric:
 * MKX's kernels reach peers' copies directly, no registration) and can be
 * used as any buffer of any call and as ordinary device memory.
 * A NULL `ptr` on one rank fails on every rank (MKX_ERR_NULL_POINTER
 * there, MKX_ERR_PEER elsewhere), and so does a failed device allocation
 * or mapping; on the host path a failed allocation (MKX_ERR_NOMEM) is
 * this rank's alone.  On failure *ptr = NULL (ptr not NULL).
 * MKX_Free_mem: every rank frees its corresponding pointer (or NULL
 * everywhere, which does nothing); on a GPU communicator it is collective,
 * on the host path local.  A pointer MKX_Alloc_mem did not return on this
 * communicator, or one freed already, is MKX_ERR_INVALID_ARG (never freed
 * or read).  Work using the memory must be complete before. */
int MKX_Alloc_mem(MKX_Comm comm, size_t size, void **ptr);
int MKX_Free_mem(MKX_Comm comm, void *ptr);

/* ---- fp8 scales ----------------------------------------------------------- */

/*
 * Scales of fp8 operands.  An element's value is its fp8 value times its
 * scale, so the product is C = (sa . A) x (sb . B): each element times
 * its scale, rounded to fp32, then the call's fp32 accumulation and one
 * rounding to ctype.  On the GPU's fp8 paths (the fused tensor-parallel
 * calls, hier_gemm=gpu, and the MoE calls with option moe_fp8) each
 * 128-deep K block of products is summed by the tensor cores in fewer
 * bits than fp32, within 2^-10 of the block's sum of the products'
 * magnitudes, before it is added in fp32 times its scales.  With A the rank's A as passed (rows x k: m_local x k
 * for MKX_Allgather_gemm_scaled, M x k_local for the reductions), op(B)
 * its k x n B, kb = ceil(k / 128) and nb = ceil(n / 128):
 *   MKX_SCALE_NONE    every scale 1; a, b and a_out are not used.
 *   MKX_SCALE_TENSOR  a: 1 value (all of A), b: 1 value (all of B).
 *   MKX_SCALE_ROW     a: one per row of A (rows values); b: one per column
 *                     of op(B) (n values).
 *   MKX_SCALE_BLOCK   a: one per row and 128 columns of A, a rows x kb
 *                     matrix; b: one per 128 x 128 block of op(B), a kb x
 *                     nb matrix (DeepSeek's layout).  The last block of a
 *                     dimension may be partial.
 * The scale matrices are dense (leading dimension: their columns when
 * `order` is row-major, their rows when column-major) in the call's
 * `order`, and b's is stored as B is: nb x kb when transb == MKX_TRANS.
 * The MKX_Scales struct is host memory, read by the call (or copied by
 * _init); its arrays are fp32 in the same kind of memory as A and B
 * (device or host), ready in `stream`'s order like them.  Each scale that
 * is read must be finite and > 0: else MKX_ERR_INVALID_ARG naming the
 * array and its index (every other rank: MKX_ERR_PEER), found when the
 * call (or MKX_Start of its plan) reads them, with no output written.
 *   agreed:   layout.
 *   per rank: a, b, a_out and the values.  a may be NULL when A has no
 *             elements (m_local or k_local 0), b when B has none (k_local
 *             0).
 * a_out (may be NULL; used by MKX_Allgather_gemm_scaled with A_out only,
 * ignored otherwise): receives the gathered A's scales, one per row (M
 * values, rank order) for MKX_SCALE_TENSOR and MKX_SCALE_ROW, an M x kb
 * matrix for MKX_SCALE_BLOCK, so that A_out and a_out are an operand of a
 * later call with MKX_SCALE_ROW or MKX_SCALE_BLOCK.  It must not overlap a
 * or b.
 * A layout other than MKX_SCALE_NONE needs an fp8 dtype (else
 * MKX_ERR_INVALID_ARG); a or b NULL where not allowed:
 * MKX_ERR_NULL_POINTER; a layout that is not one of the enumerators:
 * MKX_ERR_INVALID_ARG.
 */
typedef enum {
  MKX_SCALE_NONE = 0,
  MKX_SCALE_TENSOR = 1,
  MKX_SCALE_ROW = 2,
  MKX_SCALE_BLOCK = 3
} MKX_Scale_layout;

/* The block of MKX_SCALE_BLOCK, along k (and n for b). */
#define MKX_SCALE_BLOCK_SIZE 128

typedef struct MKX_Scales {
  MKX_Scale_layout layout;
  const float *a; /* A's scales */
  const float *b; /* B's scales */
  float *a_out;   /* the gathered A's (MKX_Allgather_gemm_scaled) */
} MKX_Scales;

/* ---- tensor-parallel GEMM operations ------------------------------------- */

/*
 * Shared by the three calls below.  All matrices have storage order
 * `order`; A, B (and A_out) have type `dtype`, C has type `ctype` (bf16,
 * fp16 or fp32 with a 16/32-bit or fp8 dtype; MKX_FP64 only with MKX_FP64:
 * fp64 mixed with another type, and an fp8 ctype, return
 * MKX_ERR_UNSUPPORTED).  Products accumulate in fp32 (fp64 for MKX_FP64)
 * and C is rounded once to ctype.  fp8 operands take scales through the
 * _scaled calls below (here every scale is 1).
 * transb is per rank: ranks may mix MKX_NO_TRANS and MKX_TRANS.
 * Fused GPU path (device buffers, one node): bf16/fp16 A and B, bf16, fp16
 * or fp32 C, up to 8 ranks, sizes below 2^31 (a GEMM+RS/AR rank with
 * k_local = 0 takes it too); fp8 A and B as the _scaled calls below say.
 * Other cases on one node, and option
 * fused=off, take the staged path; several nodes take the path of option
 * hier_gemm.  Awkward k, n, leading dimensions or alignment go through
 * padded GPU temporaries (option fused_pad).  Persistent plans: see
 * MKX_*_init below.
 * Errors (besides those of the contract at the top): MKX_ERR_INVALID_ARG
 * (dtype, ctype, order or transb not one of their enumerators; mixed or
 * unusable buffer kinds), MKX_ERR_UNSUPPORTED (fp64 mixed, fp8 ctype),
 * MKX_ERR_BAD_SIZE, MKX_ERR_NULL_POINTER, MKX_ERR_BAD_LD (listed per
 * call), MKX_ERR_SHAPE_MISMATCH, MKX_ERR_PEER, MKX_ERR_TIMEOUT,
 * MKX_ERR_MPI, MKX_ERR_NET, MKX_ERR_CUDA, MKX_ERR_NOMEM,
 * MKX_ERR_INVALID_COMM.
 */

/*
 * AllGather + GEMM.  Rank r holds A_r, m_local x k, and B_r, k x n (stored
 * n x k when transb == MKX_TRANS).  On return
 *     C_r = [A_0; A_1; ...; A_{p-1}] x B_r        (M x n, rows in rank order)
 * where M = sum of m_local over ranks.
 *   agreed:   k (>= 1), dtype, ctype, order, host or device buffers.
 *   per rank: m_local (>= 0; M must be > 0), A (may be NULL if
 *             m_local = 0), lda, B, n (>= 1), ldb, transb, C, ldc, A_out,
 *             ld_aout.
 * C: M x n, type ctype, leading dimension ldc.  If A_out is not NULL it
 * receives the gathered A, M x k, type dtype, leading dimension ld_aout.
 * Column-major ldc and ld_aout must be >= M, which is checked once M is
 * known (the rank at fault gets MKX_ERR_BAD_LD, the others MKX_ERR_PEER).
 * MKX_ERR_BAD_SIZE: m_local < 0, k or n < 1, or m_local = 0 on every rank.
 * MKX_ERR_NULL_POINTER: B or C NULL, or A NULL with m_local > 0.
 */
int MKX_Allgather_gemm(const void *A, int64_t m_local, int64_t k, int64_t lda,
                       const void *B, int64_t n, int64_t ldb, MKX_Trans transb,
                       void *C, int64_t ldc, void *A_out, int64_t ld_aout,
                       MKX_Datatype dtype, MKX_Datatype ctype, MKX_Order order,
                       MKX_Comm comm, MKX_Stream stream);

/*
 * GEMM + ReduceScatter.  Rank r holds A_r, M x k_local, and B_r, k_local x n
 * (stored n x k_local when transb == MKX_TRANS).  On return C_r holds rows
 * [first, first + count) of sum_q A_q x B_q, where MKX_Block_range(M, p, r,
 * &first, &count) gives the split; C_r is count x n, type ctype, leading
 * dimension ldc.
 *   agreed:   M (>= 1), n (>= 1), dtype, ctype, order, host or device
 *             buffers.
 *   per rank: k_local (>= 0; a rank with 0 contributes nothing and may
 *             pass NULL A and B), A, lda, B, ldb, transb, C (may be NULL
 *             when count = 0, i.e. M < p), ldc.
 * The sum is formed in fp32 (fp64 for MKX_FP64) in a fixed order (the same
 * bits every run) and rounded once.  On the fused GPU path each rank's
 * partial product crosses NVLink in C's type, as with cuBLAS followed by
 * NCCL, unless option tp_partials=fp32.
 * MKX_ERR_BAD_SIZE: M or n < 1, k_local < 0.
 * MKX_ERR_NULL_POINTER: A or B NULL with k_local > 0, C NULL with count > 0.
 */
int MKX_Gemm_reduce_scatter(const void *A, int64_t M, int64_t k_local,
                            int64_t lda, const void *B, int64_t n, int64_t ldb,
                            MKX_Trans transb, void *C, int64_t ldc,
                            MKX_Datatype dtype, MKX_Datatype ctype,
                            MKX_Order order, MKX_Comm comm, MKX_Stream stream);

/*
 * GEMM + AllReduce.  As MKX_Gemm_reduce_scatter (same agreed and per-rank
 * arguments), but every rank receives the whole M x n sum in C (type
 * ctype, leading dimension ldc, C never NULL), with the same bits on every
 * rank.
 */
int MKX_Gemm_allreduce(const void *A, int64_t M, int64_t k_local, int64_t lda,
                       const void *B, int64_t n, int64_t ldb, MKX_Trans transb,
                       void *C, int64_t ldc, MKX_Datatype dtype,
                       MKX_Datatype ctype, MKX_Order order, MKX_Comm comm,
                       MKX_Stream stream);

/*
 * The three calls above with scales for fp8 operands (see MKX_Scales):
 * the same arguments, agreement and errors, plus `scales` (NULL: layout
 * MKX_SCALE_NONE; the calls above are these with NULL).  AllGather+GEMM
 * gathers each rank's A rows in fp8 (a byte per element) with their
 * scales.  GEMM+ReduceScatter and GEMM+AllReduce apply each rank's scales
 * to its own partial product before the sum.
 * fp8 on the fused GPU path (device buffers, one node): row-major, B
 * stored n x k (transb = MKX_TRANS), k (k_local), lda and ldb multiples
 * of 16, n and ldc multiples of 8, 16-byte aligned A, B and C, on every
 * rank; the split path (option tp_overlap has no say): AllGather+GEMM
 * moves the fp8 rows and their scales, then multiplies once every rank's
 * are in place (with option tp_pull=yes, where every rank's rows but the
 * last are a multiple of 128, only the scales move and the GEMM reads
 * each rank's rows in its own A: "fused, operands read in place");
 * GEMM+RS/AR multiply into the partial of option tp_partials, then sum.  On
 * several nodes (option hier_gemm other than host) the same operands take
 * hier_gemm=gpu's path: the fp8 rows and their scales, or the fp32
 * partials, through host memory, the fp8 GEMM on the GPU.
 * Such a call with scales checks them before it enqueues anything (a
 * synchronisation of `stream`), so that a bad value is its return value:
 * it cannot be captured in a CUDA graph (MKX_SCALE_NONE can).  Other fp8
 * calls take the staged path.
 */
int MKX_Allgather_gemm_scaled(const void *A, int64_t m_local, int64_t k,
                              int64_t lda, const void *B, int64_t n,
                              int64_t ldb, MKX_Trans transb, void *C,
                              int64_t ldc, void *A_out, int64_t ld_aout,
                              MKX_Datatype dtype, MKX_Datatype ctype,
                              MKX_Order order, const MKX_Scales *scales,
                              MKX_Comm comm, MKX_Stream stream);
int MKX_Gemm_reduce_scatter_scaled(const void *A, int64_t M, int64_t k_local,
                                   int64_t lda, const void *B, int64_t n,
                                   int64_t ldb, MKX_Trans transb, void *C,
                                   int64_t ldc, MKX_Datatype dtype,
                                   MKX_Datatype ctype, MKX_Order order,
                                   const MKX_Scales *scales, MKX_Comm comm,
                                   MKX_Stream stream);
int MKX_Gemm_allreduce_scaled(const void *A, int64_t M, int64_t k_local,
                              int64_t lda, const void *B, int64_t n,
                              int64_t ldb, MKX_Trans transb, void *C,
                              int64_t ldc, MKX_Datatype dtype,
                              MKX_Datatype ctype, MKX_Order order,
                              const MKX_Scales *scales, MKX_Comm comm,
                              MKX_Stream stream);

/* ---- sequence parallel attention ----------------------------------------- */

/*
 * Ring attention.  With p ranks the sequence has p*seq_local positions,
 * and local position i of rank r's Q, K and V is global position
 *   contiguous (option attn_layout, the default): r*seq_local + i;
 *   zigzag: the sequence in 2p chunks of h = seq_local/2 (seq_local even,
 *     else MKX_ERR_BAD_SIZE), rank r holding chunks r and 2p-1-r:
 *     r*h + i for i < h, else (2p-1-r)*h + i - h; causal work is then
 *     the same on every rank;
 *   striped: i*p + r.
 * The layout is a communicator option (agreed at MKX_Comm_create).  Tensors
 * are dense and row-major, no leading dimensions, all of type dtype:
 * Q and O [batch][seq_local][heads_q][head_dim], K and V
 * [batch][seq_local][heads_kv][head_dim]; heads_q must be a multiple of
 * heads_kv (grouped-query attention: query head h reads key/value head
 * h / (heads_q / heads_kv)).  On return
 *     O_r = softmax(scale * Q_r K^T + mask) V      over the whole K, V
 * (all ranks' positions), O of type dtype, rounded once.  causal != 0: the
 * causal mask on global positions (in the layout): query position i sees
 * key positions j <= i (its own included, so every row has a visible
 * key); causal = 0:
 * no mask.  scale <= 0 selects 1/sqrt(head_dim).  If LSE is not NULL it
 * receives the natural log-sum-exp of each row's scaled, visible scores,
 * fp32 [batch][heads_q][seq_local].  Host path: the softmax in double.
 * GPU path (device buffers, bf16/fp16, head_dim a multiple of 8 up to 128,
 * at most 8 ranks per node and 32 in all on nodes of equal size; others
 * are staged through the host path): the softmax in fp32 with the
 * probabilities rounded to dtype before they multiply V, on the stream
 * without host synchronisation; its errors are reported as the fused GEMM
 * calls' are (option blocking).
 *   agreed:   batch, seq_local, heads_q, heads_kv, head_dim (each >= 1),
 *             causal (as zero / non-zero), scale (bit for bit, after a
 *             value <= 0 is replaced), dtype, host or device buffers.
 *   per rank: Q, K, V, O, LSE (NULL or not).
 * Errors: MKX_ERR_INVALID_ARG (dtype; scale NaN or infinite; buffer
 * kinds), MKX_ERR_BAD_SIZE (a size < 1, heads_q not a multiple of
 * heads_kv, Q or K over 2^40 elements), MKX_ERR_NULL_POINTER (Q, K, V or
 * O), MKX_ERR_UNSUPPORTED (an fp8 dtype), and those of the contract at the
 * top.
 */
int MKX_Ring_attention(const void *Q, const void *K, const void *V, void *O,
                       float *LSE, int64_t batch, int64_t seq_local,
                       int64_t heads_q, int64_t heads_kv, int64_t head_dim,
                       int causal, double scale, MKX_Datatype dtype,
                       MKX_Comm comm, MKX_Stream stream);

/* ---- expert parallel MoE ------------------------------------------------- */

/*
 * Shared by the two calls below.  Experts are spread in blocks: with
 * E = num_experts (a multiple of the communicator size p) rank r owns
 * experts [r*E/p, (r+1)*E/p).  Rank r holds its tokens X_r, num_tokens x
 * hidden, row-major, type dtype, and for each token `topk` global expert
 * ids (int32, [num_tokens][topk], each in [0, E), distinct within a token:
 * else every rank returns MKX_ERR_INVALID_ARG naming the rank, token and
 * slot) and gate weights (fp32, same shape).  num_tokens may be 0 on any
 * rank, or on every rank: such a rank passes no tokens (X, topk_ids,
 * topk_weight, and MKX_Moe_layer's out, may be NULL) but takes part and
 * still serves its experts.  Weights are row-major, contiguous, type dtype,
 * this rank's E/p experts in order.  Device buffers (routing arrays
 * included) in bf16 or fp16, on one rank or on several ranks of one node
 * (option moe_gpu): the call runs on the GPU (routing, token rows pushed
 * into the owners, grouped expert GEMMs, and the layer's SwiGLU and
 * combine).  With option moe_sync=yes (the default) it waits once for its
 * routing (a few bytes back to the host) so that bad ids and truncation
 * are its own return value, and so cannot be captured in a CUDA graph.
 * With moe_sync=no it only enqueues work: a run with bad ids writes
 * nothing, one with too many rows only expert_rows, on every rank, and the
 * error (the same code and message) is returned by MKX_Comm_get_async_error
 * once the stream has passed the run, or with option blocking by the call
 * itself; the communicator stays usable.  Ranks of several nodes, and fp32
 * or fp64, take the staged path.
 *   agreed:   hidden, topk, num_experts (each >= 1, topk <= num_experts),
 *             n (dispatch) or ffn (layer) (>= 1), dtype, host or device
 *             buffers.
 *   per rank: num_tokens (>= 0) and every pointer; y_rows (dispatch).
 * Errors: MKX_ERR_INVALID_ARG (dtype, expert ids, buffer kinds),
 * MKX_ERR_BAD_SIZE (sizes, topk > num_experts, num_experts not a multiple
 * of p, a buffer over 2^40 elements), MKX_ERR_NULL_POINTER (below),
 * MKX_ERR_UNSUPPORTED (an fp8 dtype; num_tokens, E/p or topk above 2^31 -
 * 1), and those of the contract at the top.
 */

/*
 * MoE dispatch + GEMM.  Each token row is sent to the owner of each of its
 * experts, and each local expert e multiplies the rows routed to it by its
 * weight W[e] (hidden x n; W is [E/p][hidden][n]).
 * Y (row-major, width n, type dtype, room for y_rows rows) receives the
 * products grouped by local expert (expert 0's rows first); within an
 * expert rows are ordered by (source rank, token, slot); rows past the
 * last are not written.  If topk_weight is not NULL each row is scaled by
 * its gate weight (in fp32, before the one rounding to dtype).
 * expert_rows[e] (int64, E/p entries) receives each local expert's row
 * count.  If origin is not NULL, origin[3*i .. 3*i+2] = (source rank,
 * token, slot) of row i (room for y_rows triples).
 * If more than y_rows rows arrive on any rank, every rank returns
 * MKX_ERR_TRUNCATE (the message names the rank) and fills its expert_rows
 * with the counts needed; Y and origin are not written.
 * MKX_ERR_NULL_POINTER: W or expert_rows NULL; X or topk_ids NULL with
 * num_tokens > 0; Y NULL with y_rows > 0.
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
 * with e_j = topk_ids[t][j], silu(v) = v / (1 + exp(-v)), * elementwise.
 * W1 is [E/p][hidden][2*ffn] (gate columns, then up columns), W2 is
 * [E/p][ffn][hidden].  out is num_tokens x hidden, row-major, type dtype,
 * on the token's own rank.  Intermediate values (x W1, the SwiGLU
 * activation, each FFN output, the weighted sum) stay in fp32 (fp64 for
 * MKX_FP64) and are not rounded to dtype, except on the GPU, where the
 * SwiGLU activation is rounded to dtype once as the input of the W2
 * product; out is rounded once.  The sum over j runs in slot order (the
 * same bits every run).
 * MKX_ERR_NULL_POINTER: W1 or W2 NULL; X, topk_ids, topk_weight or out
 * NULL with num_tokens > 0 (topk_weight is required here).
 */
int MKX_Moe_layer(const void *X, int64_t num_tokens, int64_t hidden,
                  const int32_t *topk_ids, const float *topk_weight,
                  int64_t topk, int64_t num_experts, const void *W1,
                  const void *W2, int64_t ffn, void *out, MKX_Datatype dtype,
                  MKX_Comm comm, MKX_Stream stream);

/*
 * MKX_Moe_dispatch_gemm with fp8 tokens and weights (MKX_FP8_E4M3 or
 * MKX_FP8_E5M2 dtype; any other dtype takes MKX_SCALE_NONE only) and Y of
 * type ytype: bf16, fp16 or fp32, or MKX_FP64 with an MKX_FP64 dtype (an
 * fp8 ytype, or fp64 mixed with another type: MKX_ERR_UNSUPPORTED).
 * transw is how each local expert's weight is stored: MKX_NO_TRANS,
 * hidden x n as for the plain call (W is [E/p][hidden][n]); MKX_TRANS,
 * n x hidden, as nn.Linear and fp8 checkpoints store it, with the output
 * features as rows (W is [E/p][n][hidden], dense, the experts in order).
 * Both give the same results, bit for bit, for the same weights and
 * scales.
 * Each token's scales travel with its rows to the experts' owners, and
 *     Y row = gate weight x (s_X (.) X[t]) x (s_W (.) W[e])
 * in fp32, rounded once to ytype, where (.) applies each element's scale
 * (MKX_Scales, laid out as for the tensor-parallel calls with A = this
 * rank's X, num_tokens x hidden, and B = each local expert's weight,
 * hidden x n, row-major, and transb = transw):
 *   MKX_SCALE_TENSOR  a: 1 value (this rank's X); b: one per local expert
 *                     (E/p values).
 *   MKX_SCALE_ROW     a: one per token; b: one per output column of each
 *                     local expert ([E/p][n]), either transw.
 *   MKX_SCALE_BLOCK   a: one per token and 128 columns of X
 *                     ([num_tokens][kb], kb = ceil(hidden / 128)); b: one
 *                     per 128 x 128 block of each local expert, stored as
 *                     its weight is: [E/p][kb][nb] (nb = ceil(n / 128)),
 *                     or [E/p][nb][kb] with MKX_TRANS (DeepSeek's fp8
 *                     checkpoints).
 * a_out is ignored.  The scale rules (values, NULL pointers, agreed
 * layout) are those of MKX_Scales; a may be NULL when num_tokens is 0.
 * Agreed besides the call's: transw, ytype and scales->layout.  transw
 * other than MKX_NO_TRANS or MKX_TRANS: MKX_ERR_INVALID_ARG.  The call
 * takes the host path for host buffers.  With option moe_fp8=yes, device
 * buffers with fp8 on one node (several ranks: scales other than
 * MKX_SCALE_TENSOR), MKX_TRANS and hidden a multiple of 16 take the GPU's
 * fp8 path (the rows and their scales gathered, the fp8
 * grouped GEMM with each 128-deep K block summed apart and added in fp32
 * times its scales, Y in ytype).  Its scales are checked on the GPU before
 * the run: with moe_sync=yes the call waits for that verdict (a
 * synchronisation of the stream, so it cannot be captured) and a bad
 * scale is its return value; with moe_sync=no the verdict goes with the
 * routing's, as a bad id's does (nothing written, the error reported
 * later), and the call can be captured.  Other device buffers with fp8, a
 * ytype other than dtype, or MKX_TRANS take the staged path (the plain
 * call's kernels read a 16-bit W hidden x n); the others the plain call's
 * path.  The plain MKX_Moe_dispatch_gemm and MKX_Moe_layer return
 * MKX_ERR_UNSUPPORTED for an fp8 dtype (the layer's fp8 form:
 * MKX_Moe_layer_scaled).
 */
int MKX_Moe_dispatch_gemm_scaled(
    const void *X, int64_t num_tokens, int64_t hidden, const int32_t *topk_ids,
    const float *topk_weight, int64_t topk, int64_t num_experts, const void *W,
    int64_t n, MKX_Trans transw, void *Y, int64_t y_rows, int64_t *expert_rows,
    int32_t *origin, MKX_Datatype dtype, MKX_Datatype ytype,
    const MKX_Scales *scales, MKX_Comm comm, MKX_Stream stream);

/*
 * MKX_Moe_layer with fp8 tokens and weights (MKX_FP8_E4M3 or MKX_FP8_E5M2
 * dtype; any other dtype takes MKX_SCALE_NONE only) and out of type otype
 * (as ytype above).  transw is how both weights of each local expert are
 * stored (agreed; as for MKX_Moe_dispatch_gemm_scaled): MKX_NO_TRANS, W1
 * hidden x 2 ffn and W2 ffn x hidden as for the plain call; MKX_TRANS,
 * with the output features as rows, W1 2 ffn x hidden (gate rows, then up
 * rows) and W2 hidden x ffn, dense, the experts in order.  Both give the
 * same out, bit for bit.  scales holds X's scales (a) and W1's (b), laid
 * out as for MKX_Moe_dispatch_gemm_scaled with each local expert's W1 a
 * hidden x 2 ffn weight; scales2 holds W2's (b; a and a_out are ignored),
 * each local expert's W2 an ffn x hidden weight:
 *   MKX_SCALE_TENSOR  one per local expert;
 *   MKX_SCALE_ROW     one per output column of each local expert's
 *                     weight ([E/p][2 ffn] for W1, [E/p][hidden] for W2),
 *                     either transw;
 *   MKX_SCALE_BLOCK   one per 128 x 128 block of each, stored as the
 *                     weight is: [E/p][kb][nb] of that weight's rows and
 *                     columns (hidden x 2 ffn, ffn x hidden), [E/p][nb][kb]
 *                     with MKX_TRANS.
 * Each element is multiplied by its scale and rounded to fp32; x W1, the
 * SwiGLU activation, each FFN output and the weighted sum stay in fp32,
 * and out is rounded once to otype.  The two layouts are agreed (each may
 * be MKX_SCALE_NONE: scales 1); NULL means MKX_SCALE_NONE.  Paths: host
 * buffers the host path; with option moe_fp8=yes, device buffers with
 * fp8 on one node (several ranks: scales other than MKX_SCALE_TENSOR),
 * MKX_TRANS, a bf16 or fp16 otype and hidden and ffn multiples of 16 the
 * GPU's fp8 layer, where the SwiGLU activation is rounded to otype and
 * then to dtype with one scale per row and 128 columns (the group's
 * largest magnitude over the type's largest finite value) as W2's fp8
 * operand, so out carries that rounding too (e4m3: a relative 2^-4 of
 * each activation); its scales are checked as the dispatch's are
 * (moe_sync=no: with the routing's verdict, and the call can be
 * captured).  Other device buffers with fp8, or a 16-bit dtype with
 * another otype or MKX_TRANS, are staged; the others take the plain
 * call's path.
 */
int MKX_Moe_layer_scaled(const void *X, int64_t num_tokens, int64_t hidden,
                         const int32_t *topk_ids, const float *topk_weight,
                         int64_t topk, int64_t num_experts, const void *W1,
                         const void *W2, int64_t ffn, MKX_Trans transw,
                         void *out, MKX_Datatype dtype, MKX_Datatype otype,
                         const MKX_Scales *scales, const MKX_Scales *scales2,
                         MKX_Comm comm, MKX_Stream stream);

/* ---- persistent plans (MPI-4 style) --------------------------------------- */

/*
 * `_init` takes the arguments of the call (same agreed and per-rank rules;
 * buffers are bound: their contents may change between starts, their
 * addresses may not), validates them and checks agreement across ranks
 * once, chooses the path and sets it up (workspace, registration).  It is
 * collective, and its errors are those of the call, agreed the same way.
 * `info` may be MPI_INFO_NULL; its mkx_* keys are checked (an unknown key
 * or a bad value: MKX_ERR_INVALID_ARG there, MKX_ERR_PEER elsewhere) but
 * do not change the plan, which takes the communicator's options.
 * MKX_Start enqueues one run on `stream`.  On a fused single-node GPU path
 * it does no collective host work (so it may be captured in a CUDA graph,
 * see the top), and it reports earlier GPU failures as the fused calls do;
 * on the other paths it runs as the plain call would (host work, stream
 * synchronised), without repeating the checks.  Every rank starts its
 * request, in the same order as its other calls on the communicator.  On
 * the host and staged paths MKX_Start first checks, in one small exchange,
 * that every rank starts the same plan at the same point: ranks that start
 * different plans, or start while others make another call, all get
 * MKX_ERR_SHAPE_MISMATCH naming both, and the communicator stays usable.
 * On a fused GPU path the ranks of a node compare what they start at the
 * run's first meeting, on the GPU: ranks that start different plans (or a
 * plan against another call's GPU work) all get MKX_ERR_SHAPE_MISMATCH
 * naming both, reported as a failed GPU run is (below), at once rather
 * than at the bound, and the communicator is unusable after it.  Between
 * nodes of a GPU-driven several-node path such a mismatch ends at the
 * bounded waits (MKX_ERR_TIMEOUT).
 * Errors of MKX_Start: MKX_ERR_INVALID_REQUEST, MKX_ERR_INVALID_COMM,
 * MKX_ERR_SHAPE_MISMATCH, and the run's own (MKX_ERR_TIMEOUT, MKX_ERR_PEER,
 * MKX_ERR_MPI, MKX_ERR_NET, MKX_ERR_CUDA, MKX_ERR_NOMEM; MKX_ERR_INVALID_ARG
 * for a _scaled plan's scale value, see MKX_Scales).
 * MKX_Request_free releases the plan and sets *request to NULL.  It is
 * collective in order: every rank frees its request at the same point
 * among its calls on the communicator (GPU workspaces are reused across
 * calls alike on every rank), though it waits for no other rank; every
 * request before MKX_Comm_free.  It waits for nothing: work already
 * enqueued is ordered by its stream, and the buffers must stay valid until
 * it completes.  Errors: MKX_ERR_NULL_POINTER (request),
 * MKX_ERR_INVALID_REQUEST (*request NULL or freed).
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
int MKX_Ring_attention_init(const void *Q, const void *K, const void *V,
                            void *O, float *LSE, int64_t batch,
                            int64_t seq_local, int64_t heads_q,
                            int64_t heads_kv, int64_t head_dim, int causal,
                            double scale, MKX_Datatype dtype, MKX_Comm comm,
                            MPI_Info info, MKX_Request *request);
/* With option moe_sync=yes the MoE plans wait for their routing in each
 * start, as the calls do (see the MoE section), so they cannot be captured
 * in a CUDA graph: a start on a capturing stream returns
 * MKX_ERR_UNSUPPORTED.  With moe_sync=no a start on the GPU path may be
 * captured. */
int MKX_Moe_dispatch_gemm_init(
    const void *X, int64_t num_tokens, int64_t hidden, const int32_t *topk_ids,
    const float *topk_weight, int64_t topk, int64_t num_experts, const void *W,
    int64_t n, void *Y, int64_t y_rows, int64_t *expert_rows, int32_t *origin,
    MKX_Datatype dtype, MKX_Comm comm, MPI_Info info, MKX_Request *request);
int MKX_Moe_layer_init(const void *X, int64_t num_tokens, int64_t hidden,
                       const int32_t *topk_ids, const float *topk_weight,
                       int64_t topk, int64_t num_experts, const void *W1,
                       const void *W2, int64_t ffn, void *out,
                       MKX_Datatype dtype, MKX_Comm comm, MPI_Info info,
                       MKX_Request *request);
/* The _scaled calls' plans: *scales is copied at _init (the scale arrays
 * are bound like the buffers; their values are read at each start). */
int MKX_Allgather_gemm_scaled_init(const void *A, int64_t m_local, int64_t k,
                                   int64_t lda, const void *B, int64_t n,
                                   int64_t ldb, MKX_Trans transb, void *C,
                                   int64_t ldc, void *A_out, int64_t ld_aout,
                                   MKX_Datatype dtype, MKX_Datatype ctype,
                                   MKX_Order order, const MKX_Scales *scales,
                                   MKX_Comm comm, MPI_Info info,
                                   MKX_Request *request);
int MKX_Gemm_reduce_scatter_scaled_init(const void *A, int64_t M,
                                        int64_t k_local, int64_t lda,
                                        const void *B, int64_t n, int64_t ldb,
                                        MKX_Trans transb, void *C, int64_t ldc,
                                        MKX_Datatype dtype, MKX_Datatype ctype,
                                        MKX_Order order,
                                        const MKX_Scales *scales, MKX_Comm comm,
                                        MPI_Info info, MKX_Request *request);
int MKX_Gemm_allreduce_scaled_init(const void *A, int64_t M, int64_t k_local,
                                   int64_t lda, const void *B, int64_t n,
                                   int64_t ldb, MKX_Trans transb, void *C,
                                   int64_t ldc, MKX_Datatype dtype,
                                   MKX_Datatype ctype, MKX_Order order,
                                   const MKX_Scales *scales, MKX_Comm comm,
                                   MPI_Info info, MKX_Request *request);
int MKX_Moe_dispatch_gemm_scaled_init(
    const void *X, int64_t num_tokens, int64_t hidden, const int32_t *topk_ids,
    const float *topk_weight, int64_t topk, int64_t num_experts, const void *W,
    int64_t n, MKX_Trans transw, void *Y, int64_t y_rows, int64_t *expert_rows,
    int32_t *origin, MKX_Datatype dtype, MKX_Datatype ytype,
    const MKX_Scales *scales, MKX_Comm comm, MPI_Info info,
    MKX_Request *request);
int MKX_Moe_layer_scaled_init(const void *X, int64_t num_tokens, int64_t hidden,
                              const int32_t *topk_ids, const float *topk_weight,
                              int64_t topk, int64_t num_experts, const void *W1,
                              const void *W2, int64_t ffn, MKX_Trans transw,
                              void *out, MKX_Datatype dtype, MKX_Datatype otype,
                              const MKX_Scales *scales,
                              const MKX_Scales *scales2, MKX_Comm comm,
                              MPI_Info info, MKX_Request *request);
/* Collective over the request's communicator (every rank starts it). */
int MKX_Start(MKX_Request request, MKX_Stream stream);
/* Collective in order (see above); waits for nothing; sets *request to
 * NULL. */
int MKX_Request_free(MKX_Request *request);

/* ---- which path a call took ------------------------------------------ */

/* Local, no communication.  MKX_Request_get_path: the path MKX_Start of
 * `request` runs (the one its last start took; before any, the one its
 * plan chose).  MKX_Comm_get_last_path: the path the last call or start
 * on comm ran ("none" before any; works on a communicator made unusable
 * by a failure too).  *name: the path's name as logged at info ("host",
 * "staged", "fused overlapped", "fused, operands read in place", ...;
 * a constant string of the library, not to be freed); *capturable: 1 if
 * a call or MKX_Start on that path may be captured in a CUDA graph (see
 * "CUDA graphs" above), else 0; *ctas: the
 * CTAs its kernels take on this rank's GPU (its partition's SMs for a GEMM
 * that waits for no one, the cap of kernels that wait for peers
 * otherwise), 0 on the host and staged paths.  Errors:
 * MKX_ERR_INVALID_REQUEST / MKX_ERR_INVALID_COMM (NULL or freed),
 * MKX_ERR_NULL_POINTER (an output pointer). */
int MKX_Request_get_path(MKX_Request request, const char **name,
                         int *capturable, int *ctas);
int MKX_Comm_get_last_path(MKX_Comm comm, const char **name, int *capturable,
                           int *ctas);

/* ---- options ------------------------------------------------------------ */

/* Print version, build features, every option (environment variable,
 * MPI_Info key, type, default, current value, help) and, if comm is not
 * NULL, this rank's placement, to `stream` (a FILE *). */
int MKX_Info_print(MKX_Comm comm, void *file);

#ifdef __cplusplus
}
#endif
#endif /* MKX_H */
