# Stage tune, one GPU: mkx_perf tune on 4 ranks as two virtual nodes of 2
# over the emulated rail (rail in lib.sh), under MPS: the roles' CTAs
# (ops/roles.c) pinned over a sweep (MKX_GPU_CHECK_TUNE_CTAS, default
# 1,2,4,8,16), today's rule and the adaptive split (tune=adapt) after 24
# runs (its search from the rule takes 13 or more; the table's last
# column says by which run it first came within 1.03x), for AllGather+GEMM, GEMM+ReduceScatter and GEMM+AllReduce at six
# shapes from M = 512 to 16384; then a second job on the first's tuner
# cache, whose first runs show whether the splits came back
# (perf-tune.txt; tune-results.md, tune-sweep.svg and the cache in logs.tgz:
# the device tool brings back few files).  MKX_GPU_CHECK_TUNE_ARGS: the
# arguments of mkx_perf tune beyond these (default --alone --runs 24: one
# communicator at a time, in passes forth and back; e.g. --grouped,
# --passes N, --shape MxNxK).
# tune-load.txt (logs.tgz): the host's load each second meanwhile.  Each rank
# on 3 cores of its own (MKX_GPU_CHECK_TUNE_PE; 0: unbound): its proxy and
# shm threads are never moved, nor share a core with another rank's.
# shellcheck shell=bash

[ "$ngpu" = 1 ] && [ -x ./mkx_perf ] || return 0
# The host's load beside it, each second (threads runnable; the busiest
# threads once a minute): whether the host threads are oversubscribed.
tune_load() {
  local i=0
  while sleep 1; do
    # shellcheck disable=SC2009 # the threads' states, not a process by name
    echo "$(date +%T) $(cut -d' ' -f1-4 /proc/loadavg) runnable=$(ps -eLo stat= | grep -c '^R')"
    if [ $((i++ % 60)) = 5 ]; then
      ps -eLo pcpu=,comm= --sort=-pcpu | head -24 | sed 's/^/  /'
    fi
  done
}
if mps_start; then
  rm -f "$logs/tune-cache.txt"
  tune_load >"$logs/tune-load.txt" 2>&1 &
  load_pid=$!
  for job in first cached; do
    plot=()
    [ "$job" = first ] && plot=(--plot "$logs/tune-sweep.svg")
    # shellcheck disable=SC2086 # the extra arguments are words
    capped pinned "${MKX_GPU_CHECK_PERF_BOUND:-300}" 4 "${MKX_GPU_CHECK_TUNE_PE:-3}" \
      ./mkx_perf tune --vnode 2 \
      --net shm --hier proxy --ctas "${MKX_GPU_CHECK_TUNE_CTAS:-1,2,4,8,16}" \
      --cache "$logs/tune-cache.txt" --out "$logs/tune-results.md" \
      ${MKX_GPU_CHECK_TUNE_ARGS---alone --runs 24} \
      "${plot[@]}" \
      >>"$out/perf-tune.txt" 2>&1 ||
      fail "mkx_perf tune ($job job): rc=$?"
  done
  kill "$load_pid" 2>/dev/null
  echo "host load during tune (1-min loadavg max, runnable threads max):" \
    "$(awk '/runnable=/ {if ($2 + 0 > l) l = $2 + 0; split($NF, a, "="); if (a[2] + 0 > r) r = a[2] + 0} END {print l, r}' "$logs/tune-load.txt")" >>"$out/perf-tune.txt"
  mps_stop
fi
