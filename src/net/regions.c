/* The region table and GPU-memory staging of tcp and shm (regions.h). */
#include "net/regions.h"

#include "core/error.h"

void mkx_net_regions_init(mkx_net_regions *g, const char *who,
                          const mkx_net_stager *stager) {
  *g = (mkx_net_regions){.who = who, .stager = stager, .stage_dev = -1};
  pthread_mutex_init(&g->lock, NULL);
  pthread_mutex_init(&g->stage_lock, NULL);
}

void mkx_net_regions_fini(mkx_net_regions *g) {
  if (g->stage_dev >= 0) {
    g->stager->host_free(g->stage_ctx, g->sstage);
    g->stager->host_free(g->stage_ctx, g->rstage);
    g->stager->close(g->stage_ctx);
    g->stage_dev = -1;
  }
  pthread_mutex_destroy(&g->stage_lock);
  pthread_mutex_destroy(&g->lock);
}

/* The staging buffers, made with the first device region; one GPU per
 * endpoint (a rank drives one). */
static int stage_setup(mkx_net_regions *g, int dev) {
  const mkx_net_stager *s = g->stager;
  int rc = MKX_SUCCESS;
  pthread_mutex_lock(&g->stage_lock);
  if (g->stage_dev < 0) {
    void *ctx = NULL, *out = NULL, *in = NULL;
    rc = s->open(dev, &ctx);
    if (rc == MKX_SUCCESS) rc = s->host_alloc(ctx, s->stage_bytes, &out);
    if (rc == MKX_SUCCESS) rc = s->host_alloc(ctx, s->stage_bytes, &in);
    if (rc == MKX_SUCCESS) {
      g->stage_ctx = ctx, g->sstage = out, g->rstage = in;
      g->stage_dev = dev;
    } else if (ctx) {
      s->host_free(ctx, out);
      s->close(ctx);
    }
  } else if (g->stage_dev != dev) {
    rc = mkx_error(MKX_ERR_UNSUPPORTED,
                   "%s: memory of GPU %d on an "
                   "endpoint that stages for GPU %d (one GPU per endpoint)",
                   g->who, dev, g->stage_dev);
  }
  pthread_mutex_unlock(&g->stage_lock);
  return rc;
}

int mkx_net_regions_reg(mkx_net_regions *g, const mkx_net_reg_args *a,
                        mkx_net_mr *mr) {
  int dev = g->stager ? g->stager->device_of(a->base) : -1;
  if (a->kind == MKX_NET_MEM_DEVICE && dev < 0)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "%s: %p is not device memory%s, "
                     "yet registered as such",
                     g->who, a->base,
                     g->stager ? "" : " (MKX built without CUDA)");
  if (dev >= 0) MKX_TRY(stage_setup(g, dev));
  pthread_mutex_lock(&g->lock);
  int id = 0;
  while (id < MKX_NET_MAX_REGIONS && g->table[id].used) id++;
  if (id < MKX_NET_MAX_REGIONS)
    g->table[id] = (mkx_net_region){a->base, a->len, 1, dev};
  pthread_mutex_unlock(&g->lock);
  if (id == MKX_NET_MAX_REGIONS)
    return mkx_error(MKX_ERR_NOMEM, "%s: more than %d regions", g->who,
                     MKX_NET_MAX_REGIONS);
  *mr = (mkx_net_mr){.id = (uint32_t)id,
                     .kind = dev >= 0 ? MKX_NET_MEM_DEVICE : MKX_NET_MEM_HOST,
                     .base = a->base,
                     .len = a->len};
  return MKX_SUCCESS;
}

int mkx_net_regions_dereg(mkx_net_regions *g, mkx_net_mr *mr) {
  if (mr->id >= MKX_NET_MAX_REGIONS)
    return mkx_error(MKX_ERR_INVALID_ARG, "%s: region %u", g->who, mr->id);
  pthread_mutex_lock(&g->lock);
  g->table[mr->id].used = 0;
  pthread_mutex_unlock(&g->lock);
  return MKX_SUCCESS;
}

int mkx_net_regions_find(mkx_net_regions *g, uint32_t id, uint64_t off,
                         uint64_t len, mkx_net_region *out) {
  pthread_mutex_lock(&g->lock);
  const mkx_net_region *r = id < MKX_NET_MAX_REGIONS ? &g->table[id] : NULL;
  const int ok = r && r->used && off <= r->len && len <= r->len - off;
  if (ok) *out = *r;
  pthread_mutex_unlock(&g->lock);
  return ok;
}
