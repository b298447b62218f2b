# Stage engine: the attention engine and its test, built straight with nvcc
# and mpicc (attn_tool, no configure: quick), the test run with --bench
# (MKX_GPU_CHECK_ENGINE_ARGS instead), and PyTorch SDPA timed on the same
# shapes (sdpa.txt, which attnperf.sh then reuses).  Alone, it is quick.
# MKX_GPU_CHECK_SDPA=0: the engine alone.
# MKX_GPU_CHECK_PROFILE=1: where the kernels spill (SASS, kept as
# attention.sass) and one shape, non-causal then causal, under ncu at the
# clocks it gets, with the warps' stall reasons (profile.txt).
# shellcheck shell=bash

t0=$(date +%s)
eb=/tmp/mkx-engine
if attn_tool "$eb" test_attn_engine "$logs/engine-build.log"; then
  grep -E 'spill|C75' "$logs/engine-build.log" | sort | uniq -c | head -n 8
  # shellcheck disable=SC2086 # the arguments, split
  timeout -k 5 "${MKX_GPU_CHECK_BOUND:-300}" "$eb/test_attn_engine" ${MKX_GPU_CHECK_ENGINE_ARGS:---bench} \
    >"$out/engine.txt" 2>&1
  erc=$?
  note "test_attn_engine rc=$erc: $(grep -c '^ok' "$out/engine.txt") ok," \
    "$(grep -c '^not ok' "$out/engine.txt") not ok, $(( $(date +%s) - t0 )) s"
  grep -m 20 '^not ok' "$out/engine.txt"
  [ "$erc" = 0 ] || rc_all=1
  if [ "${MKX_GPU_CHECK_SDPA:-1}" = 1 ]; then
    timeout -k 5 300 python3 tests/perf/torch_sdpa.py >"$out/sdpa.txt" 2>&1 ||
      fail "torch_sdpa.py rc=$?"
  fi
  if [ "${MKX_GPU_CHECK_PROFILE:-0}" = 1 ]; then
    cuobjdump -sass "$eb/attention.o" >"$out/attention.sass" 2>&1
    awk '/Function :/ { f = $3 } /STL|LDL/ { n[f]++ }
         END { for (k in n) print n[k], "local accesses in", k }' \
      "$out/attention.sass" >"$out/profile.txt"
    timeout -k 5 300 ncu --clock-control none --launch-skip 2 \
      --launch-count 4 --section SpeedOfLight --section WarpStateStats \
      --section ComputeWorkloadAnalysis --section InstructionStats \
      --section SchedulerStats --section MemoryWorkloadAnalysis \
      --section MemoryWorkloadAnalysis_Tables \
      --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$,regex:^sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active$,regex:^l1tex__data_pipe_lsu_wavefronts_mem_shared.*sum$' \
      "$eb/test_attn_engine" --profile >>"$out/profile.txt" 2>&1 ||
      fail "ncu rc=$?"
  fi
else
  tail -n 40 "$logs/engine-build.log"; fail "engine build FAILED"
fi
