# Stage moenodes, one GPU: mkx_perf moe --small on 2 ranks sharing it under
# MPS as 2 virtual nodes of 1 over shm capped at 50 GB/s and 3 us (a 400
# Gb/s rail: rail in lib.sh): the GPU path with the network driven by the
# GPU, then by the host (hier_moe=host), and the staged one (moe_gpu=one).
# perf-moe.txt, moe-results.md.
# shellcheck shell=bash

[ "$ngpu" = 1 ] && [ -x ./mkx_perf ] || return 0
if mps_start; then
  for gpu in all one host; do
    hm=auto; [ "$gpu" = host ] && { gpu=all; hm=host; }
    MKX_HIER_MOE=$hm MKX_MOE_GPU=$gpu MKX_VIRTUAL_NODE_SIZE=1 MKX_NET=shm \
      rail "${MKX_GPU_CHECK_PERF_BOUND:-150}" 2 \
      ./mkx_perf moe --small --reps 5 --out "$out/moe-results.md" \
      >>"$out/perf-moe.txt" 2>&1 ||
      fail "mkx_perf moe, 2 virtual nodes, moe_gpu=$gpu hier_moe=$hm: rc=$?"
  done
  grep -E '^[|#]' "$out/perf-moe.txt" | tail -n 12
  mps_stop
else
  no_mps
fi
