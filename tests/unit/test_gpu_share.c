/* The CTA rule for ranks that share a GPU (src/core/gpu_share.c) and the
 * size of their SM partitions (src/core/sm_partition.c): every case of the
 * bid, and the invariant that makes MPS safe: the waiting kernels of all
 * ranks on a GPU leave SMs free for what they wait behind. */
#include <stdio.h>
#include "core/gpu_share.h"
#include "core/sm_partition.h"
#include "../common/check.h"

static void fixed_cases(void) {
  /* one GPU per rank: every SM, or what the MPS context has */
  CHECK(mkx_gpu_share_bid(1, 0, 132, 132, 0, 0) == 132, "exclusive");
  CHECK(mkx_gpu_share_bid(1, 1, 132, 66, 0, 0) == 66, "one MPS client at 50%%");
  CHECK(mkx_gpu_share_bid(1, 0, 132, 0, 0, 0) == 132, "affinity unknown");
  /* time slices: each rank has the whole GPU in its turn */
  CHECK(mkx_gpu_share_bid(2, 0, 132, 132, 0, 0) == 132, "2 ranks, time slices");
  /* MPS: an even share less the spare SMs, and never above the context */
  CHECK(mkx_gpu_share_bid(2, 1, 132, 132, 0, 0) == 66 - MKX_SHARE_SPARE_SMS,
        "2 ranks under MPS");
  CHECK(mkx_gpu_share_bid(4, 1, 132, 132, 0, 0) == 33 - MKX_SHARE_SPARE_SMS,
        "4 ranks under MPS");
  CHECK(mkx_gpu_share_bid(2, 1, 132, 40, 0, 0) == 40 - MKX_SHARE_SPARE_SMS,
        "2 ranks under MPS, context of 40 SMs");
  CHECK(mkx_gpu_share_bid(200, 1, 132, 132, 0, 0) == 1, "at least one CTA");
  /* a partition: every SM of it */
  CHECK(mkx_gpu_share_bid(4, 1, 132, 32, MKX_PART_GREEN, 0) ==
            32 - MKX_SHARE_SPARE_SMS,
        "4 ranks under MPS, a partition of 32 SMs");
  /* the MPS client's own share (seen, or set in the daemon): divided by
   * the ranks, as measured safe */
  CHECK(mkx_gpu_share_bid(4, 1, 128, 32, MKX_PART_CLIENT, 0) ==
            8 - MKX_SHARE_SPARE_SMS,
        "4 ranks under MPS, each client at 25%% in its environment");
  CHECK(mkx_gpu_share_bid(4, 1, 32, 32, MKX_PART_CLIENT, 0) ==
            8 - MKX_SHARE_SPARE_SMS,
        "4 ranks under MPS, each client at 25%% by the daemon");
  /* the option wins */
  CHECK(mkx_gpu_share_bid(2, 1, 132, 132, 0, 100) == 100, "option gpu_ctas");
}

/* Under MPS, for every rank count and context size: the ranks' waiting
 * kernels together leave at least one spare SM per rank. */
static void invariant(void) {
  for (int sms = 1; sms <= 160; sms++)
    for (int ranks = 2; ranks <= 16 && ranks * 3 <= sms; ranks++)
      for (int ctx = 1; ctx <= sms; ctx += 7) {
        static const int parts[] = {MKX_PART_NONE, MKX_PART_CLIENT};
        for (int i = 0; i < 2; i++) {
          const int part = parts[i],
                    b = mkx_gpu_share_bid(ranks, 1, sms, ctx, part, 0);
          CHECK(b >= 1 && b <= ctx && ranks * (b + MKX_SHARE_SPARE_SMS) <= sms,
                "%d SMs, %d ranks, context %d (%s): bid %d", sms, ranks, ctx,
                mkx_gpu_part_name(part), b);
        }
      }
}

/* Partitions: equal, in the GPU's steps, never below its smallest, and
 * all of them fit; with them as the ranks' SMs the invariant holds too. */
static void partitions(void) {
  const mkx_sm_part_limits h100 = {132, 8, 8};
  CHECK(mkx_sm_part_size(&h100, 2) == 64, "2 ranks: %d",
        mkx_sm_part_size(&h100, 2));
  CHECK(mkx_sm_part_size(&h100, 3) == 40, "3 ranks: %d",
        mkx_sm_part_size(&h100, 3));
  CHECK(mkx_sm_part_size(&h100, 4) == 32, "4 ranks: %d",
        mkx_sm_part_size(&h100, 4));
  CHECK(mkx_sm_part_size(&h100, 8) == 16, "8 ranks: %d",
        mkx_sm_part_size(&h100, 8));
  CHECK(mkx_sm_part_size(&h100, 16) == 8, "16 ranks: %d",
        mkx_sm_part_size(&h100, 16));
  CHECK(mkx_sm_part_size(&h100, 17) == 0, "17 ranks: none");
  CHECK(mkx_sm_part_size(&h100, 0) == 0, "no ranks");
  for (int sms = 8; sms <= 160; sms++)
    for (int min = 1; min <= 8; min *= 2)
      for (int ranks = 2; ranks <= 16; ranks++) {
        const mkx_sm_part_limits l = {sms, min, min};
        const int each = mkx_sm_part_size(&l, ranks);
        if (!each) {
          CHECK(sms / ranks < min, "%d SMs, %d ranks: none", sms, ranks);
          continue;
        }
        const int b = mkx_gpu_share_bid(ranks, 1, sms, each, MKX_PART_GREEN, 0);
        CHECK(each % min == 0 && each >= min && ranks * each <= sms && b >= 1 &&
                  (each <= MKX_SHARE_SPARE_SMS ||
                   ranks * (b + MKX_SHARE_SPARE_SMS) <= sms),
              "%d SMs, %d ranks, step %d: %d each, bid %d", sms, ranks, min,
              each, b);
      }
}

int main(void) {
  fixed_cases();
  invariant();
  partitions();
  return check_done("test_gpu_share");
}
