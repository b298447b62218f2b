# Stage shared, one GPU: several ranks on it, the calls' tests as a user
# runs them: on 2, 3, 4 and 8 ranks under MPS at its defaults (each rank in
# an SM partition), MKX_GPU_CHECK_RUNS full runs each (default 5); on 4
# ranks with the daemon's default percentage at 25 (the clients' own
# shares), and in time slices; the hold check without partitions
# (gpu_partition=none: rank 0's kernel must hold every SM); mkx_perf tp
# --one-rank at 8192^3 on 2 and 4 ranks beside tp_pull=no, and mkx_perf
# tiles on 2 (tiles-results.md).  Then runs
# passed of runs, per test, rank count and mode (shared-runs.txt).
# MKX_GPU_CHECK_SHARED="mps pct sliced hazard perf" picks parts,
# MKX_GPU_CHECK_SHARED_NPS the rank counts under MPS.
# shellcheck shell=bash

[ "$ngpu" = 1 ] || return 0
shared_tests() { # np: the five calls' tests, each a line of the summary
  local np=$1
  MKX_TIMEOUT_MS=30000 run test_fused_tp "$np" "fused-np$np-$MODE.log"
  MKX_TIMEOUT_MS=30000 run test_fused_timeout "$np" "timeout-np$np-$MODE.log"
  MKX_TIMEOUT_MS=30000 run test_ring_attn "$np" "ring-attn-np$np-$MODE.log"
  MKX_TIMEOUT_MS=30000 run test_moe "$np" "moe-np$np-$MODE.log" tests/mpi/test_moe --device
  MKX_TIMEOUT_MS=30000 run test_hier "$np" "hier-np$np-$MODE.log" tests/mpi/test_hier --device
  run test_sm_partition "$np" "sm-partition-np$np-$MODE.log"
}
part() { case " ${MKX_GPU_CHECK_SHARED:-mps pct sliced hazard perf} " in *" $1 "*) return 0 ;; esac; return 1; }
if part perf && [ -x ./mkx_perf ] && mps_start; then
  for np in 2 4; do
    timeout -k 5 240 mpirun --oversubscribe -np "$np" ./mkx_perf tp --one-rank \
      --shape 8192x8192x8192 --reps 10 --versus tp_pull=no \
      --out "$out/tp-shared-results.md" \
      >>"$out/perf-tp.txt" 2>&1 ||
      { fail "mkx_perf tp --one-rank -np $np: rc=$?"; mps_stop; mps_start; }
  done
  # data tiles against the fused calls and the serial chain, 2 ranks
  timeout -k 5 240 mpirun --oversubscribe -np 2 ./mkx_perf tiles \
    --out "$out/tiles-results.md" >>"$out/perf-tiles.txt" 2>&1 ||
    { fail "mkx_perf tiles -np 2: rc=$?"; mps_stop; mps_start; }
fi
if part mps && mps_start; then
  for np in ${MKX_GPU_CHECK_SHARED_NPS:-2 3 4 8}; do
    for i in $(seq "${MKX_GPU_CHECK_RUNS:-5}"); do MODE=mps-$i shared_tests "$np"; done
  done
fi
if part hazard && mps_start; then
  MODE=mps-none MKX_GPU_PARTITION=none MKX_TEST_HOLD_MS=2000 \
    run test_sm_partition 4 sm-partition-np4-none.log
fi
mps_stop
mps_pct=25
if part pct && mps_start; then
  MODE=mps-25pct shared_tests 4
  mps_stop
fi
mps_pct=
if part sliced; then MODE=sliced shared_tests 4; fi
# runs passed of runs, per test, rank count and mode (mps-1..N as mps)
awk '$2 ~ /^np=/ && $3 ~ /^(mps|sliced)/ {
       m = $3; sub(/-[0-9]+$/, "", m); k = $1 " " $2 " " m
       n[k]++; if ($4 == "rc=0") ok[k]++ }
     END { for (k in n) printf "%-44s %d of %d runs passed\n", k, ok[k], n[k] }' \
  "$summary" | sort | tee "$out/shared-runs.txt"
grep '^| ' "$out/perf-tp.txt" 2>/dev/null | tail -n 12
