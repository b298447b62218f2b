# Stage moeperf, also part of perf: mkx_perf moe beside the PyTorch chain
# (torch_moe.py) on 1 rank, MPS stopped, the same with skewed routing, and
# without the host wait (moe_sync=no); then, one GPU, 2 ranks under MPS on
# the small shapes, with and without it, and on the full shapes with
# moe_release yes and no (no baseline).  perf-moe.txt, moe-results.md; each
# run bounded at MKX_GPU_CHECK_PERF_BOUND s (default 150).
# shellcheck shell=bash

[ -x ./mkx_perf ] || return 0
mbound=${MKX_GPU_CHECK_PERF_BOUND:-150}
mps_stop
timeout -k 5 300 python3 ../tests/perf/torch_moe.py >"$out/torch-moe.txt" 2>&1 ||
  fail "torch_moe.py rc=$?"
timeout -k 5 "$mbound" mpirun --oversubscribe -np 1 ./mkx_perf moe \
  --versus "$out/torch-moe.txt" --out "$out/moe-results.md" \
  >"$out/perf-moe.txt" 2>&1 ||
  fail "mkx_perf moe: rc=$? (bound $mbound s)"
timeout -k 5 "$mbound" mpirun --oversubscribe -np 1 ./mkx_perf moe --skew \
  --out "$out/moe-results.md" >>"$out/perf-moe.txt" 2>&1 ||
  fail "mkx_perf moe --skew: rc=$? (bound $mbound s)"
MKX_MOE_SYNC=no timeout -k 5 "$mbound" mpirun --oversubscribe -np 1 \
  ./mkx_perf moe --out "$out/moe-results.md" \
  >>"$out/perf-moe.txt" 2>&1 ||
  fail "mkx_perf moe, moe_sync=no: rc=$? (bound $mbound s)"
if [ "$ngpu" = 1 ] && mps_start; then
  for sync in yes no; do
    MKX_MOE_SYNC=$sync timeout -k 5 "$mbound" mpirun --oversubscribe -np 2 \
      ./mkx_perf moe --small --reps 5 \
      --out "$out/moe-results.md" >>"$out/perf-moe.txt" 2>&1 ||
      fail "mkx_perf moe -np 2 --small (MPS, moe_sync=$sync): rc=$? (bound $mbound s)"
  done
  # the full shapes on 2 ranks, rows released as they land or not
  for rel in yes no; do
    MKX_MOE_RELEASE=$rel timeout -k 5 "$mbound" mpirun --oversubscribe -np 2 \
      ./mkx_perf moe --reps 5 \
      --out "$out/moe-results.md" >>"$out/perf-moe.txt" 2>&1 ||
      fail "mkx_perf moe -np 2 (MPS, moe_release=$rel): rc=$? (bound $mbound s)"
  done
  mps_stop
fi
