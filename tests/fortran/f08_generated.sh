#!/bin/sh
# The generated part of the Fortran bindings is what its table gives: runs
# src/fortran/mkx_f08_gen.sh into a scratch directory and compares.  Fails
# when src/fortran/mkx_f08.def or the generator was changed without running
# it (and committing its output), or a generated file was edited by hand.
# Needs awk only, not a Fortran compiler.
set -u
top=${srcdir:-$(dirname "$0")/../..}
gen=$top/src/fortran
tmp=f08_generated.tmp.$$
trap 'rm -rf "$tmp"' EXIT INT TERM
mkdir "$tmp" || exit 1
if ! sh "$gen/mkx_f08_gen.sh" "$tmp"; then
  echo "not ok - src/fortran/mkx_f08_gen.sh failed"
  exit 1
fi
bad=0 n=0
for f in "$tmp"/*; do
  name=${f##*/}
  n=$((n + 1))
  cmp -s "$f" "$gen/$name" && continue
  echo "not ok - src/fortran/$name is not what mkx_f08.def gives;" \
    "run sh src/fortran/mkx_f08_gen.sh and commit the result"
  diff "$gen/$name" "$f" | head -n 40 | sed 's/^/# /'
  bad=1
done
[ "$n" -gt 0 ] || { echo "not ok - the generator wrote nothing"; exit 1; }
[ "$bad" = 0 ] && echo "ok - the $n generated files of src/fortran are current"
exit "$bad"
