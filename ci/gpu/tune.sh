# Stage tune, one GPU: the static sweep of the roles' CTAs (ops/roles.c;
# pinned by options net_fwd_ctas and net_sum_ctas) on 4 ranks as two
# virtual nodes of 2 over the emulated rail (rail in lib.sh), under MPS:
# mkx_perf tp, today's share (column mkx) beside each pinned count
# (column versus), AllGather+GEMM for the forward, GEMM+ReduceScatter and
# GEMM+AllReduce for the node sums, at M = 4096 and 16384 (tune-results.md,
# perf-tune.txt).  MKX_GPU_CHECK_TUNE_CTAS: the counts (default 1 2 4 8 16).
# Then the adaptive split (option tune=adapt) beside today's share, timed
# after 3 and after 30 untimed runs of its plan (what its search had).
# shellcheck shell=bash

[ "$ngpu" = 1 ] && [ -x ./mkx_perf ] || return 0
if mps_start; then
  for k in ${MKX_GPU_CHECK_TUNE_CTAS:-1 2 4 8 16}; do
    for op in ag rs ar; do
      key=net_sum_ctas
      [ "$op" = ag ] && key=net_fwd_ctas
      rail "${MKX_GPU_CHECK_PERF_BOUND:-300}" 4 ./mkx_perf tp --op "$op" \
        --vnode 2 --net shm --hier proxy --no-nccl --versus "$key=$k" \
        --shape 4096x8192x8192 --shape 16384x8192x8192 --reps 5 \
        --out "$out/tune-results.md" >>"$out/perf-tune.txt" 2>&1 ||
        fail "mkx_perf tp --op $op --vnode 2 --versus $key=$k: rc=$?"
    done
  done
  for w in 3 30; do
    for op in ag rs ar; do
      rail "${MKX_GPU_CHECK_PERF_BOUND:-300}" 4 ./mkx_perf tp --op "$op" \
        --vnode 2 --net shm --hier proxy --no-nccl --versus tune=adapt \
        --shape 4096x8192x8192 --shape 16384x8192x8192 --warmup "$w" \
        --reps 10 --out "$out/tune-results.md" >>"$out/perf-tune.txt" 2>&1 ||
        fail "mkx_perf tp --op $op --vnode 2 --versus tune=adapt: rc=$?"
    done
  done
  mps_stop
fi
