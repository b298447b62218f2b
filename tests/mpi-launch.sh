#!/bin/sh
# Run one MPI test named like tests/mpi/test_x-np3.mpi (or -np3-gpu.mpi,
# -np3-WORD.mpi, -np3-WORD-gpu.mpi): the program tests/mpi/test_x on 3
# ranks (with --device for -gpu, --WORD for another word).
# MKX_TEST_LAUNCHER picks the launcher, with %N for the rank count, e.g.
#   MKX_TEST_LAUNCHER='srun -n %N --mpi=pmix'
# Default: mpirun, oversubscribed (CI has 2 cores).  A run that hangs is
# killed after MKX_TEST_TIMEOUT seconds (default 600) and fails.
set -u
name=$1
base=${name%.mpi}
gpu=
case $base in
  *-gpu) gpu=--device; base=${base%-gpu} ;;
esac
case $base in
  *-np*-*) gpu="$gpu --${base##*-}"; base=${base%-*} ;;
esac
np=${base##*-np}
prog=${base%-np*}
[ -x "$prog" ] || prog=./$prog
launcher=${MKX_TEST_LAUNCHER:-}
if [ -z "$launcher" ]; then
  launcher="${MPIRUN:-mpirun} --oversubscribe -np %N"
  [ "$(id -u)" = 0 ] && launcher="$launcher --allow-run-as-root"
fi
cmd=$(printf '%s' "$launcher" | sed "s/%N/$np/g")
# The host oracle's BLAS: one share of the cores per rank (OpenBLAS's
# threads spin, and np ranks of one thread per core each crawl).
if [ -z "${OPENBLAS_NUM_THREADS:-}" ]; then
  t=$(( $(nproc 2>/dev/null || echo 1) / np ))
  OPENBLAS_NUM_THREADS=$(( t > 0 ? t : 1 ))
  export OPENBLAS_NUM_THREADS
fi
# shellcheck disable=SC2086
exec timeout -k 10 "${MKX_TEST_TIMEOUT:-600}" $cmd "$prog" $gpu
