/* One description per operation of how to check, agree on and run it;
 * src/ops/run.c drives every operation through the same steps. */
#ifndef MKX_OPS_OP_H
#define MKX_OPS_OP_H

#include <stddef.h>
#include <stdint.h>
#include "core/comm.h"
#include "host/op_args.h"
#include "ops/path.h"

#define MKX_SIG_MAX 12 /* values that must agree across ranks */
#define MKX_LATE_MAX 3 /* per-rank values checked once totals are known */

enum { MKX_BUF_IN = 1, MKX_BUF_OUT = 2 };

/* A buffer of the call: where its pointer lives in the args struct, and
 * how many bytes from there the operation may touch. */
typedef struct mkx_buffer {
  const char *name;
  void **field;
  size_t bytes;
  int dir;
} mkx_buffer;

#define MKX_BUF_MAX 10

typedef struct mkx_signature {
  int64_t sig[MKX_SIG_MAX];   /* must be equal on every rank */
  int64_t local;              /* per-rank size, summed into total */
  int64_t late[MKX_LATE_MAX]; /* per-rank, checked by post_check */
} mkx_signature;

/* One GPU path of an operation (the entries live beside the op's GPU
 * code, e.g. src/ops/tp/paths.c).  op: the operation's id among those
 * sharing the entry (MKX_TP_OP_* for the tensor-parallel calls).
 * plan: collective set-up (workspace, registration, tuning), the same on
 * every rank; start: enqueue one run on the stream, no collective host
 * work; free: after the last start (a plan of a failed set-up is never
 * freed: plan cleans up itself). */
typedef struct mkx_path_ops {
  mkx_path path;
  int (*plan)(MKX_Comm c, int op, const void *args, const mkx_agreed *g,
              void **plan);
  int (*start)(MKX_Comm c, void *plan, const void *args, MKX_Stream stream);
  void (*free)(MKX_Comm c, void *plan);
} mkx_path_ops;

/* A path chosen for a call, and why (logged at info). */
typedef struct mkx_path_choice {
  const mkx_path_ops *ops;
  int op;
  char why[192];
} mkx_path_choice;

typedef struct mkx_op_class {
  const char *name;
  mkx_op_kind kind;
  size_t args_size;
  const char *const *sig_names; /* names of sig[] entries, NULL-ended */
  /* sig[i] as the user wrote it, for a mismatch's message (NULL, or 0
   * returned: as an integer): a double kept as its bits, an enum. */
  int (*sig_text)(int i, int64_t v, char *buf, size_t len);
  /* Local checks of one rank's arguments; fills *s on success. */
  int (*check)(MKX_Comm c, void *args, mkx_signature *s);
  /* Checks needing every rank's values (NULL if none): is rank q's `late`
   * consistent with the totals? */
  int (*post_check)(const struct mkx_op_class *cls, const int64_t *late,
                    const mkx_agreed *g, int q);
  /* The buffers, sized with the agreed totals. */
  int (*buffers)(MKX_Comm c, void *args, const mkx_agreed *g, mkx_buffer *bufs);
  int (*host)(MKX_Comm c, const void *args, const mkx_agreed *g);
  /* The GPU paths (all NULL: none yet).  gpu_check: can this rank's
   * arguments take a fused path?  Local only, no communication:
   * MKX_ERR_UNSUPPORTED with the reason if not (every rank's answer is then
   * agreed).  gpu_local (NULL: none): local, once gpu_check passed: bits
   * of what this rank's operands need or cannot do (MKX_GPU_LOCAL_*), OR-ed
   * over the ranks into g->gpu_any in the same exchange (and bit
   * MKX_GPU_LOCAL_ADAPT into g->gpu_adapt): decisions on per-rank values
   * that must come out alike on every rank.
   * gpu_choose: once every rank passed gpu_check, the path from agreed
   * values and options only, so that every rank chooses alike. */
  int (*gpu_check)(MKX_Comm c, const void *args, const mkx_agreed *g);
  unsigned (*gpu_local)(MKX_Comm c, const void *args, const mkx_agreed *g);
  int (*gpu_choose)(MKX_Comm c, const void *args, const mkx_agreed *g,
                    struct mkx_path_choice *out);
} mkx_op_class;

#define MKX_OP_CLASS_DECL(kind, name) extern const mkx_op_class mkx_op_##name;
MKX_OPERATIONS(MKX_OP_CLASS_DECL)
#undef MKX_OP_CLASS_DECL

/* What a call or a plan learned before running. */
typedef struct mkx_prepared {
  const mkx_op_class *cls;
  mkx_agreed g;
  int staged;                  /* device buffers run through the host path */
  const mkx_path_ops *gpu_ops; /* the GPU path taken, or NULL */
  void *gpu;                   /* its plan */
  int64_t id;                  /* the communicator's call count at its
                                  agreement: the same on every rank */
  int plan;                    /* made by an _init (else a plain call) */
  mkx_path ran;                /* the path its last run took
                                  (MKX_PATH_COUNT: not run yet) */
  char label[256]; /* its runs' trace range: operation, planned path and
                      agreed values */
} mkx_prepared;

/* The path p runs: the one its last run took, else the one it chose. */
mkx_path mkx_prepared_path(const mkx_prepared *p);
/* Whether a call or start on `path` may be captured on c (the path's rule, and
 * the MoE paths' option moe_sync=no). */
int mkx_path_capturable_on(MKX_Comm c, mkx_path path);
/* MKX_Request_get_path and MKX_Comm_get_last_path for `path` on c
 * (MKX_PATH_COUNT: none; ops/path_info.c). */
int mkx_path_info(MKX_Comm c, mkx_path path, const char **name, int *capturable,
                  int *ctas);

/* Which entry point prepares the operation: every rank must be in the
 * same one (a plain call on one rank and an _init on another is an
 * error on both). */
typedef enum {
  MKX_VARIANT_CALL = 0,
  MKX_VARIANT_INIT,
  MKX_VARIANT_START
} mkx_variant;

/* Check, agree across ranks, choose the path.  pre_rc: a failure the
 * caller already found on this rank (agreed like the checks' own).  The
 * agreement also compares the operation, the variant and the
 * communicator's call count, so that ranks in different calls fail
 * instead of pairing up. */
int mkx_op_prepare(MKX_Comm c, const mkx_op_class *cls, mkx_variant variant,
                   void *args, int pre_rc, int captured, mkx_prepared *p);
/* MKX_Start of a plan on the host path (its own or staged): before any
 * exchange of the run, the ranks check that they start the same plan at
 * the same point of their calls, with a record of the agreement's size,
 * so that ranks in different calls get MKX_ERR_SHAPE_MISMATCH naming both
 * instead of pairing their transfers up.  The GPU paths exchange nothing
 * on the host: there the prologue's start records (kernels/fused/fused.h)
 * carry mkx_run_ident. */
int mkx_op_start_check(MKX_Comm c, const mkx_prepared *p, int captured);
/* What a run of p is, in 32 bits the same on every rank: the operation
 * (bits 28-31), plan or plain call (bit 27) and the call count that
 * prepared it (bits 0-26), so that runs of different plans or calls differ
 * (but for call counts 2^27 apart). */
unsigned mkx_run_ident(const mkx_prepared *p);
/* "the MKX_Allgather_gemm plan made by call 12", "a plain
 * MKX_Gemm_allreduce call (call 7)". */
void mkx_run_ident_text(unsigned ident, char *buf, size_t len);
/* Run a prepared operation (no collective checks); notes the path it took
 * in p->ran and c->last_path. */
int mkx_op_execute(MKX_Comm c, mkx_prepared *p, void *args, MKX_Stream stream);
void mkx_prepared_free(MKX_Comm c, mkx_prepared *p);

/* prepare + execute + free: a plain (non-persistent) call. */
int mkx_op_call(MKX_Comm c, const mkx_op_class *cls, void *args,
                MKX_Stream stream);

/* A persistent request for `cls` with these arguments (MKX_*_init). */
int mkx_plan_create(MKX_Comm c, const mkx_op_class *cls, const void *args,
                    MPI_Info info, MKX_Request *request);

#endif
