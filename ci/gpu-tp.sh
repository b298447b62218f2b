#!/bin/bash
# On the 2-GPU machine (device tool): build only what the fused tensor-parallel
# paths need from the carried autotools files, run their test on 1
# and 2 ranks and the timeout test on 2, then a short benchmark (mkx_perf tp)
# and PyTorch's async TP.
#   carry: configure aclocal.m4 config.h.in Makefile.in config .carry
# Logs go to $OUT.  Env: TP_PERF_ARGS (default: M = N = K = 8192, 10 reps),
# TP_TORCH=0 skips the PyTorch script, TP_TESTS=0 skips the tests,
# TP_NPS: rank counts of the test (default "1 2"), TP_RANKS: ranks of the
# timeout test, the benchmark and PyTorch (default 2), TP_HIER_VNODE=G also
# runs test_hier and the several-node benchmark on TP_RANKS ranks as
# virtual nodes of G (TP_RANKS=8 TP_NPS="4 8" TP_HIER_VNODE=4 on
# 8 GPUs), TP_PERF_OVERLAP lists values of option tp_overlap to benchmark (default:
# auto).
set -o pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/mkx-out}
mkdir -p "$out"
cd "$top"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
summary=$out/summary.txt logs=$out/logs
# shellcheck source=ci/gpu/lib.sh
. "$top/ci/gpu/lib.sh" # provide_openblas
provide_openblas || { echo "no OpenBLAS and none carried"; exit 1; }
nvidia-smi -L | tee "$out/summary.txt"

t0=$(date +%s)
mkdir -p build-tp && cd build-tp
if ! { ../configure --disable-maintainer-mode --disable-static CC=mpicc &&
       make -j"$(nproc)" libmkx_internal.la tests/libmkxtest.la \
         tests/gpu/test_fused_tp tests/gpu/test_fused_timeout \
         tests/mpi/test_hier mkx_perf; } \
       >"$out/build.log" 2>&1; then
  tail -n 60 "$out/build.log"; echo "BUILD FAILED"; exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s" | tee -a "$out/summary.txt"
mpirun="mpirun --allow-run-as-root --oversubscribe"
ranks=${TP_RANKS:-2}
# run_test NAME NP LOG [ARGS]: one GPU test (tests/gpu or tests/mpi/NAME),
# summarised
run_test() {
  local t0 rc prog=tests/gpu/$1
  [ -x "$prog" ] || prog=tests/mpi/$1
  t0=$(date +%s)
  # shellcheck disable=SC2086
  MKX_FUSED=auto timeout -k 5 "${TP_TEST_TIMEOUT:-90}" $mpirun -np "$2" \
    "$prog" ${4:-} >"$out/$3" 2>&1
  rc=$?
  echo "$1 np=$2: rc=$rc, $(grep -c '^ok' "$out/$3") ok," \
    "$(grep -c '^not ok' "$out/$3") not ok, $(( $(date +%s) - t0 )) s" |
    tee -a "$out/summary.txt"
  grep '^not ok' "$out/$3" | head -n 20
  tail -n 3 "$out/$3"
}
if [ "${TP_TESTS:-1}" = 1 ]; then
  for np in ${TP_NPS:-1 2}; do run_test test_fused_tp $np "test-np$np.log"; done
  run_test test_fused_timeout "$ranks" "timeout-np$ranks.log"
  [ -n "${TP_HIER_VNODE:-}" ] && MKX_TEST_VNODE=$TP_HIER_VNODE \
    run_test test_hier "$ranks" "hier-np$ranks.log" --device
fi
t0=$(date +%s)
for ov in ${TP_PERF_OVERLAP:-auto}; do
  # shellcheck disable=SC2086
  timeout -k 5 "${TP_PERF_TIMEOUT:-60}" $mpirun -np "$ranks" ./mkx_perf tp \
    ${TP_PERF_ARGS:---reps 10} --overlap "$ov" 2>&1 | tee -a "$out/perf.txt"
  echo "perf (tp_overlap=$ov): rc=$?, $(( $(date +%s) - t0 )) s" |
    tee -a "$out/summary.txt"
done
if [ -n "${TP_HIER_VNODE:-}" ]; then
  t0=$(date +%s)
  timeout -k 5 "${TP_PERF_TIMEOUT:-60}" $mpirun -np "$ranks" ./mkx_perf tp \
    --vnode "$TP_HIER_VNODE" --hier nvlink --reps 5 2>&1 |
    tee -a "$out/perf-hier.txt"
  echo "perf (virtual nodes of $TP_HIER_VNODE): rc=$?," \
    "$(( $(date +%s) - t0 )) s" | tee -a "$out/summary.txt"
fi
if [ "${TP_TORCH:-1}" = 1 ]; then
  t0=$(date +%s)
  timeout -k 5 "${TP_TORCH_TIMEOUT:-60}" torchrun --nproc_per_node "$ranks" \
    ../tests/perf/torch_async_tp.py ${TP_TORCH_ARGS:---reps 10} 2>&1 |
    grep -v '^W1\|^\[W' | tee "$out/torch.txt"
  echo "torch: rc=$?, $(( $(date +%s) - t0 )) s" | tee -a "$out/summary.txt"
fi
cat "$out/summary.txt"
