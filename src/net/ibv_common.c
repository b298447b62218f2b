/* Registration for the libibverbs providers (ibv_common.h).  A file of its
 * own, so that the unit tests' --wrap of the verbs calls reaches it. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include "core/error.h"
#include "core/log.h"
#include "net/ibv_common.h"
#include "net/ibv_shim.h"

#if HAVE_VERBS
static struct ibv_mr *reg_device(const char *prov, struct ibv_pd *pd,
                                 const mkx_net_reg_args *a, int access) {
#ifdef HAVE_IBV_REG_DMABUF_MR
  if (a->dmabuf_fd >= 0) {
    struct ibv_mr *mr =
        ibv_reg_dmabuf_mr(pd, a->dmabuf_offset, a->len,
                          (uint64_t)(uintptr_t)a->base, a->dmabuf_fd, access);
    if (mr) return mr;
    mkx_log(MKX_LOG_INFO, "%s: ibv_reg_dmabuf_mr: %s; trying peer memory", prov,
            strerror(errno));
  }
#else
  (void)prov;
#endif
  return mkx_ibv_reg_mr(pd, a->base, a->len, access);
}

int mkx_ibv_register(const char *prov, struct ibv_pd *pd,
                     const mkx_net_reg_args *a, mkx_net_mr *mr) {
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  struct ibv_mr *m = a->kind == MKX_NET_MEM_DEVICE
                         ? reg_device(prov, pd, a, access)
                         : mkx_ibv_reg_mr(pd, a->base, a->len, access);
  if (!m)
    return mkx_error(MKX_ERR_NET,
                     "%s: registering %zu bytes of %s memory "
                     "at %p: %s",
                     prov, a->len,
                     a->kind == MKX_NET_MEM_DEVICE ? "device" : "host", a->base,
                     strerror(errno));
  *mr = (mkx_net_mr){.id = 0,
                     .kind = a->kind,
                     .base = a->base,
                     .len = a->len,
                     .lkey = m->lkey,
                     .rkey = m->rkey,
                     .handle = m};
  return MKX_SUCCESS;
}

int mkx_ibv_deregister(const char *prov, mkx_net_mr *mr) {
  if (mr->handle && ibv_dereg_mr(mr->handle) != 0)
    return mkx_error(MKX_ERR_NET, "%s: ibv_dereg_mr: %s", prov,
                     strerror(errno));
  mr->handle = NULL;
  return MKX_SUCCESS;
}

void mkx_ibv_destroy_qp(const char *prov, struct ibv_qp *qp) {
  if (qp && ibv_destroy_qp(qp) != 0)
    mkx_log(MKX_LOG_WARN, "%s: ibv_destroy_qp failed", prov);
}

void mkx_ibv_close_base(const char *prov, struct ibv_cq *cq, struct ibv_pd *pd,
                        struct ibv_context *ctx) {
  if (cq && ibv_destroy_cq(cq) != 0)
    mkx_log(MKX_LOG_WARN, "%s: ibv_destroy_cq failed", prov);
  if (pd && ibv_dealloc_pd(pd) != 0)
    mkx_log(MKX_LOG_WARN, "%s: ibv_dealloc_pd failed", prov);
  if (ctx && ibv_close_device(ctx) != 0)
    mkx_log(MKX_LOG_WARN, "%s: ibv_close_device failed", prov);
}
#else
typedef int mkx_ibv_common_unused; /* ISO C: not an empty unit */
#endif
