# Stage moeranks, one GPU: test_moe on 1 rank, on 2 and 4 ranks under MPS
# (the several-rank GPU path), as virtual nodes over shm (2 of 1 rank, 2 of
# 2, 4 of 1, and unequal ones of 2 and 1) and over tcp, with the rows
# between nodes by the host (hier_moe=host), on 2 and 4 with
# moe_release=yes, and on 2 with each moe_gemm kernel.  Not with stage mps,
# which runs test_moe with the other multi-rank tests.
# shellcheck shell=bash

want mps && return 0
[ "$ngpu" = 1 ] || return 0
MODE=one run test_moe 1 "moe-np1.log" tests/mpi/test_moe --device
if mps_start; then
  MODE=mps
  run test_moe 2 "moe-np2-$MODE.log" tests/mpi/test_moe --device
  run test_moe 4 "moe-np4-$MODE.log" tests/mpi/test_moe --device
  # as virtual nodes over shm: 2 nodes of 1 rank, 2 of 2, 4 of 1, and
  # nodes of 2 and 1 ranks (unequal: the staged path)
  MODE=mps-vnodes
  run test_moe 2 "moe-np2-vn1.log" tests/mpi/test_moe --device --vnode=1
  run test_moe 4 "moe-np4-vn2.log" tests/mpi/test_moe --device --vnode=2
  run test_moe 4 "moe-np4-vn1.log" tests/mpi/test_moe --device --vnode=1
  run test_moe 3 "moe-np3-vn2.log" tests/mpi/test_moe --device --vnode=2
  # over tcp instead of shm (the kernels' posts staged by tcp's threads)
  run test_moe 2 "moe-np2-vn1-tcp.log" tests/mpi/test_moe --device --vnode=1 --net tcp
  run test_moe 4 "moe-np4-vn2-tcp.log" tests/mpi/test_moe --device --vnode=2 --net tcp
  # the rows between nodes by the host instead of the kernels
  MKX_HIER_MOE=host run test_moe 2 "moe-np2-vn1-host.log" tests/mpi/test_moe --device --vnode=1
  MKX_HIER_MOE=host run test_moe 4 "moe-np4-vn2-host.log" tests/mpi/test_moe --device --vnode=2
  # rows released as they land (auto: the ranks meet after the gather here)
  for np in 2 4; do
    MODE=mps-release MKX_MOE_RELEASE=yes run test_moe "$np" \
      "moe-np$np-release.log" tests/mpi/test_moe --device
  done
  # auto picks the expert GEMM by rows per expert: every case on each
  for k in rows swap; do
    MODE=mps-$k MKX_MOE_GEMM=$k run test_moe 2 "moe-np2-$k.log" \
      tests/mpi/test_moe --device
  done
  mps_stop
else
  no_mps
fi
