# Stage fp8, one GPU, under MPS (started and stopped here): the fp8 calls on
# device buffers on 2 ranks (test_fp8 --device: the fused split path, the
# AllGather+GEMM read in place with tp_pull=yes, capture; test_fp8_moe
# --device), then mkx_perf tp --dtype fp8 --op ag --one-rank with
# tp_pull=yes beside the split path (perf-tp-fp8.txt); then on one rank
# alone the fp8 engine tests, mkx_perf gemm --dtype fp8 (one CTA a tile,
# and clusters of 2: MKX_GPU_CHECK_FP8_TILES, default "1 3"), and with
# MKX_MOE_FP8=yes test_fp8_moe --device on one rank (and on 2 under MPS
# above) and mkx_perf moe --fp8 on the DeepSeek-like shape beside the
# PyTorch chains (torch_moe.py --fp8: torch._grouped_mm and, where
# present, torch._scaled_grouped_mm; perf-fp8.txt).
# shellcheck shell=bash

[ "$ngpu" = 1 ] && [ -x ./mkx_perf ] || return 0
if mps_start; then
  MODE=mps
  run test_fp8 2 "fp8-np2-$MODE.log" tests/mpi/test_fp8 --device
  run test_fp8_moe 2 "fp8-moe-np2-$MODE.log" tests/mpi/test_fp8_moe --device
  MKX_MOE_FP8=yes run test_fp8_moe 2 "fp8-moe-np2-$MODE-gpu.log" \
    tests/mpi/test_fp8_moe --device
  bound=${MKX_GPU_CHECK_PERF_BOUND:-150}
  timeout -k 5 "$bound" mpirun --oversubscribe -np 2 ./mkx_perf tp \
    --dtype fp8 --op ag --one-rank --reps 10 --versus tp_pull=yes \
    --out "$out/tp-shared-results.md" >"$out/perf-tp-fp8.txt" 2>&1 ||
    fail "mkx_perf tp --dtype fp8 --versus tp_pull=yes: rc=$? (bound $bound s)"
  mps_stop
fi
bound=${MKX_GPU_CHECK_PERF_BOUND:-150}
MODE=alone
run test_gemm_fp8 1 gemm-fp8.log
run test_moe_fp8_engine 1 moe-fp8-engine.log
for tile in ${MKX_GPU_CHECK_FP8_TILES:-1 3}; do
  timeout -k 5 "$bound" ./mkx_perf gemm --dtype fp8 --tile "$tile" \
    --out "$out/gemm-results.md" >>"$out/perf-fp8.txt" 2>&1 ||
    fail "mkx_perf gemm --dtype fp8 --tile $tile: rc=$? (bound $bound s)"
done
MKX_MOE_FP8=yes run test_fp8_moe 1 "fp8-moe-np1-gpu.log" tests/mpi/test_fp8_moe \
  --device
deepseek=4096,7168,256,8,2048
timeout -k 5 300 python3 ../tests/perf/torch_moe.py --fp8 --shapes "$deepseek" \
  >"$out/torch-moe-fp8.txt" 2>&1 || fail "torch_moe.py --fp8: rc=$?"
MKX_MOE_FP8=yes timeout -k 5 "$bound" mpirun -np 1 ./mkx_perf moe --fp8 \
  --shapes "$deepseek" --versus "$out/torch-moe-fp8.txt" \
  --out "$out/moe-results.md" >>"$out/perf-fp8.txt" 2>&1 ||
  fail "mkx_perf moe --fp8: rc=$? (bound $bound s)"

