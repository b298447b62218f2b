/*
 * mkx_test.h - helpers shared by the MKX multi-rank tests.
 *
 * Independent of the library's internals: only the public header is used.
 * Provides a seeded PRNG whose streams depend on (seed, rank, tensor) only
 * (so every rank can regenerate every other rank's inputs), bf16/fp16
 * conversions of its own, strided matrix fill/read for every MKX datatype,
 * poison/bounds checking, error norms and tolerances, the MPI set-up and
 * summary of the checks (check.h) and a buffer layer (host memory, or
 * device memory with --device).
 */
#ifndef MKX_TEST_H
#define MKX_TEST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <mpi.h>
#include "check.h"
#include "mkx.h"

/* ---- PRNG: xoshiro256** seeded by splitmix64 ---------------------------- */

typedef struct {
  uint64_t s[4];
} mt_rng;

uint64_t mt_splitmix64(uint64_t *x);
/* A stream that depends only on (seed, rank, tensor). */
void mt_rng_init(mt_rng *g, uint64_t seed, int rank, int tensor);
uint64_t mt_rng_next(mt_rng *g);
double mt_rng_unit(mt_rng *g); /* [0,1) */
double mt_rng_sym(mt_rng *g);  /* [-1,1], never exactly 0 */
int64_t mt_rng_int(mt_rng *g, int64_t lo, int64_t hi); /* inclusive */

/* ---- number formats (round to nearest even, independent of MKX) -------- */

#include "num16.h"

size_t mt_type_size(MKX_Datatype t);
const char *mt_type_name(MKX_Datatype t);
const char *mt_order_name(MKX_Order o);
/* The value `v` rounded to type t (through float for bf16/fp16/fp32). */
double mt_round(MKX_Datatype t, double v);
/* Element idx of a typed buffer as double / store a double (rounded). */
double mt_get(const void *buf, MKX_Datatype t, size_t idx);
void mt_set(void *buf, MKX_Datatype t, size_t idx, double v);

/* ---- OCP FP8, from the format's definition -------------------------------
 * E4M3: sign, 4 exponent bits (bias 7), 3 mantissa bits.  Exponent 0 is
 *   subnormal (m/8 * 2^-6 = m * 2^-9); S.1111.111 is the only NaN and there
 *   is no infinity, so exponent 15 is normal for m = 0..6: the largest
 *   value is 1.75 * 2^8 = 448.
 * E5M2: sign, 5 exponent bits (bias 15), 2 mantissa bits, as IEEE 754:
 *   exponent 0 subnormal (m/4 * 2^-14 = m * 2^-16), exponent 31 infinity
 *   (m = 0) or NaN; the largest value is 1.75 * 2^15 = 57344. */
double mt_fp8_decode(MKX_Datatype t, uint8_t b);
/* A random finite fp8 byte of t with |value| <= limit: mostly values of
 * moderate size, 1 in 8 anything (zeros, subnormals). */
uint8_t mt_rand_fp8(mt_rng *g, MKX_Datatype t, double limit);

/* ---- strided matrices --------------------------------------------------- */

/* Offset (in elements) of (i,j). */
static inline size_t mt_off(MKX_Order o, int64_t ld, int64_t i, int64_t j) {
  return o == MKX_ROW_MAJOR ? (size_t)(i * ld + j) : (size_t)(i + j * ld);
}
/* Elements of a full rows x cols matrix with leading dimension ld
 * (including the padding of the last row/column; at least 1). */
size_t mt_mat_elems(MKX_Order o, int64_t rows, int64_t cols, int64_t ld);
/* Dense row-major rows x cols values, uniform in [-1,1], already rounded
 * to dtype t, reproducible from (seed, rank, tensor). Caller frees. */
double *mt_gen(int64_t rows, int64_t cols, MKX_Datatype t, uint64_t seed,
               int rank, int tensor);
/* Store dense row-major values `v` into a strided typed matrix. */
void mt_store(void *buf, MKX_Datatype t, MKX_Order o, int64_t rows,
              int64_t cols, int64_t ld, const double *v);
/* Read (i,j) of a strided typed matrix. */
double mt_mat_get(const void *buf, MKX_Datatype t, MKX_Order o, int64_t ld,
                  int64_t i, int64_t j);

/* Fill `bytes` with 0xFF (a NaN in every float format). */
void mt_poison(void *buf, size_t bytes);
/* Is element idx still the poison pattern? */
int mt_is_poison(const void *buf, MKX_Datatype t, size_t idx);
/* For a buffer of `total` elements holding a rows x cols matrix (ld):
 * *oob = number of elements outside the logical matrix that are no longer
 * poison (written out of bounds), *unwritten = logical elements still
 * poison. */
void mt_check_bounds(const void *buf, MKX_Datatype t, MKX_Order o, int64_t rows,
                     int64_t cols, int64_t ld, size_t total, size_t *oob,
                     size_t *unwritten);

/* ||out - ref||_F / ||ref||_F ; ref dense row-major; NaN if out has NaN.
 * If ||ref|| == 0 the absolute norm is returned. */
double mt_relerr_mat(const void *buf, MKX_Datatype t, MKX_Order o, int64_t ld,
                     int64_t rows, int64_t cols, const double *ref);
/* Same for two dense double arrays. */
double mt_relerr(const double *out, const double *ref, size_t n);

/* Device set-up for calls that run on the stream `st` (a cudaStream_t):
 * copy (any direction) or fill on st, then wait for st.  Not on the legacy
 * default stream: a non-blocking stream does not wait for it, and
 * cudaMemcpy between device buffers, cudaMemset and the end of a large
 * cudaMemcpy from pageable memory return before the device is done, so the
 * next call on st could read the previous inputs.  MKX_TEST_SETUP_DELAY_MS
 * = N first holds the legacy default stream for N ms (a host function), as
 * a GPU busy with another process's kernels does: set-up left on that
 * stream then fails the checks.  Exits on a CUDA error. */
void mt_dev_copy(void *dst, const void *src, size_t bytes, void *st);
void mt_dev_fill(void *dst, int byte, size_t bytes, void *st);
/* Tolerance for a result of type `out` computed from inputs of type `in`
 * (reference from the rounded inputs): output rounding vs accumulation. */
double mt_tol(MKX_Datatype in, MKX_Datatype out);
/* mt_tol for a result whose sums may cancel: scaled by the condition
 * kappa = ||refabs|| / ||ref|| (refabs: the same sums of absolute values,
 * the size of the rounding errors) beyond what random data gives (64),
 * and at most 0.05, so that a wrong result (relative error ~1) still
 * fails. */
double mt_tol_cond(double tol, const double *ref, const double *refabs,
                   size_t n);
/* Every element i of the rows x cols `buf` (order o, leading dimension
 * ld) within tol (|ref_i| + refabs_i) of ref_i, plus half of t's
 * smallest subnormal (a value that small may round to 0): the
 * componentwise bound, for results so few that one cancelling element
 * decides the norm (where mt_tol_cond's allowance for random data does
 * not apply).  NaN fails. */
int mt_within_cond(const void *buf, MKX_Datatype t, MKX_Order o, int64_t ld,
                   int64_t rows, int64_t cols, const double *ref,
                   const double *refabs, double tol);

/* ---- GEMM operands ------------------------------------------------------ */

/* Smallest valid leading dimension of a rows x cols matrix (>= 1). */
int64_t mt_min_ld(MKX_Order o, int64_t rows, int64_t cols);
/* B is logically k x n; stored k x n (MKX_NO_TRANS) or n x k (MKX_TRANS).
 * Stored rows/cols and storage elements for leading dimension ldb. */
void mt_B_dims(MKX_Trans tb, int64_t k, int64_t n, int64_t *srows,
               int64_t *scols);
/* Store dense row-major logical k x n values Bv as the stored B. */
void mt_store_B(void *buf, MKX_Datatype t, MKX_Order o, MKX_Trans tb, int64_t k,
                int64_t n, int64_t ldb, const double *Bv);
/* C (m x n dense row-major) += A (m x k dense) * B (k x n dense), double. */
void mt_ref_gemm_acc(double *C, const double *A, const double *B, int64_t m,
                     int64_t k, int64_t n);
/* The same with |A| and |B|: the size of the rounding errors, for
 * mt_tol_cond. */
void mt_ref_gemm_abs(double *C, const double *A, const double *B, int64_t m,
                     int64_t k, int64_t n);

/* FNV-1a of bytes. */
uint64_t mt_hash(const void *buf, size_t bytes, uint64_t h);

/* ---- test bookkeeping ---------------------------------------------------- */

typedef struct mt_ctx {
  int rank, size;
  uint64_t seed;
  int device;  /* --device given (and usable) */
  int verbose; /* -v: every rank prints ok lines */
  const char *prog;
} mt_ctx;

extern mt_ctx mt;

/* MPI_Init, parse --seed N, --device, -v; handle the skip cases (exits
 * CHECK_SKIP after MPI_Finalize).  Seed: rank 0's (time-based unless given)
 * is broadcast and printed, and named by every failed check.  Passes are
 * printed by rank 0, or by every rank with -v. */
void mt_init(int *argc, char ***argv);
/* Collective: sums the failed checks over ranks, prints a TAP plan and a
 * summary, MPI_Finalize.  Returns the exit code (0 all passed, 1
 * otherwise). */
int mt_finish(void);

/* A hang guard for cases that wait on other ranks: unless mt_guard_off()
 * comes first, `seconds` after mt_guard the process prints "not ok - rank
 * r: WHAT still running after S s: a wait hangs" and exits 1 (the launcher
 * then ends the other ranks).  mt_now_s: monotonic seconds. */
void mt_guard(const char *what, int seconds);
void mt_guard_off(void);
double mt_now_s(void);

/* Diagnostic line prefixed with "# [rank r] ". */
void mt_diag(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
/* Global AND of a local condition (collective). */
int mt_all(int cond);
/* Collective: a communicator over MPI_COMM_WORLD made with the info keys
 * of kv ("mkx_tp_pull", "yes", ..., NULL), checked (a failure names them);
 * NULL on every rank where any rank failed. */
MKX_Comm mt_comm_with(const char *const *kv);

/* ---- buffers: host, or device with --device ------------------------------ */

typedef struct tbuf {
  void *host; /* staging copy on the host (always) */
  void *dev;  /* device copy (device mode) or NULL */
  size_t bytes;
} tbuf;

/* Allocate `bytes` (at least 1) on host and, in device mode, on the GPU.
 * Host copy poisoned.  Returns 0 on success. */
int tbuf_alloc(tbuf *b, size_t bytes);
/* The pointer to hand to MKX. */
void *tbuf_ptr(const tbuf *b);
/* host -> device (no-op on host) */
void tbuf_upload(tbuf *b);
/* device -> host after synchronising (no-op on host) */
void tbuf_download(tbuf *b);
/* Poison host copy and upload. */
void tbuf_poison(tbuf *b);
void tbuf_free(tbuf *b);
/* Synchronise the device (no-op on host). */
void mt_sync(void);

#endif
