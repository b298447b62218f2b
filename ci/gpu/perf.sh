# Stage perf (with moeperf.sh and attnperf.sh): mkx_perf gemm, bf16
# and fp8, and torch._scaled_mm on the fp8 shapes (MKX_GPU_CHECK_GEMM=0:
# not); mkx_perf tp: several GPUs: one rank per GPU
# against cuBLAS + NCCL and PyTorch's async TP (MKX_GPU_CHECK_TP=1); one
# GPU: 2 ranks under MPS against the same work on 1 rank (and against option
# MKX_GPU_CHECK_VERSUS=KEY=VALUE), the same in fp8, then --small against
# the staged path.
# Each run on one GPU is bounded at MKX_GPU_CHECK_PERF_BOUND s (default
# 150), and MPS restarted after a run that fails, killed at its bound or not.
# shellcheck shell=bash

[ -x ./mkx_perf ] || return 0
if [ "${MKX_GPU_CHECK_GEMM:-1}" = 1 ]; then
  ./mkx_perf gemm --out "$out/gemm-results.md" >"$logs/perf-gemm.txt" 2>&1 ||
    fail "mkx_perf gemm: rc=$?"
  timeout -k 5 "${MKX_GPU_CHECK_PERF_BOUND:-150}" ./mkx_perf gemm --dtype fp8 \
    --out "$out/gemm-results.md" >"$logs/perf-gemm-fp8.txt" 2>&1 ||
    fail "mkx_perf gemm --dtype fp8: rc=$?"
  # PyTorch's fp8 GEMM on the same shapes, right after
  timeout -k 5 "${MKX_GPU_CHECK_PERF_BOUND:-150}" python3 \
    ../tests/perf/torch_scaled_mm.py >"$out/scaled-mm.txt" 2>&1 ||
    fail "torch_scaled_mm.py: rc=$?"
fi
if [ "$ngpu" -ge 2 ] && [ "${MKX_GPU_CHECK_TP:-0}" = 1 ]; then
  mpirun --oversubscribe -np "$ngpu" ./mkx_perf tp --full --small --reps 10 \
    --out "$out/tp-results.md" >"$out/perf-tp.txt" 2>&1 ||
    fail "mkx_perf tp -np $ngpu: rc=$?"
  # its warnings left out; the run judged by torchrun's status, not grep's
  torchrun --nproc_per_node "$ngpu" ../tests/perf/torch_async_tp.py --full \
    --reps 8 2>&1 | grep -v '^W1\|^\[W' >"$logs/torch.txt"
  trc=${PIPESTATUS[0]}
  [ "$trc" = 0 ] || fail "torch_async_tp.py on $ngpu GPUs: rc=$trc"
elif [ "$ngpu" = 1 ]; then
  mps_start
  bound=${MKX_GPU_CHECK_PERF_BOUND:-150}
  timeout -k 5 "$bound" mpirun --oversubscribe -np 2 ./mkx_perf tp \
    --one-rank --reps 10 \
    ${MKX_GPU_CHECK_VERSUS:+--versus "$MKX_GPU_CHECK_VERSUS"} \
    --out "$out/tp-shared-results.md" >"$out/perf-tp.txt" 2>&1 ||
    { fail "mkx_perf tp --one-rank: rc=$? (bound $bound s)"; mps_stop; mps_start; }
  # fp8 (the _scaled calls, per-tensor scales) against the same on 1 rank,
  # every rank's cuBLASLt fp8 GEMM at once, and AllGather+GEMM reading the
  # rows in place (tp_pull=yes)
  timeout -k 5 "$bound" mpirun --oversubscribe -np 2 ./mkx_perf tp \
    --dtype fp8 --one-rank --reps 10 --versus tp_pull=yes \
    --out "$out/tp-shared-results.md" >"$out/perf-tp-fp8.txt" 2>&1 ||
    { fail "mkx_perf tp --dtype fp8 --one-rank: rc=$? (bound $bound s)"
      mps_stop; mps_start; }
  # the staged path runs the GEMM on the host: one sample per shape, and
  # each call on its own bound so a slow one leaves the others measured
  for op in ag rs ar; do
    timeout -k 5 "$bound" mpirun --oversubscribe -np 2 ./mkx_perf tp \
      --small --op "$op" --versus fused=off --reps 1 \
      --out "$out/tp-shared-results.md" >>"$out/perf-tp.txt" 2>&1 ||
      { fail "mkx_perf tp --small --op $op: rc=$? (bound $bound s)"
        mps_stop; mps_start; }
  done
fi
