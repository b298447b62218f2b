# Stage moe: the grouped expert GEMM and its test, built straight with nvcc
# and mpicc as in stage engine (attn_tool says why each part), the test run
# with --bench (moe.txt).  Alone or with engine only, it is quick.
# MKX_GPU_CHECK_PROFILE=1: also its DeepSeek-like W1 and W2 GEMMs under ncu
# (profile-moe.txt).
# shellcheck shell=bash

t0=$(date +%s)
mb=/tmp/mkx-moe
mkdir -p "$mb"
if nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Ikernels \
     -Xptxas -v -c kernels/moe/grouped_gemm.cu -o "$mb/grouped_gemm.o" \
     >"$logs/moe-build.log" 2>&1 &&
   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Ikernels \
     -Xptxas -v -c kernels/moe/grouped_gemm_swap.cu -o "$mb/grouped_gemm_swap.o" \
     >>"$logs/moe-build.log" 2>&1 &&
   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Ikernels \
     -c kernels/moe/routing.cu -o "$mb/routing.o" >>"$logs/moe-build.log" 2>&1 &&
   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Ikernels \
     -c kernels/common/modules.cu -o "$mb/modules.o" >>"$logs/moe-build.log" 2>&1 &&
   mpicc -std=c11 -O2 -Ikernels -Itests/common -Iinclude -Isrc \
     -I/usr/local/cuda/include tests/gpu/test_moe_engine.c tests/common/num16.c \
     tests/common/check.c src/core/error.c src/core/log.c "$mb/grouped_gemm.o" \
     "$mb/grouped_gemm_swap.o" "$mb/routing.o" "$mb/modules.o" \
     -L/usr/local/cuda/lib64 -lcudart -lstdc++ -lm -o "$mb/test_moe_engine" \
     >>"$logs/moe-build.log" 2>&1; then
  grep -E 'spill|C75' "$logs/moe-build.log" | sort | uniq -c | head -n 8
  timeout -k 5 "${MKX_GPU_CHECK_BOUND:-300}" "$mb/test_moe_engine" --bench \
    >"$out/moe.txt" 2>&1
  mrc=$?
  if [ "${MKX_GPU_CHECK_PROFILE:-0}" = 1 ]; then
    timeout -k 5 200 ncu --clock-control none \
      --kernel-name 'regex:mkx_moe_(gemm|swap)_kernel' --launch-skip 2 \
      --launch-count 2 --section SpeedOfLight --section WarpStateStats \
      --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section SchedulerStats --section LaunchStats \
      "$mb/test_moe_engine" --profile >"$out/profile-moe.txt" 2>&1 ||
      fail "ncu (moe) rc=$?"
  fi
  note "test_moe_engine rc=$mrc: $(grep -c '^ok' "$out/moe.txt") ok," \
    "$(grep -c '^not ok' "$out/moe.txt") not ok, $(( $(date +%s) - t0 )) s"
  grep -m 20 '^not ok' "$out/moe.txt"
  [ "$mrc" = 0 ] || rc_all=1
else
  tail -n 40 "$logs/moe-build.log"; fail "moe build FAILED"
fi
