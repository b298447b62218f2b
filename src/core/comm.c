/* Communicators: creation over MPI, placement, device choice, queries. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "boot/oob_mpi.h"
#include "core/comm.h"
#include "core/comm_net.h"
#include "core/device.h"
#include "core/error.h"
#include "core/handles.h"
#include "core/log.h"

int mkx_comm_live(MKX_Comm c) { return mkx_handle_is(c, MKX_HANDLE_COMM); }

int mkx_comm_check(MKX_Comm c) {
  if (!mkx_comm_live(c))
    return mkx_error(MKX_ERR_INVALID_COMM, "comm: NULL or freed communicator");
  if (c->broken)
    return mkx_error(MKX_ERR_INVALID_COMM,
                     "comm: unusable after an earlier failure (%s); free it "
                     "and create another",
                     c->broken_why);
  return MKX_SUCCESS;
}

/* The tag of a tell on MKX's own duplicate of the user's communicator,
 * where nothing else is point-to-point. */
#define TELL_TAG 7321

/* A rank that gave up waiting in a collective exchange tells the others,
 * so that a late rank whose exchange then completes (with what this rank
 * had sent) voids its result instead of returning success. */
static void tell_peers(MKX_Comm c) {
  static const int gave_up = 1;
  int me = 0, size = 0;
  if (c->mpi == MPI_COMM_NULL || c->told) return;
  c->told = 1;
  if (MPI_Comm_rank(c->mpi, &me) != MPI_SUCCESS ||
      MPI_Comm_size(c->mpi, &size) != MPI_SUCCESS)
    return;
  for (int q = 0; q < size; q++) {
    MPI_Request r;
    if (q != me &&
        MPI_Isend(&gave_up, 1, MPI_INT, q, TELL_TAG, c->mpi, &r) == MPI_SUCCESS)
      MPI_Request_free(&r); /* a send from static memory: never waited */
  }
}

int mkx_comm_fail(MKX_Comm c, int rc) {
  if (rc != MKX_ERR_TIMEOUT && rc != MKX_ERR_MPI && rc != MKX_ERR_NET)
    return rc;
  if (rc == MKX_ERR_TIMEOUT) tell_peers(c);
  return mkx_comm_break(c, rc);
}

int mkx_comm_exchanged(MKX_Comm c, int rc) {
  int told = 0, gave_up = 0;
  MPI_Status st;
  if (rc != MKX_SUCCESS) return mkx_comm_fail(c, rc);
  if (c->mpi == MPI_COMM_NULL ||
      MPI_Iprobe(MPI_ANY_SOURCE, TELL_TAG, c->mpi, &told, &st) != MPI_SUCCESS ||
      !told)
    return MKX_SUCCESS;
  MPI_Recv(&gave_up, 1, MPI_INT, st.MPI_SOURCE, TELL_TAG, c->mpi,
           MPI_STATUS_IGNORE);
  c->told = 1; /* the others know: they sent it */
  return mkx_comm_break(
      c, mkx_error(MKX_ERR_PEER,
                   "rank %d gave up waiting "
                   "for this rank (option timeout_ms) in an exchange "
                   "of this or an earlier call, so this call's result "
                   "is void",
                   st.MPI_SOURCE));
}

int mkx_comm_break(MKX_Comm c, int rc) {
  if (rc == MKX_SUCCESS) return rc;
  /* The first failure is the cause; later ones are its echoes. */
  const char *msg = MKX_Get_last_error();
  if (!c->broken)
    snprintf(c->broken_why, sizeof c->broken_why, "%s%s%s",
             MKX_Error_string(rc), *msg ? ": " : "", msg);
  c->broken = 1;
  return rc;
}

/* What identifies this rank's node: the host name, and Slurm's node id
 * where srun set one (containers may all share one host name; several
 * slurmd on one host are separate nodes to Slurm). */
static void host_name(char *buf, size_t len) {
  char host[MKX_HOSTNAME_MAX] = "unknown-host";
  const char *id = getenv("SLURM_NODEID");
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
  host[sizeof host - 1] = '\0';
  if (id && *id)
    snprintf(buf, len, "%.40s#slurm%.16s", host, id);
  else
    snprintf(buf, len, "%s", host);
}

static void comm_release(MKX_Comm c) {
  if (c->node_comm) comm_release(c->node_comm);
  if (c->oob.ctx) mkx_comm_net_close(c);
  while (c->hooks) {
    mkx_comm_hook *h = c->hooks;
    c->hooks = h->next;
    if (c->oob.ctx && h->release) h->release(c);
    free(h);
  }
  mkx_placement_free(&c->place);
  mkx_oob_mpi_fini(&c->oob);
  if (c->node_mpi != MPI_COMM_NULL) MPI_Comm_free(&c->node_mpi);
  if (c->mpi != MPI_COMM_NULL) MPI_Comm_free(&c->mpi);
  /* after the workspaces (freed with c->mpi), whose streams are on it */
  mkx_part_lane_free(&c->lane);
  mkx_sm_part_put(c->part);
  mkx_mpi_reap(); /* buffers of operations a late rank has completed */
  mkx_handle_remove(c);
  free(c);
}

/* Every rank learns whether every other rank got through a local step: a
 * rank that failed must not leave the others waiting in the next
 * collective, so local steps are separated by this agreement. */
static int agree_step(MKX_Comm c, int rc) {
  /* Options may have failed to load: fall back to the default bound. */
  int64_t bound = c->opt.timeout_ms > 0 ? c->opt.timeout_ms : 300000;
  int size = 0, bad = -1, bad_rc = MKX_SUCCESS;
  int mrc = mkx_mpi_check(MPI_Comm_size(c->mpi, &size), "MPI_Comm_size");
  int *all = mrc ? NULL : malloc(sizeof *all * (size_t)size);
  if (!mrc && !all) mrc = mkx_error(MKX_ERR_NOMEM, "MKX_Comm_create agreement");
  if (!mrc)
    mrc = mkx_mpi_allgather(&rc, all, sizeof rc, c->mpi, bound,
                            "MKX_Comm_create agreement");
  for (int q = 0; !mrc && q < size && bad < 0; q++)
    if (all[q] != MKX_SUCCESS) bad = q, bad_rc = all[q];
  free(all);
  if (mrc) return rc ? rc : mrc;
  if (rc == MKX_SUCCESS && bad >= 0)
    return mkx_error(MKX_ERR_PEER, "MKX_Comm_create failed on rank %d (%s)",
                     bad, MKX_Error_string(bad_rc));
  return rc;
}

/* FNV-1a of an option's value as text. */
static uint64_t value_hash(const char *v) {
  uint64_t h = 1469598103934665603ull;
  for (; *v; v++) h = (h ^ (unsigned char)*v) * 1099511628211ull;
  return h;
}

/* The options whose rows say they must agree (they decide a collective
 * path or protocol: a rank on another value would wait in a collective
 * the others never join) are the same on every rank: one hash of each
 * value from every rank.  If any two ranks differ every rank finds one
 * that differs from itself, so all fail alike, naming the option. */
static int agree_options(MKX_Comm c) {
  enum { MAX = 64 };
  const mkx_option_desc *rows[MAX];
  uint64_t mine[MAX];
  char buf[MKX_OPT_STRING_MAX + 32];
  int n = 0, size = 0;
  for (size_t i = 0; n < MAX; i++) {
    const mkx_option_desc *d = mkx_option_at(i);
    if (!d) break;
    if (!d->agree) continue;
    rows[n] = d;
    mine[n++] = value_hash(mkx_option_format(d, &c->opt, buf, sizeof buf));
  }
  MKX_TRY(mkx_mpi_check(MPI_Comm_size(c->mpi, &size), "MPI_Comm_size"));
  if (n == 0) return MKX_SUCCESS;
  uint64_t *all = malloc(sizeof *all * (size_t)n * (size_t)size);
  if (!all) return mkx_error(MKX_ERR_NOMEM, "MKX_Comm_create: options");
  int rank = 0,
      rc = mkx_mpi_check(MPI_Comm_rank(c->mpi, &rank), "MPI_Comm_rank");
  if (!rc)
    rc = mkx_mpi_allgather(mine, all, sizeof *mine * (size_t)n, c->mpi,
                           c->opt.timeout_ms, "MKX_Comm_create: options");
  for (int q = 0; !rc && q < size; q++)
    for (int j = 0; !rc && j < n; j++)
      if (all[(size_t)q * (size_t)n + (size_t)j] != mine[j])
        rc = mkx_error(MKX_ERR_INVALID_ARG,
                       "MKX_Comm_create: option %s must "
                       "be the same on every rank: %s on rank %d, another "
                       "value on rank %d",
                       rows[j]->name,
                       mkx_option_format(rows[j], &c->opt, buf, sizeof buf),
                       rank, q);
  free(all);
  return rc;
}

static int choose_device(MKX_Comm c) {
  char why[128];
  MKX_TRY(mkx_device_choose(&c->opt, c->place.host_local_rank, &c->device, why,
                            sizeof why));
  if (c->device >= 0) MKX_TRY(mkx_device_set(c->device));
  mkx_log(MKX_LOG_INFO, "node %d/%d local rank %d/%d, device %d: %s",
          c->place.node, c->place.num_nodes, c->place.local_rank,
          c->place.local_size, c->device, why);
  return MKX_SUCCESS;
}

/* The duplicate is made non-blocking and waited for with a bound: a rank
 * that never calls makes the others fail with MKX_ERR_TIMEOUT. */
static int dup_bounded(MKX_Comm c, MPI_Comm user) {
  MPI_Request req;
  int64_t bound = c->opt.timeout_ms > 0 ? c->opt.timeout_ms : 300000;
  /* MPI writes the new handle when the duplicate completes, maybe after a
   * timeout: into memory of its own, not into c. */
  MPI_Comm *dup = malloc(sizeof *dup);
  if (!dup) return mkx_error(MKX_ERR_NOMEM, "MKX_Comm_create");
  int rc = mkx_mpi_dup_settle(user, bound);
  if (rc != MKX_SUCCESS) {
    free(dup);
    return rc;
  }
  rc = mkx_mpi_check(MPI_Comm_idup(user, dup, &req), "MPI_Comm_idup");
  if (rc != MKX_SUCCESS) {
    free(dup);
    return rc;
  }
  rc = mkx_mpi_wait(&req, bound, "MKX_Comm_create: duplicating comm");
  if (rc == MKX_ERR_TIMEOUT) {
    mkx_mpi_abandon_dup(&req, dup, user);
    return rc;
  }
  if (rc == MKX_SUCCESS) c->mpi = *dup;
  free(dup);
  /* errors on MKX's own communicator come back as codes, never abort */
  if (rc == MKX_SUCCESS)
    rc = mkx_mpi_check(MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN),
                       "MPI_Comm_set_errhandler");
  return rc;
}

/* local_rc: a failure of this rank's own arguments, agreed on at the first
 * step so that every rank fails alike. */
static int comm_setup(MKX_Comm c, MPI_Comm user, MPI_Info info, int local_rc) {
  char host[MKX_HOSTNAME_MAX];
  int rc = mkx_comm_options_load(&c->opt, info);
  if (rc == MKX_SUCCESS) mkx_log_set_level(c->opt.log_level);
  MKX_TRY(dup_bounded(c, user));
  MKX_TRY(agree_step(c, local_rc ? local_rc : rc));
  MKX_TRY(agree_options(c));
  MKX_TRY(mkx_oob_mpi_init(&c->oob, c->mpi));
  c->rank = c->oob.rank;
  c->size = c->oob.size;
  mkx_log_set_rank(c->rank);
  host_name(host, sizeof host);
  MKX_TRY(mkx_boot_placement(&c->oob, host, c->opt.virtual_node_size,
                             c->opt.timeout_ms, &c->place));
  MKX_TRY(agree_step(c, choose_device(c)));
  MKX_TRY(mkx_comm_map_topology(c));
  return agree_step(c, mkx_comm_net_open(c));
}

int MKX_Comm_create(MPI_Comm comm, MPI_Info info, MKX_Comm *newcomm) {
  int local_rc = MKX_SUCCESS;
  mkx_error_clear();
  if (newcomm) *newcomm = NULL;
  /* A rank outside every communicator cannot take part at all. */
  if (comm == MPI_COMM_NULL)
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "MKX_Comm_create: comm is MPI_COMM_NULL");
  if (newcomm == NULL)
    local_rc = mkx_error(MKX_ERR_NULL_POINTER,
                         "MKX_Comm_create: newcomm "
                         "is NULL");
  else
    *newcomm = NULL;
  MKX_Comm c = calloc(1, sizeof *c);
  if (c == NULL) return mkx_error(MKX_ERR_NOMEM, "MKX_Comm_create");
  c->mpi = MPI_COMM_NULL;
  c->node_mpi = MPI_COMM_NULL;
  c->device = -1;
  c->last_path = -1;
  static atomic_uint_least64_t serials = 1;
  c->serial = atomic_fetch_add(&serials, 1);
  /* known from the start, so that set-up's own calls take it as live; a
   * failure to note it is agreed like a bad argument */
  if (local_rc == MKX_SUCCESS) local_rc = mkx_handle_add(c, MKX_HANDLE_COMM);
  int rc = comm_setup(c, comm, info, local_rc);
  if (rc != MKX_SUCCESS) {
    /* the cause, not what the clean-up met after it */
    char why[512];
    snprintf(why, sizeof why, "%s", MKX_Get_last_error());
    comm_release(c);
    return mkx_error(rc, "%s", why);
  }
  *newcomm = c;
  return MKX_SUCCESS;
}

int MKX_Comm_free(MKX_Comm *comm) {
  mkx_error_clear();
  if (comm == NULL || !mkx_comm_live(*comm))
    return mkx_error(MKX_ERR_INVALID_COMM,
                     "MKX_Comm_free: NULL or freed communicator");
  if ((*comm)->live_requests > 0)
    return mkx_error(MKX_ERR_INVALID_ARG,
                     "MKX_Comm_free: %d persistent request(s) still live; "
                     "MKX_Request_free them first",
                     (*comm)->live_requests);
  comm_release(*comm);
  *comm = NULL;
  return MKX_SUCCESS;
}

int MKX_Comm_get_async_error(MKX_Comm c, int *async_error) {
  mkx_error_clear();
  if (!mkx_comm_live(c))
    return mkx_error(MKX_ERR_INVALID_COMM,
                     "MKX_Comm_get_async_error: NULL "
                     "or freed communicator");
  if (!async_error)
    return mkx_error(MKX_ERR_NULL_POINTER,
                     "MKX_Comm_get_async_error: "
                     "async_error is NULL");
  /* a broken communicator says why (its message) and stays broken */
  *async_error = c->broken ? mkx_comm_check(c) : MKX_SUCCESS;
  for (const mkx_comm_hook *h = c->hooks; h && !*async_error; h = h->next)
    if (h->async_error) *async_error = h->async_error(c);
  return MKX_SUCCESS;
}

int mkx_comm_add_hook(MKX_Comm c, const void *key, void (*release)(MKX_Comm c),
                      int (*async_error)(MKX_Comm c)) {
  for (const mkx_comm_hook *h = c->hooks; h; h = h->next)
    if (h->key == key) return MKX_SUCCESS;
  mkx_comm_hook *h = malloc(sizeof *h);
  if (!h) return mkx_error(MKX_ERR_NOMEM, "communicator hook");
  *h = (mkx_comm_hook){key, release, async_error, c->hooks};
  c->hooks = h;
  return MKX_SUCCESS;
}

/* Queries work on a broken communicator too: they help diagnose it. */
#define COMM_QUERY(fn, expr)                                                   \
  int fn(MKX_Comm c, int *out) {                                               \
    mkx_error_clear();                                                         \
    if (!mkx_comm_live(c))                                                     \
      return mkx_error(MKX_ERR_INVALID_COMM, #fn ": invalid communicator");    \
    if (out == NULL)                                                           \
      return mkx_error(MKX_ERR_NULL_POINTER, #fn ": output pointer is NULL");  \
    *out = (expr);                                                             \
    return MKX_SUCCESS;                                                        \
  }

COMM_QUERY(MKX_Comm_rank, c->rank)
COMM_QUERY(MKX_Comm_size, c->size)
COMM_QUERY(MKX_Comm_node, c->place.node)
COMM_QUERY(MKX_Comm_num_nodes, c->place.num_nodes)
COMM_QUERY(MKX_Comm_local_rank, c->place.local_rank)
COMM_QUERY(MKX_Comm_local_size, c->place.local_size)
COMM_QUERY(MKX_Comm_device, c->device)

int MKX_Block_range(int64_t rows, int nblocks, int b, int64_t *first,
                    int64_t *count) {
  mkx_error_clear();
  if (first == NULL || count == NULL)
    return mkx_error(MKX_ERR_NULL_POINTER,
                     "MKX_Block_range: first or count "
                     "is NULL");
  if (rows < 0 || nblocks <= 0 || b < 0 || b >= nblocks)
    return mkx_error(MKX_ERR_BAD_SIZE,
                     "MKX_Block_range: rows=%lld "
                     "nblocks=%d b=%d",
                     (long long)rows, nblocks, b);
  int64_t base = rows / nblocks, extra = rows % nblocks;
  *count = base + (b < extra);
  *first = b * base + (b < extra ? b : extra);
  return MKX_SUCCESS;
}

size_t MKX_Type_size(MKX_Datatype type) {
  switch (type) {
    case MKX_BF16:
    case MKX_FP16:
      return 2;
    case MKX_FP32:
      return 4;
    case MKX_FP64:
      return 8;
    case MKX_FP8_E4M3:
    case MKX_FP8_E5M2:
      return 1;
  }
  return 0;
}

int MKX_Get_version(int *major, int *minor, int *patch) {
  mkx_error_clear();
  if (!major || !minor || !patch)
    return mkx_error(MKX_ERR_NULL_POINTER, "MKX_Get_version: NULL argument");
  *major = MKX_VERSION_MAJOR;
  *minor = MKX_VERSION_MINOR;
  *patch = MKX_VERSION_PATCH;
  return MKX_SUCCESS;
}
