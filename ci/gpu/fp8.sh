# Stage fp8, one GPU, under MPS (started and stopped here): the fp8 calls on
# device buffers on 2 ranks (test_fp8 --device: the fused split path, the
# AllGather+GEMM read in place with tp_pull=yes, capture; test_fp8_moe
# --device), then mkx_perf tp --dtype fp8 --op ag --one-rank with
# tp_pull=yes beside the split path (perf-tp-fp8.txt).
# shellcheck shell=bash

[ "$ngpu" = 1 ] && [ -x ./mkx_perf ] || return 0
if mps_start; then
  MODE=mps
  run test_fp8 2 "fp8-np2-$MODE.log" tests/mpi/test_fp8 --device
  run test_fp8_moe 2 "fp8-moe-np2-$MODE.log" tests/mpi/test_fp8_moe --device
  bound=${MKX_GPU_CHECK_PERF_BOUND:-150}
  timeout -k 5 "$bound" mpirun --oversubscribe -np 2 ./mkx_perf tp \
    --dtype fp8 --op ag --one-rank --reps 10 --versus tp_pull=yes \
    --out "$out/tp-shared-results.md" >"$out/perf-tp-fp8.txt" 2>&1 ||
    fail "mkx_perf tp --dtype fp8 --versus tp_pull=yes: rc=$? (bound $bound s)"
  mps_stop
fi
