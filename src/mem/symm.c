/* Symmetric memory through CUDA IPC; see symm.h.  Every entry point does
 * the same collective steps on every rank whatever its cache holds, so a
 * cache hit on one rank never leaves another waiting. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/comm.h"
#include "core/device.h"
#include "core/error.h"
#include "mem/symm.h"

#if HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime.h>
#include "core/cuda_rc.h"
#include <pthread.h>

/* Peer allocations opened in this process, whatever communicator opened
 * them: CUDA lets a process open an IPC handle only once at a time
 * (cudaErrorAlreadyMapped), and two communicators may map the same peer
 * buffer.  Users' buffers (cached) stay open when no registration holds
 * them any more (idle), for the next call on the same buffer.  An idle
 * mapping of a freed buffer blocks the mapping of new memory the peer
 * carves from the same place, whichever communicator made it: idle ones
 * are closed when SYMM_IDLE pile up or when one blocks a new mapping. */
typedef struct ipc_open {
  cudaIpcMemHandle_t handle;
  void *base;
  int refs, cached;
  struct ipc_open *next;
} ipc_open;
static ipc_open *ipc_opens;
static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
#define SYMM_IDLE 16

static int idle_count(void) {
  int n = 0;
  for (const ipc_open *o = ipc_opens; o; o = o->next) n += o->refs == 0;
  return n;
}

/* Close the idle mappings once every kernel of this device that might
 * still reach them is done; where the device cannot be synchronised (say,
 * during a capture) nothing is closed.  Called with ipc_lock held. */
static void close_idle(void) {
  if (cudaDeviceSynchronize() != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  for (ipc_open **p = &ipc_opens; *p;) {
    ipc_open *o = *p;
    if (o->refs > 0) {
      p = &o->next;
      continue;
    }
    MKX_CUDA_RELEASE(cudaIpcCloseMemHandle(o->base));
    *p = o->next;
    free(o);
  }
}

static cudaError_t ipc_open_new(const cudaIpcMemHandle_t *h, int cached,
                                ipc_open **out) {
  ipc_open *o = calloc(1, sizeof *o);
  if (!o) return cudaErrorMemoryAllocation;
  if (cached && idle_count() >= SYMM_IDLE) close_idle();
  cudaError_t e =
      cudaIpcOpenMemHandle(&o->base, *h, cudaIpcMemLazyEnablePeerAccess);
  if (e == cudaErrorAlreadyMapped && idle_count() > 0) {
    (void)cudaGetLastError();
    close_idle();
    e = cudaIpcOpenMemHandle(&o->base, *h, cudaIpcMemLazyEnablePeerAccess);
  }
  if (e != cudaSuccess) {
    free(o);
    return e;
  }
  *o = (ipc_open){*h, o->base, 1, cached, ipc_opens};
  *out = ipc_opens = o;
  return cudaSuccess;
}

/* cached: a user's buffer (kept open while idle). */
static cudaError_t ipc_acquire(const cudaIpcMemHandle_t *h, int cached,
                               void **base) {
  cudaError_t e = cudaSuccess;
  pthread_mutex_lock(&ipc_lock);
  ipc_open *o = ipc_opens;
  while (o && memcmp(&o->handle, h, sizeof *h)) o = o->next;
  if (o) {
    o->refs++;
    o->cached |= cached;
  } else {
    e = ipc_open_new(h, cached, &o);
  }
  if (e == cudaSuccess) *base = o->base;
  pthread_mutex_unlock(&ipc_lock);
  return e;
}

/* delta: +1 takes one more reference to an open mapping, -1 drops one. */
static void ipc_ref(void *base, int delta) {
  pthread_mutex_lock(&ipc_lock);
  for (ipc_open **p = &ipc_opens; *p; p = &(*p)->next)
    if ((*p)->base == base) {
      ipc_open *o = *p;
      o->refs += delta;
      if (o->refs == 0 && !o->cached) {
        MKX_CUDA_RELEASE(cudaIpcCloseMemHandle(o->base));
        *p = o->next;
        free(o);
      }
      break;
    }
  pthread_mutex_unlock(&ipc_lock);
}

static void ipc_release(void *base) { ipc_ref(base, -1); }

/* A peer allocation opened in this process. */
typedef struct mapping {
  int rank;
  uint64_t id; /* the peer's CUDA buffer id of the allocation */
  void *base;
  struct mapping *next;
} mapping;

/* An allocation made by mkx_symm_alloc. */
typedef struct owned {
  void *ptr;
  uint64_t id;
  struct owned *next;
} owned;

/* A user's buffer mapped for a captured call: held until comm free. */
typedef struct pin {
  void *base;
  struct pin *next;
} pin;

typedef struct mkx_symm_state {
  mapping *maps;
  owned *mine;
  pin *pins;
} mkx_symm_state;

typedef struct symm_record {
  int32_t rc, has;
  cudaIpcMemHandle_t handle; /* of the allocation's base */
  uint64_t id, offset;       /* buffer id; ptr - base */
} symm_record;

typedef CUresult (*get_attr_fn)(void *, CUpointer_attribute, CUdeviceptr);

static get_attr_fn driver_get_attr(void) {
  static get_attr_fn fn;
  if (!fn) fn = (get_attr_fn)mkx_driver_fn("cuPointerGetAttribute", 12000);
  return fn;
}

static int allocation_of(const void *ptr, void **base, uint64_t *id) {
  get_attr_fn get = driver_get_attr();
  CUdeviceptr start = 0;
  unsigned long long bid = 0;
  if (!get) return mkx_error(MKX_ERR_CUDA, "cuPointerGetAttribute unavailable");
  if (get(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
          (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS ||
      get(&bid, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)(uintptr_t)ptr) !=
          CUDA_SUCCESS)
    return mkx_error(MKX_ERR_INVALID_ARG, "%p is not CUDA device memory", ptr);
  *base = (void *)(uintptr_t)start;
  *id = bid;
  return MKX_SUCCESS;
}

/* Memory from a stream-ordered pool (cudaMallocAsync) cannot be shared by
 * legacy CUDA IPC, which is what mkx_symm_register uses. */
int mkx_symm_ipc_capable(const void *ptr) {
  get_attr_fn get = driver_get_attr();
  int ok = 0;
  if (!get || get(&ok, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                  (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS)
    return 0;
  return ok != 0;
}

static void symm_release(MKX_Comm c);

/* The communicator's state, made on first use; released with it. */
static mkx_symm_state *state(MKX_Comm c) {
  static const char hook_key = 0;
  if (!c->symm &&
      mkx_comm_add_hook(c, &hook_key, symm_release, NULL) == MKX_SUCCESS)
    c->symm = calloc(1, sizeof(mkx_symm_state));
  return c->symm;
}

/* Gather one record per rank; the first failing rank fails every rank. */
static int exchange(MKX_Comm c, symm_record *mine, symm_record *all,
                    const char *what) {
  MKX_TRY(mkx_comm_exchange(c, mine, all, sizeof *mine, what));
  if (mine->rc != MKX_SUCCESS) return mine->rc;
  for (int q = 0; q < c->size; q++)
    if (all[q].rc != MKX_SUCCESS)
      return mkx_error(MKX_ERR_PEER, "%s failed on rank %d (%s)", what, q,
                       MKX_Error_string(all[q].rc));
  return MKX_SUCCESS;
}

static int describe(void *ptr, symm_record *r) {
  void *base = NULL;
  cudaError_t e;
  r->has = ptr != NULL;
  if (!ptr) return MKX_SUCCESS;
  MKX_TRY(allocation_of(ptr, &base, &r->id));
  r->offset = (uint64_t)((char *)ptr - (char *)base);
  if ((e = cudaIpcGetMemHandle(&r->handle, base)) != cudaSuccess)
    return mkx_cuda_rc(e, NULL, "cudaIpcGetMemHandle");
  return MKX_SUCCESS;
}

/* The mapping of node peer q's allocation: this communicator's own
 * (MKX_Alloc_mem's, kept until freed collectively) or, for a user's buffer,
 * one held by the registration (*held). */
static int open_peer(MKX_Comm c, int q, const symm_record *r, int user,
                     void **base, int *held) {
  mkx_symm_state *s = state(c);
  *held = 0;
  for (mapping *m = s->maps; m; m = m->next)
    if (m->rank == q && m->id == r->id) return *base = m->base, MKX_SUCCESS;
  mapping *m = user ? NULL : calloc(1, sizeof *m);
  if (!user && !m) return mkx_error(MKX_ERR_NOMEM, "symmetric memory mapping");
  cudaError_t e = ipc_acquire(&r->handle, user, base);
  if (e == cudaErrorAlreadyMapped) {
    free(m);
    (void)cudaGetLastError();
    return mkx_error(MKX_ERR_CUDA,
                     "cudaIpcOpenMemHandle of rank %d's "
                     "buffer: resource already mapped (the driver carved it "
                     "out of the same block as another buffer of that rank "
                     "this process maps; allocate buffers the fused calls "
                     "share with MKX_Alloc_mem, or of 2 MiB or more)",
                     q);
  }
  if (e != cudaSuccess) {
    free(m);
    return mkx_cuda_rc(e, NULL, "cudaIpcOpenMemHandle of a node peer's buffer");
  }
  if (user) return *held = 1, MKX_SUCCESS;
  *m = (mapping){q, r->id, *base, s->maps};
  s->maps = m;
  return MKX_SUCCESS;
}

/* user: the buffers are users' (mkx_symm_register); the registration
 * holds their mappings until mkx_symm_buf_free. */
static int map_node(MKX_Comm c, const symm_record *all, int user,
                    mkx_symm_buf *b) {
  for (int q = 0; q < c->size; q++) {
    if (c->place.node_of_rank[q] != c->place.node) continue;
    int lr = c->place.local_rank_of[q], held = 0;
    void *base = NULL;
    if (q == c->rank || !all[q].has) continue;
    MKX_TRY(open_peer(c, q, &all[q], user, &base, &held));
    b->peer[lr] = (char *)base + all[q].offset;
    if (held) b->held[lr] = base;
  }
  return MKX_SUCCESS;
}

/* Describe this rank's buffer and gather every rank's description. */
static int share(MKX_Comm c, void *ptr, int local_rc, symm_record **all) {
  symm_record mine = {0};
  *all = malloc(sizeof **all * (size_t)c->size);
  if (!*all) local_rc = mkx_error(MKX_ERR_NOMEM, "symmetric memory");
  mine.rc = local_rc ? local_rc : describe(ptr, &mine);
  if (!*all) return mine.rc; /* the peers time out: nothing else to do */
  return exchange(c, &mine, *all, "symmetric registration");
}

static int buf_init(MKX_Comm c, void *ptr, size_t bytes, mkx_symm_buf *b) {
  memset(b, 0, sizeof *b);
  b->local = ptr;
  b->bytes = bytes;
  b->local_size = c->place.local_size;
  b->peer = calloc((size_t)b->local_size, sizeof *b->peer);
  b->held = calloc((size_t)b->local_size, sizeof *b->held);
  if (!b->peer || !b->held || !state(c))
    return mkx_error(MKX_ERR_NOMEM, "symmetric memory state");
  b->peer[c->place.local_rank] = ptr;
  return MKX_SUCCESS;
}

int mkx_symm_register(MKX_Comm c, void *ptr, size_t bytes, mkx_symm_buf *b) {
  symm_record *all;
  int rc = share(c, ptr, buf_init(c, ptr, bytes, b), &all);
  if (rc == MKX_SUCCESS)
    rc = mkx_comm_agree_rc(c, map_node(c, all, 1, b), "symmetric mapping");
  free(all);
  if (rc != MKX_SUCCESS) mkx_symm_buf_free(b);
  return rc;
}

void mkx_symm_buf_free(mkx_symm_buf *b) {
  for (int i = 0; b->held && i < b->local_size; i++)
    if (b->held[i]) ipc_release(b->held[i]);
  free(b->peer);
  free(b->held);
  b->peer = NULL;
  b->held = NULL;
}

int mkx_symm_buf_pin(MKX_Comm c, const mkx_symm_buf *b) {
  mkx_symm_state *s = state(c);
  for (int i = 0; b->held && i < b->local_size; i++) {
    pin *p = b->held[i] && s ? calloc(1, sizeof *p) : NULL;
    if (b->held[i] && !p) return mkx_error(MKX_ERR_NOMEM, "capture");
    if (!p) continue;
    ipc_ref(b->held[i], +1);
    *p = (pin){b->held[i], s->pins};
    s->pins = p;
  }
  return MKX_SUCCESS;
}

int mkx_symm_cached(void) {
  int n = 0;
  pthread_mutex_lock(&ipc_lock);
  for (const ipc_open *o = ipc_opens; o; o = o->next) n += o->cached;
  pthread_mutex_unlock(&ipc_lock);
  return n;
}

static void unmap(MKX_Comm c, int q, uint64_t id);

/* Undo a failed collective allocation: close what was mapped of the peers'
 * buffers, meet, then free this rank's (no rank frees what a peer maps). */
static void undo_alloc(MKX_Comm c, const symm_record *all, void *ptr) {
  for (int q = 0; all && q < c->size; q++)
    if (q != c->rank) unmap(c, q, all[q].id);
  if (c->oob.barrier(c->oob.ctx, c->opt.timeout_ms, "symmetric memory: undo") ==
          MKX_SUCCESS &&
      ptr)
    MKX_CUDA_RELEASE(cudaFree(ptr));
}

/* Whole 2 MiB blocks: the driver carves smaller cudaMalloc allocations out
 * of shared blocks, and a peer cannot open a second allocation of a block
 * it already maps (cudaErrorAlreadyMapped: two small workspaces made one
 * after the other). */
#define SYMM_BLOCK ((size_t)2 << 20)

int mkx_symm_alloc(MKX_Comm c, size_t bytes, void **ptr) {
  mkx_symm_buf b = {0};
  symm_record *all = NULL;
  owned *o = calloc(1, sizeof *o);
  bytes =
      bytes ? (bytes + SYMM_BLOCK - 1) / SYMM_BLOCK * SYMM_BLOCK : SYMM_BLOCK;
  int rc = o ? mkx_device_alloc(bytes, ptr)
             : mkx_error(MKX_ERR_NOMEM, "MKX_Alloc_mem");
  if (rc != MKX_SUCCESS) *ptr = NULL;
  rc = share(c, *ptr, rc ? rc : buf_init(c, *ptr, bytes, &b), &all);
  if (rc == MKX_SUCCESS)
    rc = mkx_comm_agree_rc(c, map_node(c, all, 0, &b), "MKX_Alloc_mem mapping");
  if (rc == MKX_SUCCESS) {
    *o = (owned){*ptr, all[c->rank].id, state(c)->mine};
    state(c)->mine = o;
  } else if (c->broken == 0) {
    undo_alloc(c, all, *ptr);
    *ptr = NULL;
    free(o);
  }
  mkx_symm_buf_free(&b);
  free(all);
  return rc;
}

static void unmap(MKX_Comm c, int q, uint64_t id) {
  mkx_symm_state *s = state(c);
  for (mapping **pm = &s->maps; *pm; pm = &(*pm)->next)
    if ((*pm)->rank == q && (*pm)->id == id) {
      mapping *m = *pm;
      ipc_release(m->base);
      *pm = m->next;
      free(m);
      return;
    }
}

/* Peers close their mappings of the allocations being freed, all ranks
 * meet, then each frees its own: no rank frees memory a peer still maps. */
int mkx_symm_free(MKX_Comm c, void *ptr) {
  mkx_symm_state *s = state(c);
  owned **po = s ? &s->mine : NULL;
  while (po && *po && (*po)->ptr != ptr) po = &(*po)->next;
  symm_record mine = {0}, *all = malloc(sizeof *all * (size_t)c->size);
  mine.rc = !all ? mkx_error(MKX_ERR_NOMEM, "MKX_Free_mem")
            : ptr && (!po || !*po)
                ? mkx_error(MKX_ERR_INVALID_ARG,
                            "MKX_Free_mem: %p was not "
                            "returned by MKX_Alloc_mem on this comm",
                            ptr)
                : MKX_SUCCESS;
  mine.id = po && *po ? (*po)->id : 0;
  int rc = all ? exchange(c, &mine, all, "MKX_Free_mem") : mine.rc;
  for (int q = 0; rc == MKX_SUCCESS && q < c->size; q++)
    if (q != c->rank) unmap(c, q, all[q].id);
  free(all);
  if (rc == MKX_SUCCESS)
    rc =
        c->oob.barrier(c->oob.ctx, c->opt.timeout_ms, "MKX_Free_mem: unmapped");
  if (rc == MKX_SUCCESS && ptr) {
    owned *o = *po;
    *po = o->next;
    free(o);
    cudaError_t e = cudaFree(ptr);
    if (e != cudaSuccess) rc = mkx_cuda_rc(e, NULL, "cudaFree");
  }
  return rc;
}

/* Close every mapping and free what mkx_symm_alloc allocated: the
 * communicator's hook, run when it is freed. */
static void symm_release(MKX_Comm c) {
  mkx_symm_state *s = c->symm;
  if (!s) return;
  while (s->maps) unmap(c, s->maps->rank, s->maps->id);
  while (s->pins) {
    pin *p = s->pins;
    s->pins = p->next;
    ipc_release(p->base);
    free(p);
  }
  /* Peers may still map what we own: meet before freeing (bounded). */
  if (s->mine && c->oob.barrier(c->oob.ctx, c->opt.timeout_ms,
                                "symmetric memory: unmapped") == MKX_SUCCESS)
    for (owned *o = s->mine; o; o = o->next) MKX_CUDA_RELEASE(cudaFree(o->ptr));
  while (s->mine) {
    owned *o = s->mine;
    s->mine = o->next;
    free(o);
  }
  free(s);
  c->symm = NULL;
}
#else
int mkx_symm_ipc_capable(const void *ptr) {
  (void)ptr;
  return 0;
}

static int no_cuda(void) {
  return mkx_error(MKX_ERR_UNSUPPORTED, "symmetric memory needs CUDA");
}
int mkx_symm_register(MKX_Comm c, void *ptr, size_t bytes, mkx_symm_buf *b) {
  (void)c, (void)ptr, (void)bytes;
  memset(b, 0, sizeof *b);
  return no_cuda();
}
void mkx_symm_buf_free(mkx_symm_buf *b) { (void)b; }
int mkx_symm_buf_pin(MKX_Comm c, const mkx_symm_buf *b) {
  (void)c, (void)b;
  return MKX_SUCCESS;
}
int mkx_symm_cached(void) { return 0; }
int mkx_symm_alloc(MKX_Comm c, size_t bytes, void **ptr) {
  (void)c, (void)bytes;
  *ptr = NULL;
  return no_cuda();
}
int mkx_symm_free(MKX_Comm c, void *ptr) {
  (void)c, (void)ptr;
  return no_cuda();
}
#endif
