/* The rule for how many CTAs a fused kernel may take on a shared GPU; see
 * gpu_share.h.  Pure functions, so the unit test reaches every case. */
#include "core/gpu_share.h"

int mkx_gpu_share_bid(int ranks, int mps, int dev_sms, int ctx_sms, int part,
                      int opt_ctas) {
  if (opt_ctas > 0) return opt_ctas;
  int have = ctx_sms > 0 && ctx_sms < dev_sms ? ctx_sms : dev_sms;
  /* Under MPS every rank's waiting kernels run at once: if together they
   * took every SM, one that waits for a peer could hold the SM the peer's
   * kernel (or a copy it waits behind) needs.  Time slices give each rank
   * the whole GPU in turn, so there nothing is held back. */
  if (ranks > 1 && mps) {
    const int even = (part == MKX_PART_CLIENT ? have : dev_sms) / ranks;
    if (part != MKX_PART_GREEN && even < have) have = even;
    have -= MKX_SHARE_SPARE_SMS;
  }
  return have < 1 ? 1 : have;
}

const char *mkx_gpu_part_name(int part) {
  switch (part) {
    case MKX_PART_NONE:
      return "no SM partition";
    case MKX_PART_GREEN:
      return "SM partition";
    case MKX_PART_CLIENT:
      return "the MPS client's own share";
  }
  return "?";
}

const char *mkx_gpu_share_name(int mode) {
  switch (mode) {
    case MKX_SHARE_NONE:
      return "one GPU per rank";
    case MKX_SHARE_MPS:
      return "shared under MPS";
    case MKX_SHARE_TIMESLICED:
      return "shared in time slices (no MPS)";
  }
  return "?";
}
