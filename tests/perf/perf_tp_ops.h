/* The tensor-parallel calls' operands, plans and communicators that
 * mkx_perf tp and mkx_perf tune share (tests/perf/perf_tp_ops.c): bf16
 * in and out (or e4m3 in with per-tensor scales, bf16 out: the _scaled
 * calls), B stored N x K (a weight as in nn.Linear), M, N, K the global
 * GEMM sizes (AllGather+GEMM splits M over the ranks, the reducing calls
 * split K). */
#ifndef MKX_PERF_TP_OPS_H
#define MKX_PERF_TP_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <mpi.h>
#include "mkx.h"

enum { OP_AG, OP_RS, OP_AR };
extern const char *const perf_tp_op_names[3];

typedef struct perf_tp_bufs {
  void *A, *B, *C, *Afull, *P; /* A_r, B_r, C_r, gathered A, partial */
  float *sa, *sb;              /* fp8: the scales of A and B (device) */
  int64_t m_loc, k_loc, c_rows;
  int fp8; /* A, B and the gathered A e4m3; C and the partial bf16 */
  MKX_Request req, req2;
} perf_tp_bufs;

/* perf_tp_alloc's flags: also the gathered A / the partial product of
 * the cuBLAS variants; fp8 operands. */
enum { PERF_TP_BASELINES = 1, PERF_TP_FP8 = 2 };

/* Device memory of `bytes` (at least 16), zeroed; exits on failure. */
void *perf_dalloc(size_t bytes);
/* count small random bf16 values (exact small integers / 64, so that
 * sums stay finite) from seed into device memory d. */
void perf_tp_fill(void *d, size_t count, unsigned seed);
/* Rank r's operands when the job is split over p ranks, filled with small
 * random values (flags: PERF_TP_*). */
void perf_tp_alloc(int op, int64_t M, int64_t N, int64_t K, int p, int r,
                   int flags, perf_tp_bufs *b);
/* count values of b's operand type (bf16 or e4m3) from seed into d. */
void perf_tp_fill_operand(const perf_tp_bufs *b, void *d, size_t count,
                          unsigned seed);
/* The MKX plan of op on communicator c over b's operands, into *req (fp8:
 * the _scaled call with b's per-tensor scales). */
void perf_tp_plan(MKX_Comm c, int op, int64_t M, int64_t N, int64_t K,
                  const perf_tp_bufs *b, MKX_Request *req);
/* b's plans and memory, freed. */
void perf_tp_free(perf_tp_bufs *b);

/* The communicator options the subcommands set from their arguments. */
typedef struct perf_tp_conf {
  const char *overlap;            /* tp_overlap */
  const char *vnode, *net, *hier; /* virtual nodes (NULL: none) */
} perf_tp_conf;
/* An MKX communicator over comm with f's options, fused=auto, each of
 * the n KEY=VALUE options in extra, and (device >= 0) that GPU. */
MKX_Comm perf_tp_comm(MPI_Comm comm, const perf_tp_conf *f,
                      const char *const *extra, int n, int device);
/* "MxNxK" (positive) into s: 1, else 0. */
int perf_tp_shape(const char *v, int64_t s[3]);
/* --op's value: ag, rs, ar or all as bits 1 << OP_*, else 0. */
int perf_tp_op_mask(const char *v);

#endif
