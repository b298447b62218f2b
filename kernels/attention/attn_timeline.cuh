/*
 * Timeline of the attention engine's consumer warpgroups, a maintainers'
 * measurement.  Built with -DMKX_ATTN_TIMELINE (the `timeline` stage of
 * ci/gpu-check), lane 0 of warps 0 and 2 of consumer warpgroups 0 and 1
 * of CTA 0 stamp clock64 at each step of the main loop, for the first
 * MKX_ATTN_TIMELINE_BLOCKS blocks of their first tile; attention.cu's
 * mkx_attn_timeline_read copies the stamps out.  Otherwise a step is
 * nothing.  The stamps are conditional stores: they split the loop into
 * more basic blocks, which changes how ptxas schedules it a little.
 */
#pragma once

namespace mkx {
namespace attn {

enum Step {
  STEP_TOP,      // the loop's top
  STEP_LANDED,   // K and V of the block in shared memory
  STEP_TURN,     // this warpgroup's turn to issue
  STEP_ISSUED,   // Q K^T and P V issued, turn passed on
  STEP_QK,       // S = Q K^T in registers
  STEP_SOFTMAX,  // mask and softmax done
  STEP_PV,       // P V done, O rescaled
  STEP_END,      // P as fragments: the block's end
  STEPS
};

#ifdef MKX_ATTN_TIMELINE
#define MKX_ATTN_TIMELINE_BLOCKS 256
__device__ long long timeline_stamps[2][2][MKX_ATTN_TIMELINE_BLOCKS][STEPS];
__device__ __forceinline__ void step(bool first_tile, int cw, int tid, int it, Step s) {
  if (first_tile && blockIdx.x == 0 && cw < 2 && (tid & 63) == 0 && it < MKX_ATTN_TIMELINE_BLOCKS)
    timeline_stamps[cw][tid >> 6][it][s] = clock64();
}
#else
__device__ __forceinline__ void step(bool, int, int, int, Step) {}
#endif

}  // namespace attn
}  // namespace mkx
