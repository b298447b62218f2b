# Stage net, one GPU: two virtual nodes on it over an emulated 400 Gb/s rail
# (the shm transport capped at 50 GB/s and 3 us: rail and capped in lib.sh),
# the ranks under MPS.
# mkx_perf tp: the three calls driven by the GPU (hier_gemm=proxy) against
# the host-driven hier_gemm=nvlink on 2 ranks over the rail, M = 16384,
# N = K = 8192, with the network proxy's CPU time per call, and over tcp
# loopback at 4096; the three calls on 4 ranks as 2 virtual nodes of 2 over
# the rail, the same way (perf-net.txt, net-results.md).
# test_hier --device over shm (2 ranks; 4 ranks over shm and tcp, also with
# net_gpu_region=host); test_ring_attn on 2 virtual nodes of 2 over shm with
# the default options; test_fused_timeout --net shm and --net tcp (a missing
# and a late rank; also on 4 ranks as 2 virtual nodes of 2).
# peer_loss.sh --device: a rank that dies (3 ranks, and each call on 2
# virtual nodes of 2).
# mkx_perf net: bytes over the same rail alone; mkx_perf attn --small over
# the rail with hier_attn=proxy and host (perf-net-attn.txt);
# test_net_shm_ipc --device: device memory over the rail, capped and not
# (its rate in the summary).
# mkx_perf tp is bounded at MKX_GPU_CHECK_PERF_BOUND s (default 300).
# shellcheck shell=bash

[ "$ngpu" = 1 ] && [ -x ./mkx_perf ] || return 0
# peer_loss LABEL LOG ARG...: tests/peer_loss.sh, its last line in the
# summary
peer_loss() {
  local label=$1 log=$2 rc
  shift 2
  timeout -k 5 200 sh ../tests/peer_loss.sh "$@" >"$logs/$log" 2>&1
  rc=$?
  note "$label: rc=$rc $(tail -n 1 "$logs/$log")"
  passed "$rc" || rc_all=1
}
if mps_start; then
  nbound=${MKX_GPU_CHECK_PERF_BOUND:-300}
  # The calls driven by the GPU against the host-driven nvlink, over the
  # rail, then over tcp loopback.
  rail "$nbound" 2 ./mkx_perf tp --vnode 1 --net shm --hier proxy \
    --versus hier_gemm=nvlink --no-nccl --shape 16384x8192x8192 \
    --reps 5 --out "$out/net-results.md" >"$out/perf-net.txt" 2>&1 ||
    fail "mkx_perf tp --vnode 1 --net shm --hier proxy: rc=$?"
  rail "$nbound" 4 ./mkx_perf tp --op ag --vnode 2 --net shm --hier proxy \
    --versus hier_gemm=nvlink --no-nccl --shape 16384x8192x8192 \
    --reps 5 --out "$out/net-results.md" >>"$out/perf-net.txt" 2>&1 ||
    fail "mkx_perf tp --vnode 2 --net shm --hier proxy: rc=$?"
  for op in rs ar; do
    rail "$nbound" 4 ./mkx_perf tp --op $op --vnode 2 --net shm --hier proxy \
      --versus hier_gemm=nvlink --no-nccl --shape 16384x8192x8192 \
      --reps 5 --out "$out/net-results.md" >>"$out/perf-net.txt" 2>&1 ||
      fail "mkx_perf tp --op $op --vnode 2 --net shm --hier proxy: rc=$?"
  done
  unbound "$nbound" 2 ./mkx_perf tp --vnode 1 --net tcp --hier proxy \
    --versus hier_gemm=nvlink --no-nccl --shape 4096x4096x4096 \
    --reps 3 --out "$out/net-results.md" >>"$out/perf-net.txt" 2>&1 ||
    fail "mkx_perf tp --vnode 1 --net tcp --hier proxy: rc=$?"
  MODE=mps-shm run test_hier 2 hier-np2-shm.log tests/mpi/test_hier --device --shm
  # 2 virtual nodes of 2: AllGather+GEMM driven by the GPU with the
  # forward, GEMM+ReduceScatter with the node sums
  MODE=mps-shm run test_hier 4 hier-np4-shm.log tests/mpi/test_hier --device --shm
  MODE=mps-tcp run test_hier 4 hier-np4-tcp.log tests/mpi/test_hier --device
  # the same with the network region in mapped host memory (no CUDA copy in
  # any transport), and ring attention's calls driven by the GPU on 2 of 2
  # by default (option net_gpu_region=auto puts its region in host memory
  # there: with a device region its back-to-back calls can stop,
  # docs/inter-node.md, Limitations)
  MKX_NET_GPU_REGION=host MODE=mps-shm-host \
    run test_hier 4 hier-np4-shm-host.log tests/mpi/test_hier --device --shm
  MKX_NET_GPU_REGION=host MODE=mps-tcp-host \
    run test_hier 4 hier-np4-tcp-host.log tests/mpi/test_hier --device
  MKX_VIRTUAL_NODE_SIZE=2 MKX_NET=shm MKX_TIMEOUT_MS=10000 MODE=mps-shm-auto \
    run test_ring_attn 4 ring-attn-np4-shm-auto.log
  MODE=mps-shm run test_fused_timeout 2 timeout-np2-shm.log \
    tests/gpu/test_fused_timeout --net shm
  MODE=mps-tcp run test_fused_timeout 2 timeout-np2-tcp.log \
    tests/gpu/test_fused_timeout --net tcp
  MODE=mps-shm run test_fused_timeout 4 timeout-np4-shm.log \
    tests/gpu/test_fused_timeout --net shm --vnode 2
  MODE=mps-tcp run test_fused_timeout 4 timeout-np4-tcp.log \
    tests/gpu/test_fused_timeout --net tcp --vnode 2
  # a rank that dies under a plan driven by the GPU (3 ranks)
  peer_loss "peer_loss.sh --device (3 ranks, shm)" peer-loss-device.log --device
  # and on 2 virtual nodes of 2, each call (the node's flags too)
  for op in ag rs ar; do
    peer_loss "peer_loss.sh --device --vnode 2 --op $op" \
      "peer-loss-device-2x2-$op.log" --device --vnode 2 --op $op
  done
  rail 120 2 ./mkx_perf net --vnode 1 \
    --net shm --bytes 134217728 --bytes 268435456 --bytes 402653184 \
    --reps 5 --out "$out/net-results.md" >>"$out/perf-net.txt" 2>&1 ||
    fail "mkx_perf net --vnode 1 --net shm: rc=$?"
  # ring attention over the same rail: the network part by the GPU, then
  # by the host (the small shapes, S per rank)
  for h in proxy host; do
    MKX_HIER_ATTN=$h MKX_VIRTUAL_NODE_SIZE=1 MKX_NET=shm MKX_TIMEOUT_MS=30000 \
      rail 150 2 ./mkx_perf attn \
      --small --reps 5 --out "$out/net-results.md" >>"$out/perf-net-attn.txt" 2>&1 ||
      fail "mkx_perf attn hier_attn=$h over the rail: rc=$?"
  done
  grep -E '^(###|\| )' "$out/perf-net-attn.txt" | tail -n 30
  grep -E '^[|#]' "$out/perf-net.txt" | tail -n 20
  # the rail with device memory on both sides (copies by CUDA IPC)
  MODE=mps capped run test_net_shm_ipc 2 shm-ipc-capped.log \
    tests/mpi/test_net_shm_ipc --device
  MODE=mps run test_net_shm_ipc 2 shm-ipc-uncapped.log \
    tests/mpi/test_net_shm_ipc --device
  grep -h '^# rank 0 -> 1' "$logs/shm-ipc-capped.log" "$logs/shm-ipc-uncapped.log" |
    tee -a "$summary"
  mps_stop
else
  no_mps
fi
