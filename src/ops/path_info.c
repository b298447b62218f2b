/* What a plan or a communicator's last call ran, for the caller
 * (MKX_Request_get_path, MKX_Comm_get_last_path): the path's name, whether
 * a start of it may be captured, and the CTAs its kernels take. */
#include "core/error.h"
#include "ops/op.h"

static int ctas_of(MKX_Comm c, mkx_path path) {
  if (path == MKX_PATH_HOST || path == MKX_PATH_STAGED) return 0;
  /* reading in place waits for no one: the rank's whole partition */
  if (path == MKX_PATH_TP_PULL) return c->share.ctx_sms;
  return c->share.ctas ? c->share.ctas : c->share.dev_sms;
}

static int is_moe(mkx_path path) {
  return path == MKX_PATH_MOE || path == MKX_PATH_MOE_NODE ||
         path == MKX_PATH_MOE_NODES || path == MKX_PATH_MOE_NET;
}

int mkx_path_capturable_on(MKX_Comm c, mkx_path path) {
  /* the MoE calls wait for their routing unless moe_sync=no */
  return mkx_path_capturable(path) && (!is_moe(path) || !c->opt.moe_sync);
}

int mkx_path_info(MKX_Comm c, mkx_path path, const char **name, int *capturable,
                  int *ctas) {
  if (!name || !capturable || !ctas)
    return mkx_error(MKX_ERR_NULL_POINTER,
                     "path query: name, capturable and ctas must not be NULL");
  if (path == MKX_PATH_COUNT) {
    *name = "none";
    *capturable = *ctas = 0;
    return MKX_SUCCESS;
  }
  *name = mkx_path_name(path);
  *capturable = mkx_path_capturable_on(c, path);
  *ctas = ctas_of(c, path);
  return MKX_SUCCESS;
}

int MKX_Comm_get_last_path(MKX_Comm comm, const char **name, int *capturable,
                           int *ctas) {
  mkx_error_clear();
  if (!mkx_comm_live(comm))
    return mkx_error(MKX_ERR_INVALID_COMM,
                     "MKX_Comm_get_last_path: NULL or freed communicator");
  return mkx_path_info(
      comm, comm->last_path < 0 ? MKX_PATH_COUNT : (mkx_path)comm->last_path,
      name, capturable, ctas);
}
