# The helpers of ci/gpu-check and its stages (ci/gpu/<stage>.sh).  The
# stages are sourced into the one shell of gpu-check rather than run on
# their own, so that what one stage leaves behind reaches the next as it
# would in one script: the MPS daemon still running, the failure status
# rc_all, MODE, and the working directory (build/ from stage build on).
# One shell also means one set of names: a stage must not assign those of
# gpu-check and of the helpers (top, out, logs, summary, stages, ngpu,
# rc_all, mps_pid, mps_pct), even as a loop variable.
# Set before this is sourced: top, out, logs, summary; the stages also use
# want and ngpu.
# shellcheck shell=bash

# note LINE...: one line of summary.txt, shown as it comes
note() { echo "$*" | tee -a "$summary"; }
# fail LINE...: the line of a run that failed; the check fails at the end,
# the other runs still go on
fail() { note "$@"; rc_all=1; }
# passed RC: 77 is a test's skip, not a failure
passed() { [ "$1" = 0 ] || [ "$1" = 77 ]; }

provide_openblas() {
  pkg-config --exists openblas 2>/dev/null && return 0
  local d=/opt/mkx-deps lib=/opt/mkx-deps/usr/lib/x86_64-linux-gnu
  for deb in "$top"/.carry/debs/*.deb; do dpkg -x "$deb" "$d" || return 1; done
  mkdir -p "$d/pkgconfig"
  sed "s|/usr/|$d/usr/|g" "$lib/openblas-pthread/pkgconfig/openblas.pc" \
    >"$d/pkgconfig/openblas.pc"
  export PKG_CONFIG_PATH=$d/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  export LD_LIBRARY_PATH=$lib/openblas-pthread:$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LIBRARY_PATH=$lib/openblas-pthread:$lib${LIBRARY_PATH:+:$LIBRARY_PATH}
  export CPATH=$d/usr/include/x86_64-linux-gnu/openblas-pthread${CPATH:+:$CPATH}
}

# ---- MPS: the control daemon, started and stopped by its PID ----------------
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mkx-mps/pipe
export CUDA_MPS_LOG_DIRECTORY=/tmp/mkx-mps/log
mps_pid=
# mps_start: the daemon, unless one this script started still runs
# mps_pct: the daemon's default CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (empty:
# none), kept when a run killed at its bound restarts the daemon
mps_pct=
mps_start() {
  [ -n "$mps_pid" ] && return 0
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if [ -n "$mps_pct" ]; then
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$mps_pct nvidia-cuda-mps-control -d || return 1
  else
    nvidia-cuda-mps-control -d || return 1
  fi
  for _ in $(seq 50); do
    mps_pid=$(pgrep -n -f '^nvidia-cuda-mps-control -d') && return 0
    sleep 0.1
  done
  return 1
}
mps_stop() {
  [ -n "$mps_pid" ] || return 0
  echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
  for _ in $(seq 100); do kill -0 "$mps_pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$mps_pid" 2>/dev/null && kill "$mps_pid"
  mps_pid=
}
no_mps() { fail "MPS: nvidia-cuda-mps-control -d failed"; }

# ---- one test run, summarised in one line -----------------------------------
# run NAME NP LOG [PROG ARGS...]: PROG (default tests/gpu/NAME, else
# tests/mpi/NAME) on NP ranks, bounded at MKX_GPU_CHECK_BOUND s (default
# 300); a run killed at its bound restarts MPS, whose next clients would
# otherwise find the GPU busy.
run() {
  local name=$1 np=$2 log=$3 t0 rc prog
  shift 3
  prog=${1:-tests/gpu/$name}
  [ -x "$prog" ] || prog=tests/mpi/$name
  [ $# -gt 0 ] && shift
  t0=$(date +%s)
  # the host oracle's BLAS threads spin: one share of the cores per rank
  OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-$(( $(nproc) / np ))} \
  timeout -k 5 "${MKX_GPU_CHECK_BOUND:-300}" mpirun --oversubscribe -np "$np" \
    "$prog" "$@" >"$logs/$log" 2>&1
  rc=$?
  note "$(printf '%-26s np=%d %-9s rc=%-3d %5d ok %4d not ok %4d s' \
    "$name" "$np" "${MODE:-}" "$rc" "$(grep -c '^ok' "$logs/$log")" \
    "$(grep -c '^not ok' "$logs/$log")" $(( $(date +%s) - t0 )))"
  grep -m 10 '^not ok' "$logs/$log"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then mps_stop; mps_start; fi
  passed "$rc" || rc_all=1
}

# ---- two virtual nodes over an emulated 400 Gb/s rail -----------------------
# capped CMD...: CMD (a run too) over the shm transport capped at 50 GB/s and
# 3 us
capped() { MKX_NET_SHM_BANDWIDTH=50000 MKX_NET_SHM_LATENCY_US=3 "$@"; }
# unbound BOUND NP PROG ARGS...: PROG on NP ranks, bounded at BOUND s, not
# bound to cores: Open MPI binds each of 2 ranks to one core, where its
# network proxy and shm progress threads would share that core with the
# rank's main thread (docs/inter-node.md)
unbound() {
  local bound=$1 np=$2
  shift 2
  timeout -k 5 "$bound" mpirun --bind-to none --oversubscribe -np "$np" "$@"
}
# rail BOUND NP PROG ARGS...: the same over the capped rail
rail() { capped unbound "$@"; }
# pinned BOUND NP PE PROG ARGS...: PROG on NP ranks of PE cores each (its
# network threads beside its main thread, none moved between cores), bounded
# at BOUND s; PE 0: unbound
pinned() {
  local bound=$1 np=$2 pe=$3
  shift 3
  [ "$pe" -gt 0 ] || { unbound "$bound" "$np" "$@"; return; }
  timeout -k 5 "$bound" mpirun --map-by "slot:PE=$pe" --bind-to core --report-bindings \
    -np "$np" "$@"
}

# ---- tools built straight with nvcc and mpicc (no configure: quick) ---------
# attn_tool DIR NAME LOG [FLAG...]: the attention engine and
# tests/gpu/NAME.c built into DIR/NAME with FLAGs for both, the compilers'
# output in LOG.  The engine registers its module with
# kernels/common/modules.cu; the tests' checks (tests/common/check.c) name
# MKX's last error, hence src/core/error.c and log.c, and mkx.h wants
# mpi.h, hence mpicc.
attn_tool() {
  local dir=$1 name=$2 log=$3
  shift 3
  mkdir -p "$dir"
  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Ikernels "$@" \
    -Xptxas -v -c kernels/attention/attention.cu -o "$dir/attention.o" \
    >"$log" 2>&1 &&
  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Ikernels "$@" \
    -c kernels/common/modules.cu -o "$dir/modules.o" >>"$log" 2>&1 &&
  mpicc -std=c11 -O2 "$@" -Ikernels -Ikernels/gemm -Itests/common -Iinclude \
    -Isrc -I/usr/local/cuda/include "tests/gpu/$name.c" tests/common/num16.c \
    tests/common/check.c src/core/error.c src/core/log.c "$dir/attention.o" \
    "$dir/modules.o" -L/usr/local/cuda/lib64 -lcudart -lstdc++ -lm \
    -o "$dir/$name" >>"$log" 2>&1
}

# the logs as one file: the device tool brings back few files
pack_logs() { tar -C "$out" -czf "$out/logs.tgz" logs && rm -rf "$logs"; }
