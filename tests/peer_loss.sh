#!/bin/sh
# tests/mpi/test_peer_loss on 3 ranks (with --vnode G: 2 virtual nodes of
# G) under Open MPI's mpirun told to keep the survivors alive when a rank
# exits (--enable-recovery): every survivor must report and finalise (its
# "finalized, 0 failed" line) within the time bound.  Other launchers
# (MKX_TEST_LAUNCHER, srun) do not keep survivors alive: skipped.
# Arguments go to the test (--device: the calls driven by the GPU, skipped
# without a GPU; --vnode G; --op ag|rs|ar).  Without arguments it runs the
# host path twice: the rank dies before a call, and during a series of
# AllGather+GEMM calls (--during).
set -u
prog=tests/mpi/test_peer_loss
[ -x "$prog" ] || { echo "not ok - no $prog here"; exit 1; }
if [ -n "${MKX_TEST_LAUNCHER:-}" ] ||
   ! mpirun --version 2>/dev/null | grep -q "Open MPI"; then
  echo "skip: needs Open MPI's mpirun"
  exit 77
fi
root=
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
one() {
  np=3
  prev=
  for a in "$@"; do
    [ "$prev" = --vnode ] && [ "$a" -gt 1 ] 2>/dev/null && np=$((2 * a))
    prev=$a
  done
  # Open MPI's recovery mode itself sometimes fails under load: mpirun ends
  # the job with a PMIx error before any rank has printed a line.  That run
  # says nothing about MKX, so it is tried again (at most twice more); a run
  # in which any rank printed is judged as it is.
  for try in 1 2 3; do
    timeout -k 10 120 mpirun $root --oversubscribe --enable-recovery \
      --mca orte_abort_on_non_zero_status 0 -np "$np" "$prog" "$@" >peer_loss.out 2>&1
    grep -q "PMIX ERROR" peer_loss.out && ! grep -q "^survivor\|^rank\|^not ok\|^ok" \
      peer_loss.out || break
    echo "# try $try: mpirun failed before any rank printed:"
    sed 's/^/#   /' peer_loss.out
  done
  if grep -q "^skip: no GPU" peer_loss.out; then
    echo "skip: no GPU"
    rm -f peer_loss.out
    return 77
  fi
  ok=$(grep -c "^survivor [0-9]* finalized, 0 failed" peer_loss.out)
  if [ "$ok" = $((np - 1)) ]; then
    echo "ok - all $ok survivors of $np ranks failed the call within the bound, freed the communicator and finalised ($*)"
    rm -f peer_loss.out
    return 0
  fi
  echo "not ok - $ok of $((np - 1)) survivors finished cleanly ($*)"
  cat peer_loss.out
  return 1
}
if [ $# -gt 0 ]; then
  one "$@"
  exit $?
fi
one && one --during
