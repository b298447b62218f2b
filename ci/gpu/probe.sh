# Stage probe, one GPU: the candidate SM partitions, measured
# (tests/gpu/probe_sm_partition.c, probe.txt): under MPS at its defaults on
# 2, 4 and 8 ranks each way, every client at 100/N percent by its own
# environment, the daemon's default percentage at 25, and in time slices;
# then which CUDA calls of one client wait for another client's kernels
# (drain).
# MKX_GPU_CHECK_PROBE="none green affinity drain": the modes to run.
# shellcheck shell=bash

[ "$ngpu" = 1 ] || return 0
pb=/tmp/mkx-probe
modes=${MKX_GPU_CHECK_PROBE:-none green affinity drain}
mkdir -p "$pb"
if nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a \
     -c tests/gpu/sm_hold_kernels.cu -o "$pb/hold.o" >"$logs/probe-build.log" 2>&1 &&
   mpicc -std=c11 -O2 -I/usr/local/cuda/include -Itests/gpu \
     tests/gpu/probe_sm_partition.c "$pb/hold.o" -L/usr/local/cuda/lib64 \
     -lcudart -lstdc++ -o "$pb/probe" >>"$logs/probe-build.log" 2>&1; then
  probe() { # probe LABEL NP MODE [mpirun args...]
    local label=$1 np=$2 mode=$3
    shift 3
    case " $modes " in *" $mode "*) ;; *) return 0 ;; esac
    echo "## $label, $np ranks, $mode" >>"$out/probe.txt"
    timeout -k 5 90 mpirun --oversubscribe -np "$np" "$@" "$pb/probe" "$mode" \
      >>"$out/probe.txt" 2>&1 ||
      { echo "rc=$?" >>"$out/probe.txt"; rc_all=1; mps_stop; }
  }
  if mps_start; then
    for np in 2 4 8; do
      for mode in none green affinity; do probe "MPS defaults" "$np" "$mode"; mps_start; done
    done
    for np in 4 8; do
      for mode in none green; do
        probe "MPS, each client at $((100 / np))%" "$np" "$mode" \
          -x CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$((100 / np))
        mps_start
      done
    done
    probe "MPS defaults" 2 drain
    mps_start
    probe "MPS, each client at 50%" 2 drain -x CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50
    mps_stop
  fi
  # the daemon's default percentage (not seen in the clients' environment)
  mps_pct=25
  if mps_start; then
    for mode in none green; do probe "MPS daemon at 25%" 4 "$mode"; done
    mps_stop
  fi
  mps_pct=
  for mode in none green drain; do probe "time slices" 2 "$mode"; done
  grep -E '^(##|probe|rc=)' "$out/probe.txt" | tee -a "$summary"
  grep -m 8 -E 'attribute SMs|failed|no driver' "$out/probe.txt"
else
  tail -n 20 "$logs/probe-build.log"; fail "probe build FAILED"
fi
