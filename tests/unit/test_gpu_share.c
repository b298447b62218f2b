/* The CTA rule for ranks that share a GPU (src/core/gpu_share.c): every
 * case of the bid, and the invariant that makes MPS safe: the waiting
 * kernels of all ranks on a GPU leave SMs free for what they wait behind. */
#include <stdio.h>
#include "core/gpu_share.h"
#include "../common/check.h"

static void fixed_cases(void) {
  /* one GPU per rank: every SM, or what the MPS context has */
  CHECK(mkx_gpu_share_bid(1, 0, 132, 132, 0) == 132, "exclusive");
  CHECK(mkx_gpu_share_bid(1, 1, 132, 66, 0) == 66, "one MPS client at 50%%");
  CHECK(mkx_gpu_share_bid(1, 0, 132, 0, 0) == 132, "affinity unknown");
  /* time slices: each rank has the whole GPU in its turn */
  CHECK(mkx_gpu_share_bid(2, 0, 132, 132, 0) == 132, "2 ranks, time slices");
  /* MPS: an even share less the spare SMs, and never above the context */
  CHECK(mkx_gpu_share_bid(2, 1, 132, 132, 0) == 66 - MKX_SHARE_SPARE_SMS,
        "2 ranks under MPS");
  CHECK(mkx_gpu_share_bid(4, 1, 132, 132, 0) == 33 - MKX_SHARE_SPARE_SMS,
        "4 ranks under MPS");
  CHECK(mkx_gpu_share_bid(2, 1, 132, 40, 0) == 40 - MKX_SHARE_SPARE_SMS,
        "2 ranks under MPS, context of 40 SMs");
  CHECK(mkx_gpu_share_bid(200, 1, 132, 132, 0) == 1, "at least one CTA");
  /* the option wins */
  CHECK(mkx_gpu_share_bid(2, 1, 132, 132, 100) == 100, "option gpu_ctas");
}

/* Under MPS, for every rank count and context size: the ranks' waiting
 * kernels together leave at least one spare SM per rank. */
static void invariant(void) {
  for (int sms = 1; sms <= 160; sms++)
    for (int ranks = 2; ranks <= 16 && ranks * 3 <= sms; ranks++)
      for (int ctx = 1; ctx <= sms; ctx += 7) {
        const int b = mkx_gpu_share_bid(ranks, 1, sms, ctx, 0);
        CHECK(b >= 1 && b <= ctx && ranks * (b + MKX_SHARE_SPARE_SMS) <= sms,
              "%d SMs, %d ranks, context %d: bid %d", sms, ranks, ctx, b);
      }
}

int main(void) {
  fixed_cases();
  invariant();
  return check_done("test_gpu_share");
}
