# Stage build: configure and build everything (ci/build into build/), the
# tests too, without running them.  A failed build ends the check at once:
# nothing after it has anything to run.
# shellcheck shell=bash

# The image sets CC to a plain gcc; MKX builds with the MPI wrapper.
t0=$(date +%s)
if ! ci/build --disable-maintainer-mode CC=mpicc >"$logs/build.log" 2>&1 ||
   ! make -C build -j"$(nproc)" check TESTS= >>"$logs/build.log" 2>&1; then
  tail -n 100 "$logs/build.log"; echo "BUILD FAILED"; exit 1
fi
note "build: $(( $(date +%s) - t0 )) s"
