/* SM partitions of a shared GPU: green contexts made through the driver's
 * entry points (MKX never links libcuda), kept per process and device.
 * See sm_partition.h. */
#include <pthread.h>
#include <stdlib.h>
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sm_partition.h"

int mkx_sm_part_size(const mkx_sm_part_limits *l, int groups) {
  if (groups < 1 || l->sms < 1) return 0;
  int each = l->sms / groups;
  if (l->align > 1) each -= each % l->align;
  return each >= l->min_sms && each >= 1 ? each : 0;
}

#if HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime.h>
#include "core/cuda_rc.h"

struct mkx_sm_part {
  int device, groups, index, sms, refs;
  CUgreenCtx green;
  struct mkx_sm_part *next;
};

static pthread_mutex_t parts_lock = PTHREAD_MUTEX_INITIALIZER;
static mkx_sm_part *parts;

typedef CUresult (*dev_get_fn)(CUdevice *, int);
typedef CUresult (*res_fn)(CUdevice, CUdevResource *, CUdevResourceType);
typedef CUresult (*split_fn)(CUdevResource *, unsigned *, const CUdevResource *,
                             CUdevResource *, unsigned, unsigned);
typedef CUresult (*desc_fn)(CUdevResourceDesc *, CUdevResource *, unsigned);
typedef CUresult (*green_fn)(CUgreenCtx *, CUdevResourceDesc, CUdevice,
                             unsigned);
typedef CUresult (*green_free_fn)(CUgreenCtx);
typedef CUresult (*stream_fn)(CUstream *, CUgreenCtx, unsigned, int);

/* The device's SM resource as this process sees it (an MPS client with a
 * share of its own sees its share). */
static int sm_resource(int device, CUdevice *dev, CUdevResource *res) {
  dev_get_fn get = (dev_get_fn)mkx_driver_fn("cuDeviceGet", 2000);
  res_fn of = (res_fn)mkx_driver_fn("cuDeviceGetDevResource", 12040);
  if (!get || !of)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "SM partition: the driver has no green contexts "
                     "(CUDA 12.4 or later needed)");
  CUresult r = get(dev, device);
  if (r == CUDA_SUCCESS) r = of(*dev, res, CU_DEV_RESOURCE_TYPE_SM);
  if (r != CUDA_SUCCESS)
    return mkx_error(MKX_ERR_CUDA,
                     "SM partition: the SMs of device %d (CUresult %d)", device,
                     (int)r);
  return MKX_SUCCESS;
}

int mkx_sm_part_limits_of(int device, mkx_sm_part_limits *out) {
  CUdevice dev;
  CUdevResource res;
  out->sms = out->min_sms = out->align = 0;
  MKX_TRY(sm_resource(device, &dev, &res));
  out->sms = (int)res.sm.smCount;
  out->min_sms = (int)res.sm.minSmPartitionSize;
  out->align = (int)res.sm.smCoscheduledAlignment;
  return MKX_SUCCESS;
}

/* A green context on group `index` of `groups` groups of `sms` SMs. */
static int make_green(int device, int groups, int index, int sms,
                      CUgreenCtx *green, int *refused) {
  split_fn split =
      (split_fn)mkx_driver_fn("cuDevSmResourceSplitByCount", 12040);
  desc_fn desc_of = (desc_fn)mkx_driver_fn("cuDevResourceGenerateDesc", 12040);
  green_fn create = (green_fn)mkx_driver_fn("cuGreenCtxCreate", 12040);
  CUdevice dev;
  CUdevResource res, *group = calloc((size_t)groups, sizeof *group);
  CUdevResourceDesc desc;
  unsigned n = (unsigned)groups;
  if (!group) return mkx_error(MKX_ERR_NOMEM, "SM partition");
  int rc = sm_resource(device, &dev, &res);
  if (rc == MKX_SUCCESS && (!split || !desc_of || !create))
    rc = mkx_error(MKX_ERR_UNSUPPORTED,
                   "SM partition: the driver has no green contexts");
  CUresult r = CUDA_SUCCESS;
  if (rc == MKX_SUCCESS) r = split(group, &n, &res, NULL, 0, (unsigned)sms);
  *refused =
      rc == MKX_SUCCESS && r == CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
  if (*refused)
    rc = mkx_error(MKX_ERR_UNSUPPORTED,
                   "SM partition: the driver refuses to split the %u SMs "
                   "this process has (an MPS client with a share of its "
                   "own: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE)",
                   res.sm.smCount);
  else if (rc == MKX_SUCCESS && r == CUDA_SUCCESS && (int)n < groups)
    rc = mkx_error(MKX_ERR_UNSUPPORTED,
                   "SM partition: %u SMs give %u groups of %d, not %d",
                   res.sm.smCount, n, sms, groups);
  if (rc == MKX_SUCCESS && r == CUDA_SUCCESS)
    r = desc_of(&desc, &group[index], 1);
  if (rc == MKX_SUCCESS && r == CUDA_SUCCESS)
    r = create(green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM);
  if (rc == MKX_SUCCESS && r != CUDA_SUCCESS)
    rc = mkx_error(MKX_ERR_CUDA,
                   "SM partition: group %d of %d groups of %d SMs "
                   "(CUresult %d)",
                   index, groups, sms, (int)r);
  free(group);
  return rc;
}

int mkx_sm_part_get(int device, int groups, int index, int sms,
                    mkx_sm_part **out, int *refused) {
  int rc = MKX_SUCCESS;
  *out = NULL;
  *refused = 0;
  if (groups < 1 || index < 0 || index >= groups || sms < 1)
    return mkx_error(MKX_ERR_INTERNAL, "SM partition: group %d of %d (%d SMs)",
                     index, groups, sms);
  pthread_mutex_lock(&parts_lock);
  for (mkx_sm_part *p = parts; p && !*out; p = p->next)
    if (p->device == device && p->groups == groups && p->index == index &&
        p->sms == sms)
      *out = p;
  if (*out) {
    (*out)->refs++;
  } else {
    mkx_sm_part *p = calloc(1, sizeof *p);
    rc = p ? make_green(device, groups, index, sms, &p->green, refused)
           : mkx_error(MKX_ERR_NOMEM, "SM partition");
    if (rc == MKX_SUCCESS) {
      *p = (mkx_sm_part){device, groups, index, sms, 1, p->green, parts};
      parts = *out = p;
      mkx_log(MKX_LOG_DEBUG, "SM partition: group %d of %d groups of %d SMs",
              index, groups, sms);
    } else {
      free(p);
    }
  }
  pthread_mutex_unlock(&parts_lock);
  return rc;
}

mkx_sm_part *mkx_sm_part_ref(mkx_sm_part *p) {
  if (!p) return NULL;
  pthread_mutex_lock(&parts_lock);
  p->refs++;
  pthread_mutex_unlock(&parts_lock);
  return p;
}

void mkx_sm_part_put(mkx_sm_part *p) {
  if (!p) return;
  pthread_mutex_lock(&parts_lock);
  if (--p->refs == 0) {
    green_free_fn destroy =
        (green_free_fn)mkx_driver_fn("cuGreenCtxDestroy", 12040);
    for (mkx_sm_part **at = &parts; *at; at = &(*at)->next)
      if (*at == p) {
        *at = p->next;
        break;
      }
    if (destroy) destroy(p->green);
    free(p);
  }
  pthread_mutex_unlock(&parts_lock);
}

int mkx_sm_part_sms(const mkx_sm_part *p) { return p ? p->sms : 0; }

int mkx_sm_part_stream(mkx_sm_part *p, void **stream) {
  cudaStream_t s = NULL;
  *stream = NULL;
  if (!p) {
    MKX_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                 "SM partition");
    *stream = s;
    return MKX_SUCCESS;
  }
  stream_fn create = (stream_fn)mkx_driver_fn("cuGreenCtxStreamCreate", 12050);
  if (!create)
    return mkx_error(MKX_ERR_UNSUPPORTED,
                     "SM partition: the driver has no streams of green "
                     "contexts (CUDA 12.5 or later needed)");
  CUstream cs;
  CUresult r = create(&cs, p->green, CU_STREAM_NON_BLOCKING, 0);
  if (r != CUDA_SUCCESS)
    return mkx_error(
        r == CUDA_ERROR_OUT_OF_MEMORY ? MKX_ERR_NOMEM : MKX_ERR_CUDA,
        "SM partition: a stream of group %d of %d (CUresult %d)", p->index,
        p->groups, (int)r);
  *stream = cs;
  return MKX_SUCCESS;
}

int mkx_part_lane_init(mkx_sm_part *p, mkx_part_lane *l) {
  const char *fn = "SM partition";
  if (!p || l->ev_join) return MKX_SUCCESS;
  int rc = mkx_sm_part_stream(p, &l->stream);
  if (rc == MKX_SUCCESS)
    rc = mkx_cuda_rc(cudaEventCreateWithFlags((cudaEvent_t *)&l->ev_fork,
                                              cudaEventDisableTiming),
                     fn, "cudaEventCreate");
  if (rc == MKX_SUCCESS)
    rc = mkx_cuda_rc(cudaEventCreateWithFlags((cudaEvent_t *)&l->ev_join,
                                              cudaEventDisableTiming),
                     fn, "cudaEventCreate");
  if (rc != MKX_SUCCESS) mkx_part_lane_free(l);
  return rc;
}

int mkx_part_fork(mkx_sm_part *p, mkx_part_lane *l, void *user, void **run) {
  const char *fn = "SM partition";
  *run = user;
  if (!p) return MKX_SUCCESS;
  MKX_TRY(mkx_part_lane_init(p, l));
  MKX_CUDA_TRY(cudaEventRecord((cudaEvent_t)l->ev_fork, (cudaStream_t)user),
               fn);
  MKX_CUDA_TRY(
      cudaStreamWaitEvent((cudaStream_t)l->stream, (cudaEvent_t)l->ev_fork, 0),
      fn);
  *run = l->stream;
  return MKX_SUCCESS;
}

int mkx_part_join(mkx_part_lane *l, void *user, void *run) {
  const char *fn = "SM partition";
  if (run == user) return MKX_SUCCESS;
  MKX_CUDA_TRY(cudaEventRecord((cudaEvent_t)l->ev_join, (cudaStream_t)run), fn);
  MKX_CUDA_TRY(
      cudaStreamWaitEvent((cudaStream_t)user, (cudaEvent_t)l->ev_join, 0), fn);
  return MKX_SUCCESS;
}

void mkx_part_lane_free(mkx_part_lane *l) {
  if (l->stream) MKX_CUDA_RELEASE(cudaStreamDestroy((cudaStream_t)l->stream));
  if (l->ev_fork) MKX_CUDA_RELEASE(cudaEventDestroy((cudaEvent_t)l->ev_fork));
  if (l->ev_join) MKX_CUDA_RELEASE(cudaEventDestroy((cudaEvent_t)l->ev_join));
  l->stream = l->ev_fork = l->ev_join = NULL;
}
#else
int mkx_sm_part_limits_of(int device, mkx_sm_part_limits *out) {
  out->sms = out->min_sms = out->align = 0;
  return mkx_device_set(device);
}
int mkx_sm_part_get(int device, int groups, int index, int sms,
                    mkx_sm_part **out, int *refused) {
  (void)groups, (void)index, (void)sms;
  *out = NULL;
  *refused = 0;
  return mkx_device_set(device);
}
void mkx_sm_part_put(mkx_sm_part *p) { (void)p; }
mkx_sm_part *mkx_sm_part_ref(mkx_sm_part *p) { return p; }
int mkx_sm_part_sms(const mkx_sm_part *p) {
  (void)p;
  return 0;
}
int mkx_sm_part_stream(mkx_sm_part *p, void **stream) {
  (void)p;
  *stream = NULL;
  return mkx_device_set(0);
}
int mkx_part_lane_init(mkx_sm_part *p, mkx_part_lane *l) {
  (void)p, (void)l;
  return MKX_SUCCESS;
}
int mkx_part_fork(mkx_sm_part *p, mkx_part_lane *l, void *user, void **run) {
  (void)p, (void)l;
  *run = user;
  return MKX_SUCCESS;
}
int mkx_part_join(mkx_part_lane *l, void *user, void *run) {
  (void)l, (void)user, (void)run;
  return MKX_SUCCESS;
}
void mkx_part_lane_free(mkx_part_lane *l) { (void)l; }
#endif
