#!/bin/bash
# Standalone build + test + benchmark of the Hopper GEMM engine on a GPU machine (no autotools,
# no libtool).  Usage: ci/gpu-gemm.sh [--quick] [--no-perf] [--sanitize] [--perf-args "..."]
#   --sanitize  also runs the small cases under compute-sanitizer memcheck
#   PERF_EXTRA="VAR=value ..."  extra benchmark runs, one per environment setting
# Logs and results go to $OUT (default ./gpu-gemm-out); build products to $BUILD.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mkx-gpu-gemm-out}
BUILD=${BUILD:-/tmp/mkx-gemm-build}
CUDA=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA/bin/nvcc}
QUICK=""; PERF=1; PERF_ARGS=""; SANITIZE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=--quick ;;
    --no-perf) PERF=0 ;;
    --sanitize) SANITIZE=1 ;;
    --perf-args) PERF_ARGS="$2"; shift ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
  shift
done
mkdir -p "$OUT" "$BUILD"
rc=0
echo "== build $(date -u +%FT%TZ)" | tee "$OUT/build.log"
"$NVCC" -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -Xptxas -v -c kernels/gemm/gemm.cu \
    -o "$BUILD/gemm.o" > "$OUT/ptxas.txt" 2>&1 || { cat "$OUT/ptxas.txt"; echo "nvcc failed"; exit 1; }
if grep -E "C7515|C7511|C7508|[Ww]arning" "$OUT/ptxas.txt"; then echo "ptxas warnings (treated as errors)"; rc=1; fi
grep -E "stack frame|registers" "$OUT/ptxas.txt" | sort | uniq -c | tee -a "$OUT/build.log"
CFLAGS="-std=c11 -O2 -Wall -Wextra -Ikernels/gemm -Itests/common -I$CUDA/include"
LIBS="-L$CUDA/lib64 -lcublas -lcudart -lstdc++ -lm"
gcc $CFLAGS tests/gpu/test_gemm_engine.c "$BUILD/gemm.o" $LIBS -o "$BUILD/test_gemm_engine" 2>&1 | tee -a "$OUT/build.log" || exit 1
gcc $CFLAGS tests/perf/mkx_perf.c "$BUILD/gemm.o" $LIBS -o "$BUILD/mkx_perf" 2>&1 | tee -a "$OUT/build.log" || exit 1
[ -x "$BUILD/test_gemm_engine" ] && [ -x "$BUILD/mkx_perf" ] || { echo "link failed"; exit 1; }

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
grep -E "FAIL|SUMMARY|SKIP|error" "$OUT/test.log" | head -40
echo "test exit: $trc"
[ $trc -eq 0 ] || rc=1

if [ $SANITIZE -eq 1 ] && command -v compute-sanitizer >/dev/null; then
  echo "== compute-sanitizer memcheck (small cases) $(date -u +%FT%TZ)"
  timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/test_gemm_engine" --small --quick \
      > "$OUT/sanitizer.log" 2>&1
  src=$?
  grep -E "ERROR SUMMARY|SUMMARY|FAIL" "$OUT/sanitizer.log" | head -20
  echo "sanitizer exit: $src"
  [ $src -eq 0 ] || rc=1
fi

if [ $PERF -eq 1 ]; then
  echo "== perf $(date -u +%FT%TZ)"
  timeout 240 "$BUILD/mkx_perf" gemm --out "$OUT/gemm-results.md" $PERF_ARGS 2>&1 | tee "$OUT/perf.log"
  [ ${PIPESTATUS[0]} -eq 0 ] || rc=1
  if [ -n "${PERF_EXTRA:-}" ]; then   # extra variants, e.g. PERF_EXTRA="MKX_GEMM_EPI=direct"
    for v in $PERF_EXTRA; do
      echo "== perf variant $v"
      env "$v" timeout 240 "$BUILD/mkx_perf" gemm $PERF_ARGS 2>&1 | tee -a "$OUT/perf.log"
    done
  fi
fi
echo "== done $(date -u +%FT%TZ) rc=$rc"
exit $rc
