# Stage sliced, one GPU: the fused tests on 2 ranks sharing it in time
# slices (no MPS).
# shellcheck shell=bash

[ "$ngpu" = 1 ] || return 0
MODE=sliced
run test_fused_tp 2 "fused-np2-$MODE.log"
run test_fused_timeout 2 "timeout-np2-$MODE.log"
