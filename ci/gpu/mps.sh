# Stage mps (or mps2, mps4: its 2-rank or its 3-8-rank part only), one GPU:
# under MPS (started and stopped here, by PID) every multi-rank GPU test on
# 2 ranks sharing the GPU, the fused test's repeated calls 20 times on 2
# ranks (MKX_GPU_CHECK_REPEAT) and once with the legacy stream held
# (MKX_TEST_SETUP_DELAY_MS), then every multi-rank GPU test on 3, 4 and 8
# ranks (MKX_GPU_CHECK_SHARED_NPS).
# With several GPUs (stage mps only): the same tests with one rank per GPU,
# on 2 ranks and, with 4 GPUs or more, on 4.
# shellcheck shell=bash

# multi_rank NP: the multi-rank GPU tests, each on NP ranks
multi_rank() {
  local np=$1
  run test_fused_tp "$np" "fused-np$np-$MODE.log"
  run test_fused_timeout "$np" "timeout-np$np-$MODE.log"
  run test_ring_attn "$np" "ring-attn-np$np-$MODE.log"
  run test_hier "$np" "hier-np$np-$MODE.log" tests/mpi/test_hier --device
  run test_gemm_ops "$np" "ops-np$np-$MODE.log" tests/mpi/test_gemm_ops --device
  run test_plans "$np" "plans-np$np-$MODE.log" tests/mpi/test_plans --device
  run test_symm "$np" "symm-np$np-$MODE.log"
  run test_moe "$np" "moe-np$np-$MODE.log" tests/mpi/test_moe --device
  run test_sm_partition "$np" "sm-partition-np$np-$MODE.log"
  run test_tiles "$np" "tiles-np$np-$MODE.log"
  run test_tiles_args "$np" "tiles-args-np$np-$MODE.log" \
    tests/mpi/test_tiles_args --device
  [ "$np" = 2 ] && run test_proxy_gpu 2 "proxy-np2-$MODE.log"
  [ "$np" = 2 ] && run test_net_shm_ipc 2 "shm-ipc-np2-$MODE.log" \
    tests/mpi/test_net_shm_ipc --device
}

if want mps && [ "$ngpu" -ge 2 ]; then
  MODE=own-gpu
  for np in 2 $([ "$ngpu" -ge 4 ] && echo 4); do multi_rank "$np"; done
fi
if [ "$ngpu" = 1 ]; then
  if mps_start; then
    if want mps || want mps2; then
      MODE=mps
      multi_rank 2
      # The repeated calls (back-to-back, plans, graphs) that once found the
      # previous inputs, each run a fresh job; then with the legacy stream held.
      MODE=mps-repeat
      for i in $(seq "${MKX_GPU_CHECK_REPEAT:-20}"); do
        MKX_TEST_PART=repeat run test_fused_tp 2 "repeat-$i.log"
      done
      MODE=mps-held
      MKX_TEST_PART=repeat MKX_TEST_SETUP_DELAY_MS=100 \
        run test_fused_tp 2 "repeat-held.log"
    fi
    # more ranks last: their fused test is the slowest run of all; a stall
    # ends at a 30 s bound, not the default 300 s
    MODE=mps
    if want mps || want mps4; then
      for np in ${MKX_GPU_CHECK_SHARED_NPS:-3 4 8}; do
        MKX_TIMEOUT_MS=30000 multi_rank "$np"
      done
    fi
  else
    no_mps
  fi
fi
