# Stage tiles, one GPU: the data tiles under MPS (started and stopped here):
# test_tiles on 1, 2 and 3 ranks, test_tiles_args --device on 2, both tile
# examples (tiles_cublas on 1 and 2 ranks, tiles_kernel on 2 and 3), the fp8
# calls on device buffers (test_fp8, test_fp8_moe --device, 2 ranks), then
# mkx_perf tiles on 2 ranks with the reductions' ways of waiting
# (MKX_GPU_CHECK_TILES_VARIANTS: "tiles_reduce:tiles_reduce_ctas" words,
# default persistent 16 and 8, staged) into tiles-results.md.
# shellcheck shell=bash

[ "$ngpu" = 1 ] && [ -x ./mkx_perf ] || return 0
if mps_start; then
  MODE=mps
  for np in 1 2 3; do run test_tiles "$np" "tiles-np$np-$MODE.log"; done
  run test_tiles_args 2 "tiles-args-np2-$MODE.log" tests/mpi/test_tiles_args --device
  run tiles_cublas 1 "ex-cublas-np1-$MODE.log" examples/tiles_cublas
  run tiles_cublas 2 "ex-cublas-np2-$MODE.log" examples/tiles_cublas
  run tiles_kernel 2 "ex-kernel-np2-$MODE.log" examples/tiles_kernel
  run tiles_kernel 3 "ex-kernel-np3-$MODE.log" examples/tiles_kernel
  run test_fp8 2 "fp8-np2-$MODE.log" tests/mpi/test_fp8 --device
  run test_fp8_moe 2 "fp8-moe-np2-$MODE.log" tests/mpi/test_fp8_moe --device
  bound=${MKX_GPU_CHECK_PERF_BOUND:-150}
  for v in ${MKX_GPU_CHECK_TILES_VARIANTS:-persistent:16 persistent:8 staged:16}; do
    timeout -k 5 "$bound" mpirun --oversubscribe -np 2 env \
      MKX_TILES_REDUCE="${v%%:*}" MKX_TILES_REDUCE_CTAS="${v##*:}" \
      ./mkx_perf tiles --out "$out/tiles-results.md" >>"$out/perf-tiles.txt" 2>&1 ||
      { fail "mkx_perf tiles ($v): rc=$? (bound $bound s)"; mps_stop; mps_start; }
  done
  mps_stop
fi
