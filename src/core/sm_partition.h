/* The one owner of the SMs that MKX's kernels run on where ranks share a
 * GPU under MPS (docs/shared-gpu.md, "SM partitions").
 *
 * Each process's kernels of MKX run in a green context holding one of
 * `groups` equal groups of the GPU's SMs: under MPS a client's work in it
 * takes at most that many SMs at a time, so the waiting kernels of one rank
 * can never hold the SMs another rank's kernel needs to start.  Partitions
 * are kept per process and device, and shared (counted) by every
 * communicator that asks for the same split; a lane is one communicator's
 * stream on its partition, forked from the caller's stream before a call's
 * work and joined back after it.  Knows no communicator.  Without CUDA, or
 * where the driver lacks green contexts (before CUDA 12.5), making one
 * fails with MKX_ERR_UNSUPPORTED. */
#ifndef MKX_CORE_SM_PARTITION_H
#define MKX_CORE_SM_PARTITION_H

typedef struct mkx_sm_part mkx_sm_part;

/* What the device lets a split do (zeros without CUDA or green contexts):
 * its SMs as this process sees them, the smallest group, and the step
 * group sizes come in. */
typedef struct mkx_sm_part_limits {
  int sms, min_sms, align;
} mkx_sm_part_limits;
int mkx_sm_part_limits_of(int device, mkx_sm_part_limits *out);

/* SMs of each of `groups` equal groups of the limits' SMs (a multiple of
 * align, at least min_sms), or 0 where they cannot all have one.  Pure. */
int mkx_sm_part_size(const mkx_sm_part_limits *l, int groups);

/* This process's partition: group `index` of `groups` groups of `sms`
 * SMs of `device` (made, or the same split counted once more).
 * MKX_ERR_UNSUPPORTED with the reason where it cannot be made, *refused
 * set where the driver refuses the split itself: an MPS client
 * provisioned with a share of its own (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE,
 * in its environment or the daemon's) cannot split it. */
int mkx_sm_part_get(int device, int groups, int index, int sms,
                    mkx_sm_part **out, int *refused);
/* Counted with mkx_sm_part_get; the last put destroys it. */
void mkx_sm_part_put(mkx_sm_part *p);
/* Another holder of p (p may be NULL). */
mkx_sm_part *mkx_sm_part_ref(mkx_sm_part *p);
int mkx_sm_part_sms(const mkx_sm_part *p);

/* A new non-blocking stream whose kernels run in the partition (p NULL:
 * an ordinary one); cudaStream_t, destroyed with cudaStreamDestroy. */
int mkx_sm_part_stream(mkx_sm_part *p, void **stream);

/* One communicator's stream on a partition, made on its first fork. */
typedef struct mkx_part_lane {
  void *stream, *ev_fork, *ev_join;
} mkx_part_lane;
/* Make l's stream and events on p (nothing for p NULL); made where no
 * stream is being captured, since mkx_part_fork would otherwise make them
 * on first use. */
int mkx_part_lane_init(mkx_sm_part *p, mkx_part_lane *l);
/* *run: the stream a call's work goes on, ordered after what `user`
 * holds so far (captured along with it while `user` is being captured);
 * p NULL: `user` itself. */
int mkx_part_fork(mkx_sm_part *p, mkx_part_lane *l, void *user, void **run);
/* `user` waits for what the call put on `run` (nothing where run is user). */
int mkx_part_join(mkx_part_lane *l, void *user, void *run);
void mkx_part_lane_free(mkx_part_lane *l);

#endif
