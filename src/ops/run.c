/* The steps every operation goes through: local checks, one agreement
 * exchange (so that a bad argument on one rank becomes an error on every
 * rank instead of a hang), path choice, and execution on the host, on the
 * GPU, or staged through the host. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"
#include "ops/op.h"
#include "ops/path.h"

/* One rank's contribution to the agreement exchange: which call it is in
 * (operation, variant, its count of calls on the communicator), its
 * verdict on its own arguments, and the values that must agree. */
typedef struct agree_record {
  int64_t op, variant, call;
  int64_t rc, path;
  int64_t plan;     /* MKX_Start: the plan's id (mkx_prepared.id) */
  int64_t captured; /* its stream is being captured into a CUDA graph */
  mkx_signature s;
} agree_record;

static const char *variant_text(int64_t v) {
  return v == MKX_VARIANT_INIT    ? "_init"
         : v == MKX_VARIANT_START ? " (MKX_Start)"
                                  : "";
}

static const char *op_name(int64_t kind) {
#define MKX_OP_CLASS_REF(k, name) &mkx_op_##name,
  static const mkx_op_class *const all[MKX_OP_COUNT] = {
      MKX_OPERATIONS(MKX_OP_CLASS_REF)};
#undef MKX_OP_CLASS_REF
  return kind >= 0 && kind < MKX_OP_COUNT && all[kind]->kind == kind
             ? all[kind]->name
             : "an unknown operation";
}

#define IDENT_CALL_BITS 27
_Static_assert(MKX_OP_COUNT <= 16, "mkx_run_ident: 4 bits of operation");

unsigned mkx_run_ident(const mkx_prepared *p) {
  return (unsigned)p->cls->kind << (IDENT_CALL_BITS + 1) |
         (unsigned)p->plan << IDENT_CALL_BITS |
         ((unsigned)p->id & ((1u << IDENT_CALL_BITS) - 1));
}

void mkx_run_ident_text(unsigned ident, char *buf, size_t len) {
  const char *op = op_name(ident >> (IDENT_CALL_BITS + 1));
  const unsigned call = ident & ((1u << IDENT_CALL_BITS) - 1);
  if (ident >> IDENT_CALL_BITS & 1)
    snprintf(buf, len, "the %s plan made by call %u", op, call);
  else
    snprintf(buf, len, "a plain %s call (call %u)", op, call);
}

/* Ranks in different calls: the operation or the entry point differ, or
 * a rank missed a call (then the communicator stays out of step: it is
 * broken).  Checked before anything else of the records is read. */
static int other_call(MKX_Comm c, const agree_record *all) {
  const agree_record *me = &all[c->rank];
  for (int q = 0; q < c->size; q++) {
    const agree_record *o = &all[q];
    if (o->op != me->op || o->variant != me->variant)
      return mkx_error(MKX_ERR_SHAPE_MISMATCH,
                       "%s%s on rank %d but %s%s on "
                       "rank %d: every rank must make the same call",
                       op_name(me->op), variant_text(me->variant), c->rank,
                       op_name(o->op), variant_text(o->variant), q);
    if (o->call != me->call)
      return mkx_comm_break(
          c, mkx_error(MKX_ERR_SHAPE_MISMATCH,
                       "%s: call "
                       "%lld on the communicator on rank %d but call "
                       "%lld on rank %d: a rank missed a call (one that "
                       "failed before reaching the other ranks, such as "
                       "a NULL communicator)",
                       op_name(me->op), (long long)me->call, c->rank,
                       (long long)o->call, q));
  }
  return MKX_SUCCESS;
}

/* An agreed value as the user wrote it: the op's own text, a datatype's,
 * order's or transposition's name, else the number. */
static void sig_text(const mkx_op_class *cls, int i, int64_t v, char *buf,
                     size_t len) {
  static const char *const types[] = {"?",           "MKX_BF16", "MKX_FP16",
                                      "MKX_FP32",    "MKX_FP64", "MKX_FP8_E4M3",
                                      "MKX_FP8_E5M2"};
  const char *name = cls->sig_names[i];
  if (cls->sig_text && cls->sig_text(i, v, buf, len)) return;
  if ((!strcmp(name, "dtype") || !strcmp(name, "ctype") ||
       !strcmp(name, "ytype") || !strcmp(name, "otype")) &&
      v >= MKX_BF16 && v <= MKX_FP8_E5M2)
    snprintf(buf, len, "%s", types[v]);
  else if (!strcmp(name, "order") && (v == MKX_ROW_MAJOR || v == MKX_COL_MAJOR))
    snprintf(buf, len, "%s",
             v == MKX_ROW_MAJOR ? "MKX_ROW_MAJOR" : "MKX_COL_MAJOR");
  else if (!strcmp(name, "transw") && (v == MKX_NO_TRANS || v == MKX_TRANS))
    snprintf(buf, len, "%s", v == MKX_TRANS ? "MKX_TRANS" : "MKX_NO_TRANS");
  else
    snprintf(buf, len, "%lld", (long long)v);
}

/* A captured call's kernels meet the peers' only when its graph is
 * launched, an uncaptured one's at once: they would never meet. */
static int captured_mismatch(MKX_Comm c, const char *fn,
                             const agree_record *all, int q) {
  const int r = all[c->rank].captured ? c->rank : q,
            o = all[c->rank].captured ? q : c->rank;
  return mkx_error(MKX_ERR_SHAPE_MISMATCH,
                   "%s: the stream is being captured into a CUDA graph on "
                   "rank %d but not on rank %d: capture the call on every "
                   "rank or on none",
                   fn, r, o);
}

static int find_mismatch(MKX_Comm c, const mkx_op_class *cls,
                         const agree_record *all) {
  const agree_record *me = &all[c->rank];
  for (int q = 0; q < c->size; q++) {
    if (all[q].path != me->path)
      return mkx_error(MKX_ERR_SHAPE_MISMATCH,
                       "%s: buffers are %s memory on rank %d but %s memory "
                       "on rank %d",
                       cls->name, me->path ? "device" : "host", c->rank,
                       all[q].path ? "device" : "host", q);
    if (all[q].captured != me->captured)
      return captured_mismatch(c, cls->name, all, q);
    for (int i = 0; cls->sig_names[i]; i++)
      if (all[q].s.sig[i] != me->s.sig[i]) {
        char mine[48], other[48];
        sig_text(cls, i, me->s.sig[i], mine, sizeof mine);
        sig_text(cls, i, all[q].s.sig[i], other, sizeof other);
        return mkx_error(MKX_ERR_SHAPE_MISMATCH,
                         "%s: %s = %s on rank %d but %s on rank %d", cls->name,
                         cls->sig_names[i], mine, c->rank, other, q);
      }
  }
  return MKX_SUCCESS;
}

static int first_failure(MKX_Comm c, const mkx_op_class *cls,
                         const agree_record *all) {
  for (int q = 0; q < c->size; q++)
    if (all[q].rc != MKX_SUCCESS)
      return mkx_error(MKX_ERR_PEER,
                       "%s: rank %d rejected its arguments "
                       "(%s)",
                       cls->name, q, MKX_Error_string((int)all[q].rc));
  return MKX_SUCCESS;
}

/* After totals are known: rank q's late values must fit them.  Every rank
 * runs the same checks on the same data, so all reach the same verdict. */
static int post_checks(MKX_Comm c, const mkx_op_class *cls,
                       const agree_record *all, const mkx_agreed *g) {
  if (cls->post_check == NULL) return MKX_SUCCESS;
  int rc = cls->post_check(cls, all[c->rank].s.late, g, c->rank);
  if (rc != MKX_SUCCESS) return rc;
  for (int q = 0; q < c->size; q++)
    if (cls->post_check(cls, all[q].s.late, g, q) != MKX_SUCCESS)
      return mkx_error(MKX_ERR_PEER, "%s: rank %d rejected its arguments",
                       cls->name, q);
  return MKX_SUCCESS;
}

/* "MKX_Allgather_gemm (fused overlapped) k=4096 dtype=MKX_BF16 ...
 * total=8192": the trace range of p's runs, made once. */
static void label_of(mkx_prepared *p, const mkx_signature *s) {
  const mkx_op_class *cls = p->cls;
  char *buf = p->label;
  const size_t len = sizeof p->label;
  int n0 = snprintf(buf, len, "%s (%s)", cls->name,
                    mkx_path_name(mkx_prepared_path(p)));
  size_t at = n0 > 0 ? (size_t)n0 : 0;
  for (int i = 0; cls->sig_names[i] && at + 1 < len; i++) {
    char v[48];
    /* a call without scales: no layout in its range */
    if ((!strcmp(cls->sig_names[i], "scales->layout") ||
         !strcmp(cls->sig_names[i], "scales2->layout")) &&
        s->sig[i] == MKX_SCALE_NONE)
      continue;
    sig_text(cls, i, s->sig[i], v, sizeof v);
    const int n = snprintf(buf + at, len - at, " %s=%s", cls->sig_names[i], v);
    if (n < 0) return;
    at += (size_t)n;
  }
  if (at + 1 < len)
    snprintf(buf + at, len - at, " total=%lld", (long long)p->g.total);
}

static int exchange(MKX_Comm c, const mkx_op_class *cls, agree_record *mine,
                    mkx_agreed *g) {
  agree_record *all = malloc(sizeof *all * (size_t)c->size);
  g->local = malloc(sizeof *g->local * (size_t)c->size);
  if (!all || !g->local) {
    free(all);
    return mkx_error(MKX_ERR_NOMEM, "%s: agreement buffers", cls->name);
  }
  int rc =
      mkx_comm_exchange(c, mine, all, sizeof *mine, "the call's agreement");
  if (rc != MKX_SUCCESS) {
    free(all);
    return rc;
  }
  if (rc == MKX_SUCCESS) rc = other_call(c, all);
  if (rc == MKX_SUCCESS && mine->rc != MKX_SUCCESS) rc = (int)mine->rc;
  if (rc == MKX_SUCCESS) rc = first_failure(c, cls, all);
  if (rc == MKX_SUCCESS) rc = find_mismatch(c, cls, all);
  g->total = 0;
  for (int q = 0; rc == MKX_SUCCESS && q < c->size; q++) {
    g->local[q] = all[q].s.local;
    g->total += all[q].s.local;
  }
  if (rc == MKX_SUCCESS) rc = post_checks(c, cls, all, g);
  g->captured = (int)mine->captured;
  free(all);
  return rc;
}

/* All of a rank's buffers must be of one kind; the kind picks the path. */
static int buffer_kind(MKX_Comm c, const mkx_op_class *cls, void *args,
                       int *device) {
  mkx_buffer bufs[MKX_BUF_MAX] = {{0}};
  int n = cls->buffers(c, args, NULL, bufs);
  const char *first = NULL;
  *device = -1;
  for (int i = 0; i < n; i++) {
    if (*bufs[i].field == NULL) continue;
    int kind = mkx_pointer_kind(*bufs[i].field);
    if (*device < 0) {
      *device = kind;
      first = bufs[i].name;
    } else if (kind != *device) {
      return mkx_error(MKX_ERR_INVALID_ARG,
                       "%s: %s is %s memory but %s is %s memory (all "
                       "buffers of a call must be one or the other)",
                       cls->name, first, *device ? "device" : "host",
                       bufs[i].name, kind ? "device" : "host");
    }
  }
  if (*device < 0) *device = MKX_MEM_HOST;
  if (*device == MKX_MEM_DEVICE && c->device < 0)
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "%s: device buffers given but the "
                     "communicator runs the host path",
                     cls->name);
  return MKX_SUCCESS;
}

/* Every rank learns whether every rank can take the fused path (it is
 * taken by all or by none, since its set-up is collective) and the bits of
 * the ranks' gpu_local hooks, in one agreement. */
static int all_can(MKX_Comm c, int can, unsigned local, int *all,
                   mkx_agreed *g) {
  uint64_t v = 0;
  const uint64_t mine = (uint64_t)(!can) | (uint64_t)local << 1;
  MKX_TRY(mkx_comm_agree_u64(c, mine, MKX_AGREE_OR, &v, "path agreement"));
  *all = !(v & 1);
  g->gpu_any = (unsigned)(v >> 1);
  g->gpu_adapt = (g->gpu_any & MKX_GPU_LOCAL_ADAPT) != 0;
  return MKX_SUCCESS;
}

/* A path that does host work that waits, on a stream being captured:
 * refused before the stream is touched, so that the capture stays valid.
 * The path is agreed, and so is the capture for a call, so every rank
 * refuses alike. */
static int refuse_capture(const char *fn, mkx_path path) {
  return mkx_error(MKX_ERR_UNSUPPORTED,
                   "%s: its path (%s) cannot be captured in a CUDA graph "
                   "(it does host work that waits; MKX_Request_get_path "
                   "says which can): run it outside the capture",
                   fn, mkx_path_name(path));
}

/* The fused GPU path: every rank can take one (agreed), then the
 * operation's choice among its paths, made alike on every rank.  A
 * captured call's plan makes nothing new (the workspace pool hands out
 * only what earlier calls made, c->capturing) and holds what it takes for
 * the graph. */
static int plan_gpu(MKX_Comm c, const mkx_op_class *cls, void *args,
                    mkx_prepared *p) {
  mkx_path_choice ch;
  memset(&ch, 0, sizeof ch);
  MKX_TRY(cls->gpu_choose(c, args, &p->g, &ch));
  mkx_log(MKX_LOG_INFO, "%s: %s path (%s)", cls->name,
          mkx_path_name(ch.ops->path), ch.why);
  if (p->g.captured && !mkx_path_capturable_on(c, ch.ops->path))
    return refuse_capture(cls->name, ch.ops->path);
  c->capturing = p->g.captured;
  const int mode = mkx_capture_relax(p->g.captured);
  const int rc = ch.ops->plan(c, ch.op, args, &p->g, &p->gpu);
  mkx_capture_restore(mode);
  c->capturing = 0;
  MKX_TRY(rc);
  p->gpu_ops = ch.ops;
  return MKX_SUCCESS;
}

static int choose_gpu_path(MKX_Comm c, const mkx_op_class *cls, void *args,
                           mkx_prepared *p) {
  char why[160] = "option fused=off";
  int can = 0, all = 0;
  unsigned local = 0;
  if (cls->gpu_check == NULL)
    snprintf(why, sizeof why, "no fused GPU kernel for this operation yet");
  else if (c->opt.fused != MKX_FUSED_OFF && !mkx_device_hopper(c->device))
    snprintf(why, sizeof why,
             "the GPU is not sm_90: the fused kernels are Hopper code");
  else if (c->opt.fused != MKX_FUSED_OFF) {
    can = cls->gpu_check(c, args, &p->g) == MKX_SUCCESS;
    if (can && cls->gpu_local) local = cls->gpu_local(c, args, &p->g);
    if (!can) snprintf(why, sizeof why, "%s", MKX_Get_last_error());
    mkx_error_clear();
  }
  if (cls->gpu_check) MKX_TRY(all_can(c, can, local, &all, &p->g));
  if (all) return plan_gpu(c, cls, args, p);
  if (p->g.captured) return refuse_capture(cls->name, MKX_PATH_STAGED);
  p->staged = 1;
  mkx_log(MKX_LOG_INFO, "%s: %s path (%s)", cls->name,
          mkx_path_name(MKX_PATH_STAGED),
          can ? "another rank cannot take "
                "the fused path"
              : why);
  return MKX_SUCCESS;
}

int mkx_op_prepare(MKX_Comm c, const mkx_op_class *cls, mkx_variant variant,
                   void *args, int pre_rc, int captured, mkx_prepared *p) {
  agree_record mine;
  int device = MKX_MEM_HOST;
  memset(&mine, 0, sizeof mine);
  memset(p, 0, sizeof *p);
  p->cls = cls;
  p->ran = MKX_PATH_COUNT;
  MKX_TRY(mkx_comm_check(c));
  mine.op = cls->kind;
  mine.variant = variant;
  mine.call = c->calls++;
  p->id = mine.call;
  p->plan = variant == MKX_VARIANT_INIT;
  mine.rc = pre_rc ? pre_rc : cls->check(c, args, &mine.s);
  if (mine.rc == MKX_SUCCESS) mine.rc = buffer_kind(c, cls, args, &device);
  mine.path = device;
  mine.captured = captured;
  int rc = exchange(c, cls, &mine, &p->g);
  if (rc == MKX_SUCCESS && device != MKX_MEM_DEVICE && captured)
    rc = refuse_capture(cls->name, MKX_PATH_HOST);
  if (rc == MKX_SUCCESS && device == MKX_MEM_DEVICE)
    rc = choose_gpu_path(c, cls, args, p);
  if (rc != MKX_SUCCESS) {
    mkx_prepared_free(c, p);
    return rc;
  }
  label_of(p, &mine.s);
  return MKX_SUCCESS;
}

int mkx_op_start_check(MKX_Comm c, const mkx_prepared *p, int captured) {
  agree_record mine, *all = malloc(sizeof mine * (size_t)c->size);
  if (!all) return mkx_error(MKX_ERR_NOMEM, "MKX_Start: agreement buffers");
  memset(&mine, 0, sizeof mine);
  mine.op = p->cls->kind;
  mine.variant = MKX_VARIANT_START;
  mine.call = c->calls++;
  mine.plan = p->id;
  mine.captured = captured;
  int rc =
      mkx_comm_exchange(c, &mine, all, sizeof mine, "the call's agreement");
  if (rc == MKX_SUCCESS) rc = other_call(c, all);
  for (int q = 0; rc == MKX_SUCCESS && q < c->size; q++)
    if (all[q].captured != captured)
      rc = captured_mismatch(c, "MKX_Start", all, q);
  for (int q = 0; rc == MKX_SUCCESS && q < c->size; q++)
    if (all[q].plan != mine.plan)
      rc = mkx_error(MKX_ERR_SHAPE_MISMATCH,
                     "MKX_Start: rank %d starts the %s plan made by its call "
                     "%lld, rank %d the one made by call %lld: every rank "
                     "must start the same plan",
                     c->rank, p->cls->name, (long long)mine.plan, q,
                     (long long)all[q].plan);
  free(all);
  return rc;
}

void mkx_prepared_free(MKX_Comm c, mkx_prepared *p) {
  if (p->gpu && p->gpu_ops) p->gpu_ops->free(c, p->gpu);
  p->gpu = NULL;
  p->gpu_ops = NULL;
  free(p->g.local);
  p->g.local = NULL;
}

static void free_staging(void **host, int n) {
  for (int i = 0; i < n; i++) free(host[i]);
}

/* Device buffers are copied whole to the host (outputs too, so that
 * padding between rows survives the copy back), the host path runs on the
 * copies, and outputs are copied back. */
static int run_staged(MKX_Comm c, const mkx_prepared *p, void *args,
                      MKX_Stream stream) {
  mkx_buffer bufs[MKX_BUF_MAX] = {{0}};
  void *host[MKX_BUF_MAX] = {0}, *dev[MKX_BUF_MAX] = {0};
  char *copy = malloc(p->cls->args_size);
  if (!copy) return mkx_error(MKX_ERR_NOMEM, "%s: staging", p->cls->name);
  memcpy(copy, args, p->cls->args_size);
  int n = p->cls->buffers(c, copy, &p->g, bufs);
  int rc = mkx_device_set(c->device);
  if (rc == MKX_SUCCESS) rc = mkx_stream_sync(stream);
  for (int i = 0; rc == MKX_SUCCESS && i < n; i++) {
    dev[i] = *bufs[i].field;
    if (dev[i] == NULL || bufs[i].bytes == 0) continue;
    host[i] = malloc(bufs[i].bytes);
    if (host[i] == NULL)
      rc = mkx_error(MKX_ERR_NOMEM, "%s: staging %s (%zu bytes)", p->cls->name,
                     bufs[i].name, bufs[i].bytes);
    else
      rc = mkx_device_copy(host[i], dev[i], bufs[i].bytes, 0, stream);
    *bufs[i].field = host[i];
  }
  if (rc == MKX_SUCCESS)
    rc = mkx_comm_exchanged(c, p->cls->host(c, copy, &p->g));
  int copy_back = rc == MKX_SUCCESS || rc == MKX_ERR_TRUNCATE;
  for (int i = 0; copy_back && i < n; i++) {
    if (!(bufs[i].dir & MKX_BUF_OUT) || host[i] == NULL) continue;
    int crc = mkx_device_copy(dev[i], host[i], bufs[i].bytes, 1, stream);
    if (crc != MKX_SUCCESS) rc = crc, copy_back = 0;
  }
  free_staging(host, n);
  free(copy);
  return rc;
}

mkx_path mkx_prepared_path(const mkx_prepared *p) {
  if (p->ran != MKX_PATH_COUNT) return p->ran;
  return p->gpu_ops  ? p->gpu_ops->path
         : p->staged ? MKX_PATH_STAGED
                     : MKX_PATH_HOST;
}

static int run(MKX_Comm c, const mkx_prepared *p, void *args,
               MKX_Stream stream) {
  if (p->gpu_ops) {
    void *run = stream;
    MKX_TRY(mkx_device_set(c->device));
    /* the work between fork and join runs in the rank's SM partition;
     * joined back whatever start enqueued before it failed */
    MKX_TRY(mkx_comm_fail(c, mkx_comm_part_fork(c, stream, &run)));
    int rc = p->gpu_ops->start(c, p->gpu, args, run);
    const int jrc = mkx_comm_part_join(c, stream, run);
    return mkx_comm_fail(c, rc != MKX_SUCCESS ? rc : jrc);
  }
  if (p->staged) {
    mkx_path_count(MKX_PATH_STAGED);
    return run_staged(c, p, args, stream);
  }
  mkx_path_count(MKX_PATH_HOST);
  return mkx_comm_exchanged(c, p->cls->host(c, args, &p->g));
}

int mkx_op_execute(MKX_Comm c, mkx_prepared *p, void *args, MKX_Stream stream) {
  MKX_TRY(mkx_comm_check(c));
  /* before the stream is touched, so that the caller's capture stays
   * valid; the path is agreed, so every rank that captures says so */
  const mkx_path path = mkx_prepared_path(p);
  if (mkx_stream_capturing(stream) && !mkx_path_capturable_on(c, path))
    return refuse_capture(p->cls->name, path);
  mkx_trace_push(p->label);
  c->run_ident = mkx_run_ident(p);
  mkx_path_track_begin();
  const int rc = run(c, p, args, stream);
  const mkx_path ran = mkx_path_track_end();
  mkx_trace_pop();
  if (ran != MKX_PATH_COUNT) p->ran = ran, c->last_path = (int)ran;
  return rc;
}

int mkx_op_call(MKX_Comm c, const mkx_op_class *cls, void *args,
                MKX_Stream stream) {
  mkx_prepared p;
  mkx_error_clear();
  MKX_TRY(mkx_op_prepare(c, cls, MKX_VARIANT_CALL, args, MKX_SUCCESS,
                         mkx_stream_capturing(stream), &p));
  int rc = mkx_op_execute(c, &p, args, stream);
  mkx_prepared_free(c, &p);
  return rc;
}
