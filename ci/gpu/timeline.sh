# Stage timeline: the attention engine built with -DMKX_ATTN_TIMELINE
# (attn_tool; kernels/attention/attn_timeline.cuh) and tests/gpu/attn_timeline
# on 4 x 8192 x 16/16 x 128, non-causal and causal: the cycles of each step
# of its main loop (timeline.txt).
# shellcheck shell=bash

tb=/tmp/mkx-timeline
if attn_tool "$tb" attn_timeline "$logs/timeline-build.log" -DMKX_ATTN_TIMELINE; then
  for causal in 0 1; do
    timeout -k 5 60 "$tb/attn_timeline" 4 8192 16 16 128 "$causal" \
      >>"$out/timeline.txt" 2>&1 || fail "attn_timeline causal $causal: rc=$?"
  done
  cat "$out/timeline.txt"
else
  tail -n 40 "$logs/timeline-build.log"; fail "timeline build FAILED"
fi
