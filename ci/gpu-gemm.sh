#!/bin/bash
# Standalone build + test of the Hopper GEMM engine on a GPU machine (no autotools, no
# libtool): ptxas report, SASS summary, the engine's test, and with --sanitize its small
# cases under compute-sanitizer memcheck.  Its benchmark (mkx_perf gemm) needs the library:
# ci/gpu-check, stage perf.  Usage: ci/gpu-gemm.sh [--quick] [--sanitize]
# Logs go to $OUT; build products to $BUILD.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mkx-gpu-gemm-out}
BUILD=${BUILD:-/tmp/mkx-gemm-build}
CUDA=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA/bin/nvcc}
QUICK=""; SANITIZE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=--quick ;;
    --sanitize) SANITIZE=1 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
  shift
done
mkdir -p "$OUT" "$BUILD"
rc=0
echo "== build $(date -u +%FT%TZ)" | tee "$OUT/build.log"
"$NVCC" -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -Ikernels -Xptxas -v -c kernels/gemm/gemm.cu \
    -o "$BUILD/gemm.o" > "$OUT/ptxas.txt" 2>&1 || { cat "$OUT/ptxas.txt"; echo "nvcc failed"; exit 1; }
if grep -E "C7515|C7511|C7508|[Ww]arning" "$OUT/ptxas.txt"; then echo "ptxas warnings (treated as errors)"; rc=1; fi
grep -E "stack frame|registers" "$OUT/ptxas.txt" | sort | uniq -c | tee -a "$OUT/build.log"
"$NVCC" -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -Ikernels -c kernels/common/modules.cu \
    -o "$BUILD/modules.o" >> "$OUT/build.log" 2>&1 || { echo "nvcc failed (modules.cu)"; exit 1; }
# the test's checks (tests/common/check.c) name MKX's last error (src/core/error.c, log.c);
# mkx.h wants mpi.h, hence mpicc
CFLAGS="-std=c11 -O2 -Wall -Wextra -Ikernels -Ikernels/gemm -Itests/common -Iinclude -Isrc -I$CUDA/include"
LIBS="-L$CUDA/lib64 -lcublas -lcudart -lstdc++ -lm"
mpicc $CFLAGS tests/gpu/test_gemm_engine.c tests/common/num16.c tests/common/check.c \
    src/core/error.c src/core/log.c "$BUILD/gemm.o" "$BUILD/modules.o" $LIBS \
    -o "$BUILD/test_gemm_engine" 2>&1 | tee -a "$OUT/build.log" || exit 1
[ -x "$BUILD/test_gemm_engine" ] || { echo "link failed"; exit 1; }

# SASS: HGMMA per kernel, local memory use
if command -v cuobjdump >/dev/null; then
  cuobjdump -sass "$BUILD/gemm.o" > "$BUILD/gemm.sass" 2>&1
  {
    echo "HGMMA instructions: $(grep -c HGMMA "$BUILD/gemm.sass")"
    echo "HMMA instructions:  $(grep -c ' HMMA' "$BUILD/gemm.sass")"
    echo "LDL/STL (local):    $(grep -cE 'LDL|STL' "$BUILD/gemm.sass")"
    echo "UTMALDG (TMA load): $(grep -c UTMALDG "$BUILD/gemm.sass")"
    echo "per kernel (HGMMA count):"
    awk '/Function :/{f=$3} /HGMMA/{c[f]++} END{for(k in c) print "  " c[k], k}' "$BUILD/gemm.sass" | sort
    echo "one consumer main loop (bf16 128x256 K-major bf16 out):"
    awk '/Function : .*ILi256ELi4ELb1ELb0E13__nv_bfloat16/{p=1} p&&/HGMMA|WARPSYNC|SYNCS|BAR|UTMALDG|USETMAXREG/{print; n++} n>60{exit}' "$BUILD/gemm.sass"
  } > "$OUT/sass-summary.txt"
  head -8 "$OUT/sass-summary.txt"
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv | tee -a "$OUT/build.log"

echo "== test $(date -u +%FT%TZ)"
timeout 150 "$BUILD/test_gemm_engine" $QUICK > "$OUT/test.log" 2>&1
trc=$?
grep -E "^not ok|^# skip|^FAIL|^PASS" "$OUT/test.log" | head -40
echo "test exit: $trc"
[ $trc -eq 0 ] || rc=1

if [ $SANITIZE -eq 1 ] && command -v compute-sanitizer >/dev/null; then
  echo "== compute-sanitizer memcheck (small cases) $(date -u +%FT%TZ)"
  timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/test_gemm_engine" --small --quick \
      > "$OUT/sanitizer.log" 2>&1
  src=$?
  grep -E "ERROR SUMMARY|^not ok|^FAIL|^PASS" "$OUT/sanitizer.log" | head -20
  echo "sanitizer exit: $src"
  [ $src -eq 0 ] || rc=1
fi

echo "== done $(date -u +%FT%TZ) rc=$rc"
exit $rc
