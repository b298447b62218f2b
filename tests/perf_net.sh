#!/bin/sh
# mkx_perf net on 2 ranks as 2 virtual nodes, over shm and over tcp, on
# small sizes: the benchmark runs, its exchange delivers the right bytes
# (it checks them and exits 1 otherwise) and it prints a row per size.
# Skipped where mkx_perf is not built (no NCCL) or mpirun is not Open MPI's
# or MPICH's (MKX_TEST_LAUNCHER runs only the .mpi tests).
set -u
prog=./mkx_perf
[ -x "$prog" ] || { echo "skip: no mkx_perf here (built with NCCL only)"; exit 77; }
[ -z "${MKX_TEST_LAUNCHER:-}" ] || { echo "skip: runs under mpirun"; exit 77; }
root=
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
status=0
for net in shm tcp; do
  out=perf_net.$net.out
  if ! timeout -k 10 120 mpirun $root --oversubscribe -np 2 "$prog" net \
      --vnode 1 --net "$net" --bytes 65536 --bytes 4194304 --reps 2 \
      >"$out" 2>&1; then
    echo "not ok - mkx_perf net over $net failed"; cat "$out"; status=1
    continue
  fi
  rows=$(grep -c '^| [0-9]' "$out")
  if [ "$rows" = 2 ]; then
    echo "ok - mkx_perf net over $net: 2 rows"; rm -f "$out"
  else
    echo "not ok - mkx_perf net over $net: $rows rows, want 2"; cat "$out"
    status=1
  fi
done
exit $status
