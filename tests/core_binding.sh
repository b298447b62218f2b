#!/bin/sh
# A rank bound to one core whose communicator has a network endpoint (2
# virtual nodes of 1 over tcp) is warned, once, that the network's threads
# share that core; unbound ranks are not.  Needs Open MPI's mpirun (its
# --bind-to) and 2 cores to bind to; skipped otherwise.
set -u
info=./mkx_info
[ -x "$info" ] || { echo "not ok - no $info here"; exit 1; }
if [ -n "${MKX_TEST_LAUNCHER:-}" ] ||
   ! mpirun --version 2>/dev/null | grep -q "Open MPI"; then
  echo "skip: needs Open MPI's mpirun"
  exit 77
fi
[ "$(nproc)" -ge 2 ] || { echo "skip: needs 2 cores"; exit 77; }
root=
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
run() { # run BIND: mkx_info's stderr and stdout on 2 ranks
  MKX_VIRTUAL_NODE_SIZE=1 MKX_NET=tcp MKX_LOG_LEVEL=warn timeout -k 5 120 \
    mpirun $root --oversubscribe --bind-to "$1" -np 2 "$info" 2>&1
}
fail=0
# expect BIND N WHAT: with --bind-to BIND, N ranks warned
expect() {
  out=$(run "$1") || { echo "not ok - mkx_info (--bind-to $1) failed"; echo "$out"; exit 1; }
  n=$(echo "$out" | grep -c "bound to one core")
  if [ "$n" = "$2" ]; then
    echo "ok - $3"
  else
    echo "not ok - $3: $n ranks warned"; echo "$out" | sed 's/^/# /'
    fail=1
  fi
}
expect core 2 "both ranks bound to one core are warned"
expect none 0 "unbound ranks are not warned"
exit $fail
