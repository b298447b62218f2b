# Stage check: make check, every test, the MPI ones on 1-4 ranks; on a
# machine with fewer GPUs than ranks, ranks share a GPU in time slices.
# results.txt: a line per test; logs/failures.txt: what the failed ones said.
# MKX_GPU_CHECK_TESTS="a.mpi b.mpi": only those.  MKX_GPU_CHECK_PART=i/n:
# the i-th of n parts of this build's tests (every n-th, from the i-th:
# the suite on one GPU takes longer than one device call may).
# shellcheck shell=bash

# This build's tests (make's TESTS), one per line.
# shellcheck disable=SC2016 # $(TESTS) is make's, not the shell's
all_tests() {
  printf 'print-tests:\n\t@echo $(TESTS)\n' |
    make -s -f Makefile -f - print-tests | tr ' ' '\n' | grep . | sort -u
}

t0=$(date +%s)
tests=${MKX_GPU_CHECK_TESTS:-}
if [ -z "$tests" ] && [ -n "${MKX_GPU_CHECK_PART:-}" ]; then
  part=${MKX_GPU_CHECK_PART%/*} parts=${MKX_GPU_CHECK_PART#*/}
  tests=$(all_tests | awk -v i="$part" -v n="$parts" \
    '(NR - 1) % n == i - 1' | tr '\n' ' ')
  note "check part $MKX_GPU_CHECK_PART: $(echo "$tests" | wc -w) tests"
fi
make check ${tests:+TESTS="$tests"} >"$logs/check.log" 2>&1 || rc_all=1
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
