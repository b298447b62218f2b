# Stage attn (with attnperf.sh), one GPU: test_ring_attn on 2 and 4 ranks
# sharing it under MPS, one node and as 2 virtual nodes: the network part by
# the host (2 nodes of 1 with hier_attn=host, 2 of 2) and by the GPU
# (hier_attn=proxy over shm and tcp, 2 nodes of 1 and 2 of 2).  Not with
# stage mps, which runs test_ring_attn with the other multi-rank tests.
# shellcheck shell=bash

want mps && return 0
[ "$ngpu" = 1 ] || return 0
if mps_start; then
  MODE=mps
  run test_ring_attn 2 "ring-attn-np2-$MODE.log"
  run test_ring_attn 4 "ring-attn-np4-$MODE.log"
  # as virtual nodes over tcp: 2 nodes of 1 rank, 2 nodes of 2
  MODE=mps-vnodes
  MKX_HIER_ATTN=host MKX_VIRTUAL_NODE_SIZE=1 run test_ring_attn 2 "ring-attn-np2-vn1.log"
  MKX_VIRTUAL_NODE_SIZE=2 run test_ring_attn 4 "ring-attn-np4-vn2.log"
  # the other nodes' chunks driven by the GPU, over shm and tcp (a stall
  # ends at a 30 s bound, not the default 300 s)
  MODE=mps-proxy
  MKX_HIER_ATTN=proxy MKX_TIMEOUT_MS=30000 MKX_VIRTUAL_NODE_SIZE=1 MKX_NET=shm \
    run test_ring_attn 2 "ring-attn-np2-vn1-proxy-shm.log"
  MKX_HIER_ATTN=proxy MKX_TIMEOUT_MS=30000 MKX_VIRTUAL_NODE_SIZE=1 MKX_NET=tcp \
    run test_ring_attn 2 "ring-attn-np2-vn1-proxy-tcp.log"
  MKX_HIER_ATTN=proxy MKX_TIMEOUT_MS=30000 MKX_VIRTUAL_NODE_SIZE=2 MKX_NET=shm \
    run test_ring_attn 4 "ring-attn-np4-vn2-proxy-shm.log"
  MKX_HIER_ATTN=proxy MKX_TIMEOUT_MS=30000 MKX_VIRTUAL_NODE_SIZE=2 MKX_NET=tcp \
    run test_ring_attn 4 "ring-attn-np4-vn2-proxy-tcp.log"
else
  no_mps
fi
