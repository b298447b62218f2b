# Stage check: make check, every test, the MPI ones on 1-4 ranks; on a
# machine with fewer GPUs than ranks, ranks share a GPU in time slices.
# results.txt: a line per test; logs/failures.txt: what the failed ones said.
# MKX_GPU_CHECK_TESTS="a.mpi b.mpi": only those.
# shellcheck shell=bash

t0=$(date +%s)
make check ${MKX_GPU_CHECK_TESTS:+TESTS="$MKX_GPU_CHECK_TESTS"} \
  >"$logs/check.log" 2>&1 || rc_all=1
grep -hE '^(PASS|FAIL|SKIP|ERROR):' "$logs/check.log" >"$out/results.txt"
# shellcheck disable=SC2013 # test logs are named without spaces
for log in $(grep -lE '^(FAIL|ERROR)' tests/*/*.log examples/*.log 2>/dev/null); do
  echo "=== $log"; grep -m 20 -E '^not ok|^case .*FAIL' "$log"; tail -n 30 "$log"
done | tee "$logs/failures.txt"
note "make check ($ngpu GPU(s); ranks beyond them share one in time slices):" \
  "$(grep -c '^PASS' "$out/results.txt") pass," \
  "$(grep -cE '^(FAIL|ERROR)' "$out/results.txt") fail," \
  "$(grep -c '^SKIP' "$out/results.txt") skip, $(( $(date +%s) - t0 )) s"
grep -E '^(FAIL|ERROR)' "$out/results.txt" | tee -a "$summary"
