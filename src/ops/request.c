/* Persistent requests (MPI-4 style): the checks and the agreement across
 * ranks happen once at _init; MKX_Start on a GPU path runs with no
 * collective host work, on the host path it first checks that every rank
 * starts the same plan (mkx_op_start_check). */
#include <stdlib.h>
#include <string.h>
#include "core/device.h"
#include "core/error.h"
#include "core/handles.h"
#include "ops/op.h"

struct MKX_Request_s {
  MKX_Comm comm;
  mkx_prepared prep;
  void *args; /* a copy of the _init arguments */
};

int mkx_plan_create(MKX_Comm c, const mkx_op_class *cls, const void *args,
                    MPI_Info info, MKX_Request *request) {
  mkx_options plan_opt;
  mkx_error_clear();
  MKX_TRY(mkx_comm_check(c));
  /* Local failures go through the agreement like bad arguments do, so
   * the other ranks fail at once instead of waiting for this one. */
  int rc = request ? mkx_options_load(&plan_opt, info)
                   : mkx_error(MKX_ERR_NULL_POINTER,
                               "%s_init: request is "
                               "NULL",
                               cls->name);
  if (request) *request = NULL;
  MKX_Request r = calloc(1, sizeof *r);
  void *copy = malloc(cls->args_size);
  if (rc == MKX_SUCCESS && (!r || !copy))
    rc = mkx_error(MKX_ERR_NOMEM, "%s_init", cls->name);
  if (rc == MKX_SUCCESS) rc = mkx_handle_add(r, MKX_HANDLE_REQUEST);
  if (copy) memcpy(copy, args, cls->args_size);
  mkx_prepared prep;
  rc = mkx_op_prepare(c, cls, MKX_VARIANT_INIT, copy ? copy : (void *)args, rc,
                      0, &prep);
  if (rc != MKX_SUCCESS) {
    mkx_handle_remove(r);
    free(r);
    free(copy);
    return rc;
  }
  r->prep = prep;
  r->comm = c;
  r->args = copy;
  c->live_requests++;
  *request = r;
  return MKX_SUCCESS;
}

static int request_check(MKX_Request r, const char *fn) {
  if (!mkx_handle_is(r, MKX_HANDLE_REQUEST))
    return mkx_error(MKX_ERR_INVALID_REQUEST, "%s: NULL or freed request", fn);
  return MKX_SUCCESS;
}

int MKX_Start(MKX_Request request, MKX_Stream stream) {
  mkx_error_clear();
  MKX_TRY(request_check(request, "MKX_Start"));
  MKX_TRY(mkx_comm_check(request->comm));
  if (!request->prep.gpu_ops)
    MKX_TRY(mkx_op_start_check(request->comm, &request->prep,
                               mkx_stream_capturing(stream)));
  return mkx_op_execute(request->comm, &request->prep, request->args, stream);
}

int MKX_Request_get_path(MKX_Request request, const char **name,
                         int *capturable, int *ctas) {
  mkx_error_clear();
  MKX_TRY(request_check(request, "MKX_Request_get_path"));
  return mkx_path_info(request->comm, mkx_prepared_path(&request->prep), name,
                       capturable, ctas);
}

int MKX_Request_free(MKX_Request *request) {
  mkx_error_clear();
  if (request == NULL)
    return mkx_error(MKX_ERR_NULL_POINTER,
                     "MKX_Request_free: request is "
                     "NULL");
  MKX_TRY(request_check(*request, "MKX_Request_free"));
  MKX_Request r = *request;
  r->comm->live_requests--;
  mkx_prepared_free(r->comm, &r->prep);
  free(r->args);
  mkx_handle_remove(r);
  free(r);
  *request = NULL;
  return MKX_SUCCESS;
}
