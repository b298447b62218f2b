/* Bad input as a table: one row per way of breaking a call (which calls,
 * what to change, on which ranks, the code there and elsewhere, the words
 * the message must hold).  Every case poisons the outputs and checks, on
 * every rank, the code (a success where any rank was wrong fails as a
 * "silent success"), the message, that a failed call wrote no output and
 * left the inputs alone; then a call whose answer is known exactly must
 * succeed, proving the communicator still pairs calls.  A case that
 * disagrees with mkx.h stays a failing case; one listed in known[] is
 * reported under "known:" instead of failing the run.
 *
 * A row's changes are "name=value" items separated by commas: an argument
 * (named as in mkx.h) and a value (a number, 2^E, P for the rank count,
 * combined left to right with + - *; an enumerator; NULL; nan or inf; a
 * handle state such as freed), an mkx_* info key, or call=X to make
 * another call there. */
#if MKX_SANITIZERS
#include <sanitizer/lsan_interface.h>
#endif
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mkx_test.h"

enum {
  AG = 1 << 0,
  AG_I = 1 << 1,
  RS = 1 << 2,
  RS_I = 1 << 3,
  AR = 1 << 4,
  AR_I = 1 << 5,
  ATTN = 1 << 6,
  MOE_D = 1 << 7,
  MOE_L = 1 << 8,
  ALLOC = 1 << 9,
  FREE = 1 << 10,
  CREATE = 1 << 11,
  START = 1 << 12,
  RFREE = 1 << 13,
  CFREE = 1 << 14,
  Q_RANK = 1 << 15,
  Q_SIZE = 1 << 16,
  Q_NODE = 1 << 17,
  Q_NNODES = 1 << 18,
  Q_LRANK = 1 << 19,
  Q_LSIZE = 1 << 20,
  Q_DEV = 1 << 21,
  Q_ASYNC = 1 << 22,
  NCALLS = 23
};
#define AGS (AG | AG_I)
#define RED (RS | RS_I | AR | AR_I)
#define TP (AGS | RED)
#define INITS (AG_I | RS_I | AR_I)
#define MOES (MOE_D | MOE_L)
#define OPS (TP | ATTN | MOES)
#define QUERIES                                                                \
  (Q_RANK | Q_SIZE | Q_NODE | Q_NNODES | Q_LRANK | Q_LSIZE | Q_DEV | Q_ASYNC)

static const struct {
  const char *tag, *name;
} calls[NCALLS] = {{"AG", "MKX_Allgather_gemm"},
                   {"AG_I", "MKX_Allgather_gemm_init"},
                   {"RS", "MKX_Gemm_reduce_scatter"},
                   {"RS_I", "MKX_Gemm_reduce_scatter_init"},
                   {"AR", "MKX_Gemm_allreduce"},
                   {"AR_I", "MKX_Gemm_allreduce_init"},
                   {"ATTN", "MKX_Ring_attention"},
                   {"MOE_D", "MKX_Moe_dispatch_gemm"},
                   {"MOE_L", "MKX_Moe_layer"},
                   {"ALLOC", "MKX_Alloc_mem"},
                   {"FREE", "MKX_Free_mem"},
                   {"CREATE", "MKX_Comm_create"},
                   {"START", "MKX_Start"},
                   {"RFREE", "MKX_Request_free"},
                   {"CFREE", "MKX_Comm_free"},
                   {"Q_RANK", "MKX_Comm_rank"},
                   {"Q_SIZE", "MKX_Comm_size"},
                   {"Q_NODE", "MKX_Comm_node"},
                   {"Q_NNODES", "MKX_Comm_num_nodes"},
                   {"Q_LRANK", "MKX_Comm_local_rank"},
                   {"Q_LSIZE", "MKX_Comm_local_size"},
                   {"Q_DEV", "MKX_Comm_device"},
                   {"Q_ASYNC", "MKX_Comm_get_async_error"}};

enum where { EVERY, LAST, FIRST };
enum { NP2 = 1, HOST_ONLY = 2 }; /* flags: fewest ranks, a host-path comm */

#define INVAL MKX_ERR_INVALID_ARG
#define NULLP MKX_ERR_NULL_POINTER
#define SIZE MKX_ERR_BAD_SIZE
#define LD MKX_ERR_BAD_LD
#define UNSUP MKX_ERR_UNSUPPORTED
#define SHAPE MKX_ERR_SHAPE_MISMATCH
#define PEER MKX_ERR_PEER
#define TIMEOUT MKX_ERR_TIMEOUT
#define BADCOMM MKX_ERR_INVALID_COMM
#define BADREQ MKX_ERR_INVALID_REQUEST
#define OK MKX_SUCCESS

/* words: all must appear in the message as whole words, '&' between
 * them; "rank#" stands for "rank N" with N the broken rank.  The words
 * are looked for on the broken ranks, and elsewhere when the code there
 * is the same; MKX_ERR_PEER elsewhere must name the broken rank. */
typedef struct row {
  unsigned calls;  /* one case for each call of the mask */
  const char *all; /* changes on every rank */
  const char *bad; /* then on the broken rank(s) */
  enum where where;
  int code, other; /* expected on the broken rank(s), elsewhere */
  const char *words;
  int flags;
} row;

static const row table[] = {
    /* enumerators */
    {TP, "", "dtype=0", EVERY, INVAL, PEER, "dtype"},
    {TP, "", "dtype=7", LAST, INVAL, PEER, "dtype"},
    {TP, "", "dtype=-1", FIRST, INVAL, PEER, "dtype"},
    {TP, "", "ctype=0", EVERY, INVAL, PEER, "ctype"},
    {TP, "", "ctype=99", LAST, INVAL, PEER, "ctype"},
    {TP, "", "order=0", EVERY, INVAL, PEER, "order"},
    {TP, "", "order=103", LAST, INVAL, PEER, "order"},
    {TP, "", "transb=0", EVERY, INVAL, PEER, "transb"},
    {TP, "", "transb=113", FIRST, INVAL, PEER, "transb"},
    {TP, "", "dtype=FP64", LAST, UNSUP, PEER, "fp64"},
    {RED, "", "ctype=FP64", EVERY, UNSUP, PEER, "fp64"},
    {TP, "", "ctype=E4M3", LAST, UNSUP, PEER, "fp8"},
    /* agreed values that differ */
    {TP, "", "dtype=FP16", LAST, SHAPE, SHAPE, "dtype", NP2},
    {TP, "", "ctype=BF16", FIRST, SHAPE, SHAPE, "ctype", NP2},
    {TP, "", "order=COL", LAST, SHAPE, SHAPE, "order", NP2},
    {AGS, "", "k=4", LAST, SHAPE, SHAPE, "k", NP2},
    {RED, "", "M=4", LAST, SHAPE, SHAPE, "M", NP2},
    {RED, "", "n=4", FIRST, SHAPE, SHAPE, "n", NP2},
    /* NULL pointers */
    {AGS, "", "A=NULL", LAST, NULLP, PEER, "A"},
    {RED, "", "A=NULL", FIRST, NULLP, PEER, "A"},
    {TP, "", "B=NULL", LAST, NULLP, PEER, "B"},
    {TP, "", "C=NULL", EVERY, NULLP, PEER, "C"},
    {AR | AR_I, "", "C=NULL", LAST, NULLP, PEER, "C"},
    /* negative, zero, too large */
    {AGS, "", "m_local=-1", LAST, SIZE, PEER, "m_local"},
    {AGS, "", "m_local=0", EVERY, SIZE, PEER, "m_local"},
    {AGS, "", "m_local=2^40+1", FIRST, SIZE, PEER, "m_local"},
    {AGS, "", "k=0", EVERY, SIZE, PEER, "k"},
    {AGS, "", "k=-1", LAST, SIZE, PEER, "k"},
    {AGS, "", "k=2^40+1", EVERY, SIZE, PEER, "k"},
    {TP, "", "n=0", LAST, SIZE, PEER, "n"},
    {TP, "", "n=-3", FIRST, SIZE, PEER, "n"},
    {TP, "", "n=2^40+1", EVERY, SIZE, PEER, "n"},
    {RED, "", "M=0", EVERY, SIZE, PEER, "M"},
    {RED, "", "M=-1", LAST, SIZE, PEER, "M"},
    {RED, "", "M=2^40+1", FIRST, SIZE, PEER, "M"},
    {RED, "", "k_local=-1", LAST, SIZE, PEER, "k_local"},
    {RED, "", "k_local=2^40+1", EVERY, SIZE, PEER, "k_local"},
    /* leading dimensions */
    {AGS, "", "lda=7", LAST, LD, PEER, "lda"},
    {RED, "", "lda=1", LAST, LD, PEER, "lda"},
    {TP, "", "lda=0", FIRST, LD, PEER, "lda"},
    {TP, "", "lda=-1", EVERY, LD, PEER, "lda"},
    {TP, "", "lda=2^40+1", LAST, LD, PEER, "lda"},
    {TP, "", "ldb=7", LAST, LD, PEER, "ldb"},
    {TP, "", "ldb=2^40+1", EVERY, LD, PEER, "ldb"},
    {RED, "", "transb=T,ldb=1", FIRST, LD, PEER, "ldb"},
    {AGS, "", "transb=T,ldb=7", FIRST, LD, PEER, "ldb"},
    {TP, "", "ldc=7", LAST, LD, PEER, "ldc"},
    {TP, "", "ldc=2^40+1", EVERY, LD, PEER, "ldc"},
    {AGS, "", "ld_aout=7", LAST, LD, PEER, "ld_aout"},
    {AGS, "", "ld_aout=2^40+1", FIRST, LD, PEER, "ld_aout"},
    {AGS, "order=COL", "lda=1", LAST, LD, PEER, "lda"},
    {AGS, "order=COL", "ldb=7", FIRST, LD, PEER, "ldb"},
    /* column-major C and A_out have M rows, known after the exchange */
    {AGS, "order=COL", "ldc=2*P-1", FIRST, LD, PEER, "ldc"},
    {AGS, "order=COL", "ld_aout=2*P-1", LAST, LD, PEER, "ld_aout"},
    {AGS, "order=COL", "ldc=2^40+1", EVERY, LD, PEER, "ldc"},
    {AGS, "order=COL", "ld_aout=2^40+1", LAST, LD, PEER, "ld_aout"},
    {RED, "order=COL", "lda=7", LAST, LD, PEER, "lda"},
    {RED, "order=COL", "ldb=1", FIRST, LD, PEER, "ldb"},
    {RED, "order=COL", "ldc=1", LAST, LD, PEER, "ldc"},
    {RED, "order=COL", "transb=T,ldb=7", EVERY, LD, PEER, "ldb"},
    {RED, "order=COL", "ldc=2^40+1", FIRST, LD, PEER, "ldc"},
    /* matrices over 2^40 elements, each size within bounds */
    {AGS, "", "m_local=2^33,lda=2^8", LAST, SIZE, PEER, "A"},
    {AGS, "", "m_local=2^21,k=2^20,lda=2^20", EVERY, SIZE, PEER, "A"},
    {AGS, "", "ldb=2^38", FIRST, SIZE, PEER, "B"},
    {AGS, "", "ldc=2^40", LAST, SIZE, PEER, "C"},
    {AGS, "", "ld_aout=2^40", FIRST, SIZE, PEER, "A_out"},
    {AGS, "order=COL", "lda=2^38", LAST, SIZE, PEER, "A"},
    {AGS, "order=COL", "ldc=2^38", EVERY, SIZE, PEER, "C"},
    {RED, "", "lda=2^38", LAST, SIZE, PEER, "A"},
    {RED, "", "M=2^38", EVERY, SIZE, PEER, "A"},
    {RED, "", "ldb=2^40", FIRST, SIZE, PEER, "B"},
    {RED, "", "ldc=2^40", LAST, SIZE, PEER, "C"},
    {RED, "order=COL", "ldc=2^38", EVERY, SIZE, PEER, "C"},
    {RED, "order=COL", "lda=2^40", LAST, SIZE, PEER, "A"},
    /* persistent plans: the request and the info */
    {INITS, "", "request=NULL", LAST, NULLP, PEER, "request"},
    {INITS, "", "request=NULL", EVERY, NULLP, PEER, "request"},
    {INITS, "", "mkx_no_such_option=1", FIRST, INVAL, PEER,
     "mkx_no_such_option"},
    {INITS, "", "mkx_timeout_ms=0", LAST, INVAL, PEER, "mkx_timeout_ms"},
    {INITS, "", "mkx_fused=on", EVERY, INVAL, PEER, "mkx_fused"},
    {INITS, "", "mkx_virtual_node_size=-1", LAST, INVAL, PEER,
     "mkx_virtual_node_size"},
    {INITS, "", "mkx_blocking=perhaps", FIRST, INVAL, PEER, "mkx_blocking"},
    /* ring attention */
    {ATTN, "", "dtype=0", EVERY, INVAL, PEER, "dtype"},
    {ATTN, "", "dtype=7", LAST, INVAL, PEER, "dtype"},
    {ATTN, "", "dtype=E4M3", FIRST, UNSUP, PEER, "fp8"},
    {ATTN, "", "batch=0", EVERY, SIZE, PEER, "batch"},
    {ATTN, "", "batch=-1", LAST, SIZE, PEER, "batch"},
    {ATTN, "", "batch=2^40+1", FIRST, SIZE, PEER, "batch"},
    {ATTN, "", "seq_local=0", LAST, SIZE, PEER, "seq_local"},
    {ATTN, "", "seq_local=-2", EVERY, SIZE, PEER, "seq_local"},
    {ATTN, "", "seq_local=2^40+1", LAST, SIZE, PEER, "seq_local"},
    {ATTN, "", "heads_q=0", EVERY, SIZE, PEER, "heads_q"},
    {ATTN, "", "heads_q=-1", LAST, SIZE, PEER, "heads_q"},
    {ATTN, "", "heads_q=2^40+1", FIRST, SIZE, PEER, "heads_q"},
    {ATTN, "", "heads_kv=0", LAST, SIZE, PEER, "heads_kv"},
    {ATTN, "", "heads_kv=2^40+1", EVERY, SIZE, PEER, "heads_kv"},
    {ATTN, "", "head_dim=0", FIRST, SIZE, PEER, "head_dim"},
    {ATTN, "", "head_dim=-1", LAST, SIZE, PEER, "head_dim"},
    {ATTN, "", "head_dim=2^40+1", EVERY, SIZE, PEER, "head_dim"},
    {ATTN, "", "heads_q=3", LAST, SIZE, PEER, "heads_kv"},
    {ATTN, "", "heads_kv=4", EVERY, SIZE, PEER, "heads_kv"},
    {ATTN, "", "batch=2^20,seq_local=2^20", EVERY, SIZE, PEER, "Q"},
    {ATTN, "", "batch=2^38", LAST, SIZE, PEER, "Q"},
    {ATTN, "", "scale=nan", LAST, INVAL, PEER, "scale"},
    {ATTN, "", "scale=inf", EVERY, INVAL, PEER, "scale"},
    {ATTN, "", "scale=-inf", FIRST, INVAL, PEER, "scale"},
    {ATTN, "", "Q=NULL", LAST, NULLP, PEER, "Q"},
    {ATTN, "", "K=NULL", FIRST, NULLP, PEER, "K"},
    {ATTN, "", "V=NULL", EVERY, NULLP, PEER, "V"},
    {ATTN, "", "O=NULL", LAST, NULLP, PEER, "O"},
    {ATTN, "", "batch=2", LAST, SHAPE, SHAPE, "batch", NP2},
    {ATTN, "", "seq_local=1", FIRST, SHAPE, SHAPE, "seq_local", NP2},
    {ATTN, "", "heads_q=4", LAST, SHAPE, SHAPE, "heads_q", NP2},
    {ATTN, "", "heads_kv=1", LAST, SHAPE, SHAPE, "heads_kv", NP2},
    {ATTN, "", "head_dim=8", FIRST, SHAPE, SHAPE, "head_dim", NP2},
    {ATTN, "", "causal=1", LAST, SHAPE, SHAPE, "causal", NP2},
    {ATTN, "", "scale=0.25", LAST, SHAPE, SHAPE, "scale", NP2},
    {ATTN, "", "dtype=FP64", FIRST, SHAPE, SHAPE, "dtype", NP2},
    /* MoE, both calls */
    {MOES, "", "dtype=0", EVERY, INVAL, PEER, "dtype"},
    {MOES, "", "dtype=9", LAST, INVAL, PEER, "dtype"},
    {MOES, "", "dtype=E5M2", LAST, UNSUP, PEER, "fp8"},
    {MOES, "", "num_tokens=-1", LAST, SIZE, PEER, "num_tokens"},
    {MOES, "", "num_tokens=2^40+1", FIRST, SIZE, PEER, "num_tokens"},
    {MOES, "", "hidden=0", EVERY, SIZE, PEER, "hidden"},
    {MOES, "", "hidden=-1", LAST, SIZE, PEER, "hidden"},
    {MOES, "", "hidden=2^40+1", EVERY, SIZE, PEER, "hidden"},
    {MOES, "", "num_experts=0", EVERY, SIZE, PEER, "num_experts"},
    {MOES, "", "num_experts=-2", LAST, SIZE, PEER, "num_experts"},
    {MOES, "", "num_experts=2^40+1", FIRST, SIZE, PEER, "num_experts"},
    {MOES, "", "topk=0", LAST, SIZE, PEER, "topk"},
    {MOES, "", "topk=-1", EVERY, SIZE, PEER, "topk"},
    {MOES, "", "topk=2^40+1", FIRST, SIZE, PEER, "topk"},
    {MOES, "", "topk=2*P+1", LAST, SIZE, PEER, "topk"},
    {MOES, "", "num_experts=2*P+1", EVERY, SIZE, PEER, "num_experts", NP2},
    {MOES, "", "X=NULL", LAST, NULLP, PEER, "X"},
    {MOES, "", "topk_ids=NULL", FIRST, NULLP, PEER, "topk_ids"},
    {MOES, "", "num_tokens=2^20,hidden=2^21", EVERY, SIZE, PEER, "X"},
    {MOES, "", "num_tokens=2^39,hidden=1,topk=4,num_experts=12", EVERY, SIZE,
     PEER, "topk_ids"},
    {MOES, "", "topk_ids=ids_out", LAST, INVAL, INVAL, "topk_ids&rank#"},
    {MOES, "", "topk_ids=ids_neg", FIRST, INVAL, INVAL, "topk_ids&rank#"},
    {MOES, "", "topk_ids=ids_dup", EVERY, INVAL, INVAL, "topk_ids"},
    {MOES, "", "num_experts=2^31*P", EVERY, UNSUP, PEER, "num_experts"},
    /* tokens past an int: refused before num_tokens * topk ids are read */
    {MOES, "", "num_tokens=2^31", LAST, UNSUP, PEER, "num_tokens"},
    {MOES, "", "num_tokens=2^31+1", EVERY, UNSUP, PEER, "num_tokens"},
    {MOES, "", "topk=2^31,num_experts=2^30+1*P", EVERY, UNSUP, PEER, "topk",
     NP2},
    {MOES, "", "hidden=8", FIRST, SHAPE, SHAPE, "hidden", NP2},
    {MOES, "", "topk=1", LAST, SHAPE, SHAPE, "topk", NP2},
    {MOES, "", "num_experts=4*P", LAST, SHAPE, SHAPE, "num_experts", NP2},
    /* MoE dispatch */
    {MOE_D, "", "n=0", EVERY, SIZE, PEER, "n"},
    {MOE_D, "", "n=-1", LAST, SIZE, PEER, "n"},
    {MOE_D, "", "n=2^40+1", FIRST, SIZE, PEER, "n"},
    {MOE_D, "", "y_rows=-1", LAST, SIZE, PEER, "y_rows"},
    {MOE_D, "", "y_rows=2^40+1", EVERY, SIZE, PEER, "y_rows"},
    {MOE_D, "", "W=NULL", LAST, NULLP, PEER, "W"},
    {MOE_D, "", "expert_rows=NULL", FIRST, NULLP, PEER, "expert_rows"},
    {MOE_D, "", "Y=NULL", EVERY, NULLP, PEER, "Y"},
    {MOE_D, "", "n=2^38", EVERY, SIZE, PEER, "W"},
    {MOE_D, "", "y_rows=2^39", LAST, SIZE, PEER, "Y"},
    {MOE_D, "", "n=1,y_rows=2^39", EVERY, SIZE, PEER, "origin"},
    {MOE_D, "", "n=2", LAST, SHAPE, SHAPE, "n", NP2},
    {MOE_D, "", "y_rows=0", LAST, MKX_ERR_TRUNCATE, MKX_ERR_TRUNCATE, "rank#"},
    /* MoE layer */
    {MOE_L, "", "ffn=0", EVERY, SIZE, PEER, "ffn"},
    {MOE_L, "", "ffn=-1", LAST, SIZE, PEER, "ffn"},
    {MOE_L, "", "ffn=2^40+1", FIRST, SIZE, PEER, "ffn"},
    {MOE_L, "", "W1=NULL", LAST, NULLP, PEER, "W1"},
    {MOE_L, "", "W2=NULL", FIRST, NULLP, PEER, "W2"},
    {MOE_L, "", "topk_weight=NULL", EVERY, NULLP, PEER, "topk_weight"},
    {MOE_L, "", "out=NULL", LAST, NULLP, PEER, "out"},
    {MOE_L, "", "ffn=2^37", EVERY, SIZE, PEER, "W1"},
    {MOE_L, "", "ffn=4", LAST, SHAPE, SHAPE, "ffn", NP2},
    /* ranks in different calls */
    {AR, "", "call=RS", LAST, SHAPE, SHAPE, "MKX_Gemm_reduce_scatter", NP2},
    {AR, "", "call=AG", FIRST, SHAPE, SHAPE, "MKX_Allgather_gemm", NP2},
    {RS, "", "call=AG", LAST, SHAPE, SHAPE, "MKX_Allgather_gemm", NP2},
    {AR, "", "call=ATTN", LAST, SHAPE, SHAPE, "MKX_Ring_attention", NP2},
    {AR, "", "call=MOE_D", FIRST, SHAPE, SHAPE, "MKX_Moe_dispatch_gemm", NP2},
    {AR, "", "call=MOE_L", LAST, SHAPE, SHAPE, "MKX_Moe_layer", NP2},
    {ATTN, "", "call=MOE_L", FIRST, SHAPE, SHAPE, "MKX_Moe_layer", NP2},
    {MOE_D, "", "call=MOE_L", LAST, SHAPE, SHAPE, "MKX_Moe_layer", NP2},
    {AG, "", "call=ATTN", LAST, SHAPE, SHAPE, "MKX_Ring_attention", NP2},
    {AR, "", "call=AR_I", LAST, SHAPE, SHAPE, "MKX_Gemm_allreduce_init", NP2},
    {AR_I, "", "call=AR", FIRST, SHAPE, SHAPE, "MKX_Gemm_allreduce_init", NP2},
    {AG, "", "call=AG_I", LAST, SHAPE, SHAPE, "MKX_Allgather_gemm_init", NP2},
    {RS, "", "call=RS_I", FIRST, SHAPE, SHAPE, "MKX_Gemm_reduce_scatter_init",
     NP2},
    {AR_I, "", "call=RS_I", LAST, SHAPE, SHAPE, "MKX_Gemm_reduce_scatter_init",
     NP2},
    {AG_I, "", "call=AR", LAST, SHAPE, SHAPE, "MKX_Gemm_allreduce", NP2},
    {MOE_L, "", "call=AG_I", FIRST, SHAPE, SHAPE, "MKX_Allgather_gemm_init",
     NP2},
    /* communicators that are not (any more) */
    {OPS, "", "comm=NULL", EVERY, BADCOMM, PEER, "communicator"},
    {OPS, "", "comm=freed", EVERY, BADCOMM, PEER, "communicator"},
    {AR | AG_I | ATTN | MOE_D, "", "comm=NULL", LAST, BADCOMM, TIMEOUT,
     "communicator", NP2},
    /* memory */
    {ALLOC, "", "size=128", LAST, SHAPE, SHAPE, "size", NP2},
    {ALLOC, "", "size=2^50", FIRST, SHAPE, SHAPE, "size", NP2},
    {ALLOC, "", "ptr=NULL", LAST, NULLP, PEER, "ptr"},
    {ALLOC, "", "ptr=NULL", EVERY, NULLP, PEER, "ptr"},
    {ALLOC, "", "comm=NULL", EVERY, BADCOMM, PEER, "communicator"},
    {ALLOC, "", "comm=freed", EVERY, BADCOMM, PEER, "communicator"},
    {ALLOC, "", "comm=NULL", LAST, BADCOMM, TIMEOUT, "communicator", NP2},
    {ALLOC, "", "size=2^50", EVERY, MKX_ERR_NOMEM, PEER, "MKX_Alloc_mem",
     HOST_ONLY},
    {ALLOC, "", "size=SIZE_MAX", EVERY, MKX_ERR_NOMEM, PEER, "MKX_Alloc_mem",
     HOST_ONLY},
    {FREE, "", "ptr=foreign", EVERY, INVAL, OK, "MKX_Alloc_mem", HOST_ONLY},
    {FREE, "", "ptr=freed", LAST, INVAL, OK, "MKX_Alloc_mem", HOST_ONLY},
    {FREE, "", "ptr=interior", FIRST, INVAL, OK, "MKX_Alloc_mem", HOST_ONLY},
    {FREE, "", "comm=NULL", EVERY, BADCOMM, OK, "comm", HOST_ONLY},
    {FREE, "", "comm=freed", LAST, BADCOMM, OK, "comm", HOST_ONLY},
    /* MKX_Comm_create: bad info values on every rank */
    {CREATE, "", "mkx_timeout_ms=0", EVERY, INVAL, PEER, "mkx_timeout_ms"},
    {CREATE, "", "mkx_timeout_ms=-1", EVERY, INVAL, PEER, "mkx_timeout_ms"},
    {CREATE, "", "mkx_timeout_ms=86400001", EVERY, INVAL, PEER,
     "mkx_timeout_ms"},
    {CREATE, "", "mkx_timeout_ms=abc", EVERY, INVAL, PEER, "mkx_timeout_ms"},
    {CREATE, "", "mkx_timeout_ms=10x", EVERY, INVAL, PEER, "mkx_timeout_ms"},
    {CREATE, "", "mkx_log_level=loud", EVERY, INVAL, PEER, "mkx_log_level"},
    {CREATE, "", "mkx_path=somewhere", EVERY, INVAL, PEER, "mkx_path"},
    {CREATE, "", "mkx_device=-2", EVERY, INVAL, PEER, "mkx_device"},
    {CREATE, "", "mkx_device=4097", EVERY, INVAL, PEER, "mkx_device"},
    {CREATE, "", "mkx_fused=on", EVERY, INVAL, PEER, "mkx_fused"},
    {CREATE, "", "mkx_blocking=perhaps", EVERY, INVAL, PEER, "mkx_blocking"},
    {CREATE, "", "mkx_tp_partials=fp64", EVERY, INVAL, PEER, "mkx_tp_partials"},
    {CREATE, "", "mkx_fused_pad=2", EVERY, INVAL, PEER, "mkx_fused_pad"},
    {CREATE, "", "mkx_tp_overlap=always", EVERY, INVAL, PEER, "mkx_tp_overlap"},
    {CREATE, "", "mkx_tp_split_gemm=magma", EVERY, INVAL, PEER,
     "mkx_tp_split_gemm"},
    {CREATE, "", "mkx_tp_ag_oneshot=never", EVERY, INVAL, PEER,
     "mkx_tp_ag_oneshot"},
    {CREATE, "", "mkx_tp_stream_k=sometimes", EVERY, INVAL, PEER,
     "mkx_tp_stream_k"},
    {CREATE, "", "mkx_shared_gpu=mps", EVERY, INVAL, PEER, "mkx_shared_gpu"},
    {CREATE, "", "mkx_gpu_ctas=-1", EVERY, INVAL, PEER, "mkx_gpu_ctas"},
    {CREATE, "", "mkx_gpu_ctas=4097", EVERY, INVAL, PEER, "mkx_gpu_ctas"},
    {CREATE, "", "mkx_hier_gemm=cpu", EVERY, INVAL, PEER, "mkx_hier_gemm"},
    {CREATE, "", "mkx_virtual_node_size=-1", EVERY, INVAL, PEER,
     "mkx_virtual_node_size"},
    {CREATE, "", "mkx_virtual_node_size=65537", EVERY, INVAL, PEER,
     "mkx_virtual_node_size"},
    {CREATE, "", "mkx_net=ib", EVERY, INVAL, PEER, "mkx_net"},
    {CREATE, "", "mkx_net_ib_gid_index=256", EVERY, INVAL, PEER,
     "mkx_net_ib_gid_index"},
    {CREATE, "", "mkx_net_tcp_port_range=banana", EVERY, INVAL, PEER,
     "mkx_net_tcp_port_range"},
    {CREATE, "", "mkx_no_such_option=1", EVERY, INVAL, PEER,
     "mkx_no_such_option"},
    {CREATE, "", "mkx_path=gpu", EVERY, UNSUP, PEER, "path", HOST_ONLY},
    /* ... and on one rank */
    {CREATE, "", "mkx_timeout_ms=0", LAST, INVAL, PEER, "mkx_timeout_ms"},
    {CREATE, "", "mkx_fused=on", FIRST, INVAL, PEER, "mkx_fused"},
    {CREATE, "", "mkx_no_such_option=1", LAST, INVAL, PEER,
     "mkx_no_such_option"},
    {CREATE, "", "newcomm=NULL", LAST, NULLP, PEER, "newcomm"},
    {CREATE, "", "newcomm=NULL", EVERY, NULLP, PEER, "newcomm"},
    {CREATE, "", "mpi=NULL", EVERY, INVAL, PEER, "MPI_COMM_NULL"},
    {CREATE, "", "mpi=NULL", LAST, INVAL, TIMEOUT, "MPI_COMM_NULL", NP2},
    /* options that must agree, different on one rank */
    {CREATE, "", "mkx_fused=off", LAST, INVAL, INVAL, "fused", NP2},
    {CREATE, "", "mkx_tp_partials=fp32", FIRST, INVAL, INVAL, "tp_partials",
     NP2},
    {CREATE, "", "mkx_fused_pad=no", LAST, INVAL, INVAL, "fused_pad", NP2},
    {CREATE, "", "mkx_tp_overlap=yes", LAST, INVAL, INVAL, "tp_overlap", NP2},
    {CREATE, "", "mkx_tp_split_gemm=cublas", FIRST, INVAL, INVAL,
     "tp_split_gemm", NP2},
    {CREATE, "", "mkx_tp_ag_oneshot=no", LAST, INVAL, INVAL, "tp_ag_oneshot",
     NP2},
    {CREATE, "", "mkx_tp_stream_k=no", LAST, INVAL, INVAL, "tp_stream_k", NP2},
    {CREATE, "", "mkx_shared_gpu=staged", FIRST, INVAL, INVAL, "shared_gpu",
     NP2},
    {CREATE, "", "mkx_hier_gemm=host", LAST, INVAL, INVAL, "hier_gemm", NP2},
    {CREATE, "", "mkx_virtual_node_size=1", LAST, INVAL, INVAL,
     "virtual_node_size", NP2},
    {CREATE, "", "mkx_net=tcp", FIRST, INVAL, INVAL, "net", NP2},
    /* requests */
    {START, "", "req=NULL", EVERY, BADREQ, PEER, "request"},
    {START, "", "req=freed", EVERY, BADREQ, PEER, "request"},
    {START, "", "req=freed", LAST, BADREQ, TIMEOUT, "request", NP2},
    /* a start against another call: both named, on every rank */
    {START, "", "call=AR", LAST, SHAPE, SHAPE, "MKX_Start&MKX_Gemm_allreduce",
     NP2},
    {START, "", "call=AG", FIRST, SHAPE, SHAPE, "MKX_Start&MKX_Allgather_gemm",
     NP2},
    {START, "", "call=MOE_L", LAST, SHAPE, SHAPE, "MKX_Start&MKX_Moe_layer",
     NP2},
    {RFREE, "", "request=NULL", EVERY, NULLP, OK, "request"},
    {RFREE, "", "request=NULL", FIRST, NULLP, OK, "request"},
    {RFREE, "", "req=NULL", EVERY, BADREQ, OK, "request"},
    {RFREE, "", "req=freed", EVERY, BADREQ, OK, "request"},
    {RFREE, "", "req=freed", LAST, BADREQ, OK, "request"},
    {CFREE, "", "comm=freed", EVERY, BADCOMM, OK, "communicator"},
    {CFREE, "", "comm=NULL", EVERY, BADCOMM, OK, "communicator"},
    {CFREE, "", "req=live", EVERY, INVAL, OK, "request"},
    /* local queries */
    {QUERIES, "", "comm=NULL", EVERY, BADCOMM, OK, "communicator"},
    {QUERIES, "", "comm=freed", LAST, BADCOMM, OK, "communicator"},
    {QUERIES, "", "out=NULL", EVERY, NULLP, OK, "NULL"},
    {QUERIES, "", "out=NULL", FIRST, NULLP, OK, "NULL"},
};

/* Cases where the library disagrees with mkx.h, by name (see
 * case_name): they run and are reported as "known:" instead of failing. */
static const char *const known[] = {
    NULL,
};

/* ---- buffers ------------------------------------------------------------ */

#define NB 4096 /* elements of every buffer: more than any valid case uses */
static float ones[NB]; /* every input */
static int32_t ids_good[4], ids_out[4], ids_neg[4], ids_dup[4];
static struct outputs { /* every output, poisoned */
  float C[NB], A_out[NB], O[NB], LSE[NB], Y[NB], out[NB];
  int64_t expert_rows[64];
  int32_t origin[NB];
} outs;
static float ka_A[8 * 2], ka_B[2 * 8], ka_C[8 * 8]; /* the known answer */

/* Pointer values that stand for a state, resolved per case. */
static char LIVE_M, FREED_M, FOREIGN_M, INTERIOR_M, POISON_M;
#define LIVE ((void *)&LIVE_M)
#define POISON ((void *)&POISON_M)

static int rank, size;
static MKX_Comm comm_main;

/* ---- the arguments of any call ------------------------------------------ */

typedef struct args {
  int call;
  const void *A, *B, *Q, *K, *V, *X, *W, *W2, *mpi;
  void *C, *A_out, *O, *Y, *out, *ptr, *req, *reqp, *comm, *newcomm;
  float *LSE;
  const int32_t *topk_ids;
  const float *topk_weight;
  int64_t *expert_rows;
  int32_t *origin;
  int64_t m, k, n, lda, ldb, ldc, ld_aout, transb, dtype, ctype, order;
  int64_t batch, seq, hq, hkv, hd, causal, tokens, hidden, topk, experts;
  int64_t ffn, y_rows, size;
  double scale;
  MPI_Info info;
  /* what a call writes besides its buffers */
  MKX_Request req_out;
  MKX_Comm comm_out;
  void *mem_out;
  int query_out;
} args;

enum kind { I64, PTR, DBL };
#define F(name, field, kind)                                                   \
  { name, offsetof(args, field), kind }
static const struct field {
  const char *name;
  size_t off;
  enum kind kind;
} fields[] = {
    F("A", A, PTR),
    F("B", B, PTR),
    F("C", C, PTR),
    F("A_out", A_out, PTR),
    F("m_local", m, I64),
    F("M", m, I64),
    F("k", k, I64),
    F("k_local", k, I64),
    F("n", n, I64),
    F("lda", lda, I64),
    F("ldb", ldb, I64),
    F("ldc", ldc, I64),
    F("ld_aout", ld_aout, I64),
    F("transb", transb, I64),
    F("dtype", dtype, I64),
    F("ctype", ctype, I64),
    F("order", order, I64),
    F("Q", Q, PTR),
    F("K", K, PTR),
    F("V", V, PTR),
    F("O", O, PTR),
    F("LSE", LSE, PTR),
    F("batch", batch, I64),
    F("seq_local", seq, I64),
    F("heads_q", hq, I64),
    F("heads_kv", hkv, I64),
    F("head_dim", hd, I64),
    F("causal", causal, I64),
    F("scale", scale, DBL),
    F("X", X, PTR),
    F("W", W, PTR),
    F("W1", W, PTR),
    F("W2", W2, PTR),
    F("topk_ids", topk_ids, PTR),
    F("topk_weight", topk_weight, PTR),
    F("Y", Y, PTR),
    F("out", out, PTR),
    F("expert_rows", expert_rows, PTR),
    F("origin", origin, PTR),
    F("num_tokens", tokens, I64),
    F("hidden", hidden, I64),
    F("topk", topk, I64),
    F("num_experts", experts, I64),
    F("ffn", ffn, I64),
    F("y_rows", y_rows, I64),
    F("size", size, I64),
    F("comm", comm, PTR),
    F("mpi", mpi, PTR),
    F("newcomm", newcomm, PTR),
    F("req", req, PTR),
    F("request", reqp, PTR),
    F("ptr", ptr, PTR),
};

static const struct named {
  const char *name;
  int64_t v;
} constants[] = {
    {"BF16", MKX_BF16},     {"FP16", MKX_FP16},     {"FP32", MKX_FP32},
    {"FP64", MKX_FP64},     {"ROW", MKX_ROW_MAJOR}, {"COL", MKX_COL_MAJOR},
    {"E4M3", MKX_FP8_E4M3}, {"E5M2", MKX_FP8_E5M2}, {"NT", MKX_NO_TRANS},
    {"T", MKX_TRANS},       {"SIZE_MAX", -1}};

static const struct {
  const char *name;
  void *p;
} pointers[] = {{"NULL", NULL},
                {"live", LIVE},
                {"freed", &FREED_M},
                {"foreign", &FOREIGN_M},
                {"interior", &INTERIOR_M},
                {"ids_out", ids_out},
                {"ids_neg", ids_neg},
                {"ids_dup", ids_dup}};

static int call_index(int call) {
  int i = 0;
  while (!(call & (1 << i))) i++;
  return i;
}

static void good_args(int call, args *a) {
  memset(a, 0, sizeof *a);
  a->call = call;
  a->info = MPI_INFO_NULL;
  a->comm = LIVE;
  a->dtype = a->ctype = MKX_FP32;
  a->order = MKX_ROW_MAJOR;
  a->transb = MKX_NO_TRANS;
  a->A = a->B = a->Q = a->K = a->V = a->X = a->W = a->W2 = ones;
  a->topk_weight = ones;
  a->C = outs.C;
  a->A_out = outs.A_out;
  a->O = outs.O;
  a->LSE = outs.LSE;
  a->Y = outs.Y;
  a->out = call & QUERIES ? (void *)&a->query_out : outs.out;
  a->expert_rows = outs.expert_rows;
  a->origin = outs.origin;
  a->topk_ids = ids_good;
  a->reqp = LIVE;
  a->req = LIVE;
  a->ptr = LIVE;
  a->mpi = LIVE;
  a->newcomm = &a->comm_out;
  /* every leading dimension fits both orders and both transpositions */
  a->m = call & AGS ? 2 : 8;
  a->k = call & AGS ? 8 : 2;
  a->n = call & MOES ? 4 : 8;
  a->lda = a->ldb = a->ldc = a->ld_aout = 8;
  a->batch = 1, a->seq = 2, a->hq = 2, a->hkv = 2, a->hd = 4;
  a->tokens = 2, a->hidden = 4, a->topk = 2, a->experts = 2 * size;
  a->ffn = 2, a->y_rows = 4 * size;
  a->size = 64;
  if (call == CFREE) a->req = NULL;
}

/* ---- parsing a row's changes ---------------------------------------------- */

static int64_t term(const char **s) {
  char *end;
  if (isdigit((unsigned char)**s)) {
    int64_t v = strtoll(*s, &end, 10);
    *s = end;
    if (**s != '^') return v;
    long e = strtol(*s + 1, &end, 10);
    *s = end;
    int64_t p = 1;
    while (e-- > 0) p *= v;
    return p;
  }
  size_t len = 0;
  while (isalnum((unsigned char)(*s)[len]) || (*s)[len] == '_') len++;
  if (len == 1 && **s == 'P') return (*s)++, size;
  for (size_t i = 0; i < sizeof constants / sizeof *constants; i++)
    if (strlen(constants[i].name) == len &&
        !strncmp(*s, constants[i].name, len))
      return *s += len, constants[i].v;
  fprintf(stderr, "test_bad_table: bad value at '%s'\n", *s);
  MPI_Abort(MPI_COMM_WORLD, 2);
  return 0;
}

/* Left to right, no precedence: "2^30+1*P" is (2^30 + 1) * P. */
static int64_t eval(const char *s) {
  int64_t v = 0;
  char op = '+';
  while (*s) {
    if (strchr("+-*", *s)) op = *s++;
    int64_t t = term(&s);
    v = op == '+' ? v + t : op == '-' ? v - t : v * t;
  }
  return v;
}

static void *pointer(const char *v) {
  for (size_t i = 0; i < sizeof pointers / sizeof *pointers; i++)
    if (!strcmp(v, pointers[i].name)) return pointers[i].p;
  fprintf(stderr, "test_bad_table: bad pointer value '%s'\n", v);
  MPI_Abort(MPI_COMM_WORLD, 2);
  return NULL;
}

static int call_named(const char *tag) {
  for (int i = 0; i < NCALLS; i++)
    if (!strcmp(tag, calls[i].tag)) return 1 << i;
  fprintf(stderr, "test_bad_table: no call '%s'\n", tag);
  MPI_Abort(MPI_COMM_WORLD, 2);
  return 0;
}

static void set_field(args *a, const char *name, const char *v) {
  if (!strncmp(name, "mkx_", 4)) {
    if (a->info == MPI_INFO_NULL) MPI_Info_create(&a->info);
    MPI_Info_set(a->info, name, v);
    return;
  }
  for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
    if (strcmp(name, fields[i].name)) continue;
    char *p = (char *)a + fields[i].off;
    if (fields[i].kind == PTR)
      *(void **)p = pointer(v);
    else if (fields[i].kind == DBL)
      *(double *)p = strtod(v, NULL);
    else
      *(int64_t *)p = eval(v);
    return;
  }
  fprintf(stderr, "test_bad_table: no argument '%s'\n", name);
  MPI_Abort(MPI_COMM_WORLD, 2);
}

/* Calls fn(name, value) for each item of a change list. */
static void each_item(const char *list, args *a,
                      void (*fn)(args *, const char *, const char *)) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *save = NULL, *it = strtok_r(buf, ",", &save); it;
       it = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(it, '=');
    if (!eq) MPI_Abort(MPI_COMM_WORLD, 2);
    *eq = '\0';
    fn(a, it, eq + 1);
  }
}

static void apply(args *a, const char *name, const char *v) {
  if (strcmp(name, "call")) set_field(a, name, v);
}

static void switch_call(args *a, const char *name, const char *v) {
  if (!strcmp(name, "call")) good_args(call_named(v), a);
}

/* ---- one call ------------------------------------------------------------- */

#define DT(x) ((MKX_Datatype)(x))
static int invoke(args *a) {
  MKX_Comm c = a->comm;
  MKX_Trans tb = (MKX_Trans)a->transb;
  MKX_Order o = (MKX_Order)a->order;
  switch (a->call) {
    case AG:
      return MKX_Allgather_gemm(a->A, a->m, a->k, a->lda, a->B, a->n, a->ldb,
                                tb, a->C, a->ldc, a->A_out, a->ld_aout,
                                DT(a->dtype), DT(a->ctype), o, c, NULL);
    case AG_I:
      return MKX_Allgather_gemm_init(a->A, a->m, a->k, a->lda, a->B, a->n,
                                     a->ldb, tb, a->C, a->ldc, a->A_out,
                                     a->ld_aout, DT(a->dtype), DT(a->ctype), o,
                                     c, a->info, a->reqp);
    case RS:
      return MKX_Gemm_reduce_scatter(a->A, a->m, a->k, a->lda, a->B, a->n,
                                     a->ldb, tb, a->C, a->ldc, DT(a->dtype),
                                     DT(a->ctype), o, c, NULL);
    case RS_I:
      return MKX_Gemm_reduce_scatter_init(
          a->A, a->m, a->k, a->lda, a->B, a->n, a->ldb, tb, a->C, a->ldc,
          DT(a->dtype), DT(a->ctype), o, c, a->info, a->reqp);
    case AR:
      return MKX_Gemm_allreduce(a->A, a->m, a->k, a->lda, a->B, a->n, a->ldb,
                                tb, a->C, a->ldc, DT(a->dtype), DT(a->ctype), o,
                                c, NULL);
    case AR_I:
      return MKX_Gemm_allreduce_init(a->A, a->m, a->k, a->lda, a->B, a->n,
                                     a->ldb, tb, a->C, a->ldc, DT(a->dtype),
                                     DT(a->ctype), o, c, a->info, a->reqp);
    case ATTN:
      return MKX_Ring_attention(a->Q, a->K, a->V, a->O, a->LSE, a->batch,
                                a->seq, a->hq, a->hkv, a->hd, (int)a->causal,
                                a->scale, DT(a->dtype), c, NULL);
    case MOE_D:
      return MKX_Moe_dispatch_gemm(a->X, a->tokens, a->hidden, a->topk_ids,
                                   a->topk_weight, a->topk, a->experts, a->W,
                                   a->n, a->Y, a->y_rows, a->expert_rows,
                                   a->origin, DT(a->dtype), c, NULL);
    case MOE_L:
      return MKX_Moe_layer(a->X, a->tokens, a->hidden, a->topk_ids,
                           a->topk_weight, a->topk, a->experts, a->W, a->W2,
                           a->ffn, a->out, DT(a->dtype), c, NULL);
    case ALLOC:
      return MKX_Alloc_mem(c, (size_t)a->size, (void **)a->ptr);
    case FREE:
      return MKX_Free_mem(c, a->ptr);
    case CREATE:
      return MKX_Comm_create(*(const MPI_Comm *)a->mpi, a->info,
                             (MKX_Comm *)a->newcomm);
    case START:
      return MKX_Start((MKX_Request)a->req, NULL);
    case RFREE:
      return MKX_Request_free((MKX_Request *)a->reqp);
    case CFREE:
      return MKX_Comm_free((MKX_Comm *)&a->comm);
    case Q_RANK:
      return MKX_Comm_rank(c, a->out);
    case Q_SIZE:
      return MKX_Comm_size(c, a->out);
    case Q_NODE:
      return MKX_Comm_node(c, a->out);
    case Q_NNODES:
      return MKX_Comm_num_nodes(c, a->out);
    case Q_LRANK:
      return MKX_Comm_local_rank(c, a->out);
    case Q_LSIZE:
      return MKX_Comm_local_size(c, a->out);
    case Q_DEV:
      return MKX_Comm_device(c, a->out);
    case Q_ASYNC:
      return MKX_Comm_get_async_error(c, a->out);
  }
  return -1;
}

/* ---- what a case needs around its call ------------------------------------ */

typedef struct res {
  MKX_Comm comm;      /* the case's communicator */
  int own;            /* comm has a short timeout and is this case's */
  MKX_Request plan;   /* a live request (START, RFREE; CFREE req=live) */
  void *mem;          /* memory from MKX_Alloc_mem (FREE) */
  MKX_Comm comm2;     /* the communicator CFREE frees */
  MPI_Comm mpi;       /* what CREATE duplicates */
  void *foreign;      /* memory MKX never gave out */
  MKX_Comm gone_comm; /* handles freed just before the call */
  MKX_Request gone_req;
  void *gone_mem;
} res;

static const MPI_Comm mpi_null = MPI_COMM_NULL;

static MKX_Comm comm_with_timeout(const char *ms) {
  MPI_Info info;
  MKX_Comm c = NULL;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mkx_timeout_ms", ms);
  int rc = MKX_Comm_create(MPI_COMM_WORLD, info, &c);
  MPI_Info_free(&info);
  if (rc != MKX_SUCCESS) {
    fprintf(stderr, "test_bad_table: MKX_Comm_create: %s\n",
            MKX_Get_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return c;
}

static MKX_Request good_plan(MKX_Comm c) {
  MKX_Request r = NULL;
  if (MKX_Gemm_allreduce_init(ones, 8, 2, 8, ones, 8, 8, MKX_NO_TRANS, outs.C,
                              8, MKX_FP32, MKX_FP32, MKX_ROW_MAJOR, c,
                              MPI_INFO_NULL, &r) != MKX_SUCCESS) {
    fprintf(stderr, "test_bad_table: a valid plan: %s\n", MKX_Get_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return r;
}

/* Handles of each kind, freed: their addresses are not handed out again
 * before the call (nothing is allocated in between). */
static void make_gone(res *r) {
  r->gone_comm = comm_with_timeout("5000");
  r->gone_req = good_plan(r->comm);
  MKX_Alloc_mem(r->comm, 64, &r->gone_mem);
  MKX_Comm c = r->gone_comm;
  MKX_Request q = r->gone_req;
  MKX_Request_free(&q);
  MKX_Free_mem(r->comm, r->gone_mem);
  MKX_Comm_free(&c);
}

/* Collective: the same on every rank whatever the row breaks where. */
static void setup(const row *w, int call, res *r) {
  memset(r, 0, sizeof *r);
  r->own = w->other == TIMEOUT;
  r->comm = r->own ? comm_with_timeout("500") : comm_main;
  r->mpi = MPI_COMM_WORLD;
  if (call == CREATE && r->own) MPI_Comm_dup(MPI_COMM_WORLD, &r->mpi);
  if (call == START || call == RFREE) r->plan = good_plan(r->comm);
  if (call == FREE) MKX_Alloc_mem(r->comm, 256, &r->mem);
  if (call == CFREE) r->comm2 = comm_with_timeout("5000");
  if (call == CFREE && strstr(w->bad, "req=live"))
    r->plan = good_plan(r->comm2);
  r->foreign = malloc(256);
  if (strstr(w->bad, "freed")) make_gone(r);
}

static void resolve(args *a, res *r) {
  if (a->comm == LIVE) a->comm = a->call == CFREE ? r->comm2 : r->comm;
  if (a->comm == &FREED_M) a->comm = r->gone_comm;
  if (a->req == LIVE) a->req = r->plan;
  if (a->req == &FREED_M) a->req = r->gone_req;
  if (a->reqp == LIVE)
    a->reqp = a->call == RFREE ? (void *)&a->req : (void *)&a->req_out;
  if (a->ptr == LIVE) a->ptr = a->call == ALLOC ? (void *)&a->mem_out : r->mem;

  if (a->ptr == &FREED_M) a->ptr = r->gone_mem;
  if (a->ptr == &FOREIGN_M) a->ptr = r->foreign;
  if (a->ptr == &INTERIOR_M) a->ptr = (char *)r->mem + 64;
  a->mpi = a->mpi == NULL ? &mpi_null : &r->mpi;
}

/* What the call took over, and what it made by mistake, is let go. */
static void after(const args *a, const void *target, int rc, res *r) {
  if (rc == MKX_SUCCESS && a->call == RFREE && target == r->plan)
    r->plan = NULL;
  if (rc == MKX_SUCCESS && a->call == FREE && target == r->mem) r->mem = NULL;
  if (rc == MKX_SUCCESS && a->call == CFREE && target == r->comm2)
    r->comm2 = NULL;
  MKX_Request q = a->req_out;
  if (q != NULL && q != POISON) MKX_Request_free(&q);
  if (r->plan) MKX_Request_free(&r->plan);
  if (a->mem_out != NULL && a->mem_out != POISON)
    MKX_Free_mem(a->call == ALLOC ? a->comm : r->comm, a->mem_out);
  if (r->mem) MKX_Free_mem(r->comm, r->mem);
  MKX_Comm c = a->comm_out;
  if (c != NULL && c != POISON) MKX_Comm_free(&c);
  if (r->comm2) MKX_Comm_free(&r->comm2);
  if (r->own) MKX_Comm_free(&r->comm);
  free(r->foreign);
  if (a->info != MPI_INFO_NULL) {
    MPI_Info info = a->info;
    MPI_Info_free(&info);
  }
}

/* ---- checks ----------------------------------------------------------------- */

static void say(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(char *why, size_t len, const char *fmt, ...) {
  size_t used = strlen(why);
  va_list ap;
  va_start(ap, fmt);
  if (used + 3 < len) {
    if (used) strcat(why, "; ");
    vsnprintf(why + strlen(why), len - strlen(why), fmt, ap);
  }
  va_end(ap);
}

static int ident(char ch) { return isalnum((unsigned char)ch) || ch == '_'; }

/* `word` occurs in msg, not as part of a longer name. */
static int names(const char *msg, const char *word) {
  size_t n = strlen(word);
  for (const char *p = msg; (p = strstr(p, word)); p++) {
    int left = p == msg || !ident(p[-1]) || !ident(word[0]);
    int right = !ident(p[n]) || !ident(word[n - 1]);
    if (left && right) return 1;
  }
  return 0;
}

static void check_words(const char *msg, const char *words, int bad_rank,
                        char *why, size_t len) {
  char buf[160], rk[32];
  snprintf(buf, sizeof buf, "%s", words);
  snprintf(rk, sizeof rk, "rank %d", bad_rank);
  for (char *save = NULL, *w = strtok_r(buf, "&", &save); w;
       w = strtok_r(NULL, "&", &save)) {
    const char *want = strcmp(w, "rank#") ? w : rk;
    if (!names(msg, want)) say(why, len, "message lacks '%s'", want);
  }
}

/* Codes after which mkx.h promises that no output was written. */
static int writes_nothing(int rc) {
  switch (rc) {
    case INVAL:
    case NULLP:
    case SIZE:
    case LD:
    case UNSUP:
    case SHAPE:
    case PEER:
    case BADCOMM:
    case BADREQ:
    case MKX_ERR_TRUNCATE:
      return 1;
  }
  return 0;
}

static int poisoned(const void *p, size_t bytes) {
  const unsigned char *b = p;
  for (size_t i = 0; i < bytes; i++)
    if (b[i] != 0xff) return 0;
  return 1;
}

static void poison(args *a) {
  memset(&outs, 0xff, sizeof outs);
  a->req_out = POISON;
  a->comm_out = POISON;
  a->mem_out = POISON;
  a->query_out = 0x5a5a5a5a;
}

static void check_outputs(const args *a, int rc, char *why, size_t len) {
  static const struct {
    const char *name;
    size_t off, bytes;
  } bufs[] = {{"C", offsetof(struct outputs, C), sizeof outs.C},
              {"A_out", offsetof(struct outputs, A_out), sizeof outs.A_out},
              {"O", offsetof(struct outputs, O), sizeof outs.O},
              {"LSE", offsetof(struct outputs, LSE), sizeof outs.LSE},
              {"Y", offsetof(struct outputs, Y), sizeof outs.Y},
              {"out", offsetof(struct outputs, out), sizeof outs.out},
              {"expert_rows", offsetof(struct outputs, expert_rows),
               sizeof outs.expert_rows},
              {"origin", offsetof(struct outputs, origin), sizeof outs.origin}};
  if (writes_nothing(rc))
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) {
      if (rc == MKX_ERR_TRUNCATE && !strcmp(bufs[i].name, "expert_rows"))
        continue; /* the one output a truncation writes */
      if (!poisoned((const char *)&outs + bufs[i].off, bufs[i].bytes))
        say(why, len, "%s written by a failed call", bufs[i].name);
    }
  if (rc == MKX_SUCCESS) return;
  if (a->req_out != NULL && a->req_out != POISON)
    say(why, len, "a failed _init made a request");
  if (a->call == CREATE && a->newcomm == &a->comm_out && a->comm_out != NULL)
    say(why, len, "*newcomm not NULL after a failure");
  if (a->call == ALLOC && a->ptr == &a->mem_out && a->mem_out != NULL)
    say(why, len, "*ptr not NULL after a failure");
  if (a->out == &a->query_out && a->query_out != 0x5a5a5a5a)
    say(why, len, "query wrote its output and failed");
}

static void check_inputs(char *why, size_t len) {
  for (int i = 0; i < NB; i++)
    if (ones[i] != 1.0f) {
      say(why, len, "input written at %d", i);
      return;
    }
  if (ids_good[0] != 0 || ids_good[1] != 2 * size - 1)
    say(why, len, "topk_ids written");
}

/* MKX_Gemm_allreduce of ones, k_local = 2 on every rank: every element of
 * C is exactly 2 * size. */
static int known_answer(char *why, size_t len) {
  memset(ka_C, 0xff, sizeof ka_C);
  int rc =
      MKX_Gemm_allreduce(ka_A, 8, 2, 2, ka_B, 8, 8, MKX_NO_TRANS, ka_C, 8,
                         MKX_FP32, MKX_FP32, MKX_ROW_MAJOR, comm_main, NULL);
  if (rc != MKX_SUCCESS) {
    say(why, len, "the known-answer call after it returned %d (%s)", rc,
        MKX_Get_last_error());
    return 0;
  }
  for (int i = 0; i < 64; i++)
    if (ka_C[i] != 2.0f * size) {
      say(why, len, "the known-answer call gave C[%d] = %g, want %d", i,
          ka_C[i], 2 * size);
      return 0;
    }
  return 1;
}

/* ---- the runner -------------------------------------------------------------- */

static const char *const where_name[] = {"every", "last", "first"};

static void case_name(const row *w, int call, char *buf, size_t len) {
  snprintf(buf, len, "%s %s%s%s%s @%s", calls[call_index(call)].tag,
           *w->all ? "[" : "", w->all, *w->all ? "] " : "", w->bad,
           where_name[w->where]);
}

static int is_known(const char *name) {
  for (size_t i = 0; known[i]; i++)
    if (!strcmp(known[i], name)) return 1;
  return 0;
}

static struct tally {
  int run, skipped, failed, silent, known_failed;
  char known_list[8192], fixed_list[2048];
} t;

static int broken_here(const row *w) {
  return size == 1 || w->where == EVERY ||
         (w->where == LAST && rank == size - 1) ||
         (w->where == FIRST && rank == 0);
}

static void build(const row *w, int call, int broken, args *a) {
  good_args(call, a);
  if (call == CREATE)
    set_field(a, "mkx_timeout_ms", w->other == TIMEOUT ? "500" : "5000");
  if (broken) each_item(w->bad, a, switch_call);
  each_item(w->all, a, apply);
  if (broken) each_item(w->bad, a, apply);
}

static void report(const char *name, int ok, int silent, const char *why) {
  int all_ok = mt_all(ok), n_silent = 0;
  MPI_Allreduce(&silent, &n_silent, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  t.run++;
  t.silent += n_silent > 0;
  if (!is_known(name)) {
    CHECK(ok, "%s%s%s", name, ok ? "" : ": ", why);
    t.failed += !all_ok;
    return;
  }
  if (!ok) mt_diag("known: %s: %s", name, why);
  char *list = all_ok ? t.fixed_list : t.known_list;
  size_t len = all_ok ? sizeof t.fixed_list : sizeof t.known_list;
  t.known_failed += !all_ok;
  if (strlen(list) + strlen(name) + 8 < len)
    strcat(strcat(list, "\n#   "), name);
}

/* The code, and the message: the words on the broken ranks (and where
 * every rank gets the same code), the broken rank's number in a
 * MKX_ERR_PEER elsewhere. */
static void check_code(const row *w, int broken, int rc, const char *msg,
                       char *why, size_t len) {
  const int want = broken ? w->code : w->other;
  const int bad_rank = w->where == FIRST ? 0 : size - 1;
  if (rc != want)
    say(why, len, "returned %d (%s), want %d (%s)%s: %s", rc,
        MKX_Error_string(rc), want, MKX_Error_string(want),
        rc == MKX_SUCCESS ? " - a silent success" : "", msg);
  else if (rc != MKX_SUCCESS && (broken || w->other == w->code))
    check_words(msg, w->words, bad_rank, why, len);
  else if (rc == PEER)
    check_words(msg, "rank#", bad_rank, why, len);
}

static void run_case(const row *w, int call, int host_comm) {
  char name[256], why[1024] = "";
  case_name(w, call, name, sizeof name);
  if ((w->flags & NP2 && size < 2) || (w->flags & HOST_ONLY && !host_comm)) {
    t.skipped++;
    return;
  }
  const int broken = broken_here(w);
  args a;
  res r;
  build(w, call, broken, &a);
  setup(w, call, &r);
  resolve(&a, &r);
  poison(&a);
  const void *target = a.call == RFREE   ? (const void *)a.req
                       : a.call == FREE  ? (const void *)a.ptr
                       : a.call == CFREE ? (const void *)a.comm
                                         : NULL;
  const int rc = invoke(&a);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", MKX_Get_last_error());
  check_code(w, broken, rc, msg, why, sizeof why);
  check_outputs(&a, rc, why, sizeof why);
  check_inputs(why, sizeof why);
  after(&a, target, rc, &r);
  const int ka = known_answer(why, sizeof why);
  const int want = broken ? w->code : w->other;
  report(name, why[0] == '\0', rc == MKX_SUCCESS && want != MKX_SUCCESS, why);
  if (!mt_all(ka)) { /* a communicator out of step: start afresh */
    MKX_Comm_free(&comm_main);
    comm_main = comm_with_timeout("5000");
  }
}

static void init_data(void) {
  const int32_t e = 2 * size; /* num_experts */
  for (int i = 0; i < NB; i++) ones[i] = 1.0f;
  for (int i = 0; i < 16; i++) ka_A[i] = ka_B[i] = 1.0f;
  /* token 0: experts 0 and E-1; token 1: experts 1 and 0 */
  const int32_t good[4] = {0, e - 1, 1, 0};
  memcpy(ids_good, good, sizeof good);
  memcpy(ids_out, good, sizeof good);
  memcpy(ids_neg, good, sizeof good);
  memcpy(ids_dup, good, sizeof good);
  ids_out[1] = e;
  ids_neg[2] = -1;
  ids_dup[1] = 0;
}

int main(int argc, char **argv) {
  mt_init(&argc, &argv);
  rank = mt.rank;
  size = mt.size;
  init_data();
  comm_main = comm_with_timeout("5000");
  int dev = -1;
  MKX_Comm_device(comm_main, &dev);
  /* The cases that leave a rank waiting come last: the collectives they
   * abandon stay pending in MPI to the end, with MPI's own allocations
   * for them, so under the sanitizers the leak check runs before them. */
  for (int late = 0; late < 2; late++) {
#if MKX_SANITIZERS
    if (late) {
      __lsan_do_leak_check();
      MPI_Barrier(MPI_COMM_WORLD);
    }
#endif
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
      for (int c = 0; c < NCALLS; c++)
        if ((table[i].other == TIMEOUT) == late && (table[i].calls & (1u << c)))
          run_case(&table[i], 1 << c, dev < 0);
  }
  MKX_Comm_free(&comm_main);
  if (rank == 0) {
    printf(
        "# %d cases run on %d rank(s), %d skipped; crashes: 0; "
        "failures: %d (silent successes: %d); known: %d\n",
        t.run, size, t.skipped, t.failed, t.silent, t.known_failed);
    if (t.known_failed) printf("# known:%s\n", t.known_list);
    if (t.fixed_list[0])
      printf("# known cases that passed on %d rank(s):%s\n", size,
             t.fixed_list);
    fflush(stdout);
  }
  return mt_finish();
}
