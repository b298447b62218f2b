#!/bin/sh
# The layer rule of docs/architecture.md: every #include "..." of include/,
# src/ and kernels/ names a header of its own layer or of one its table row
# allows, and resolves in one include root only; every .cu file with
# kernels registers its module (common/modules.cuh); in a build directory,
# every mkx_* function an object file calls is defined in such a layer too.
# Reads the table from the doc itself, so the two cannot drift.  Prints
# each breach; fails on any.
set -uf # -f: the patterns of the table are matched, never expanded
top=${srcdir:-$(dirname "$0")/..}
top=$(cd "$top" && pwd)
doc=$top/docs/architecture.md
[ -f "$doc" ] || { echo "not ok - no $doc"; exit 1; }

# "layer<TAB>patterns<TAB>allowed" per table row, in order.
rules=$(awk -F'|' '
  /^\| layer \| files \| may include \|/ { on = 1; next }
  on && /^\|---/ { next }
  on && /^\|/ {
    layer = $2; files = $3; allow = $4
    gsub(/[ `]+/, " ", files); gsub(/^ +| +$/, "", files)
    gsub(/^ +| +$/, "", layer); gsub(/^ +| +$/, "", allow)
    printf "%s\t%s\t%s\n", layer, files, allow; next
  }
  on { exit }' "$doc")
[ -n "$rules" ] || { echo "not ok - no layer table in $doc"; exit 1; }

tab=$(printf '\t')
# layer_of PATH (relative to the top): the first row whose pattern matches.
layer_of() {
  printf '%s\n' "$rules" | while IFS="$tab" read -r layer pats allow; do
    for p in $pats; do
      # shellcheck disable=SC2254
      case $1 in $p) echo "$layer"; exit 0 ;; esac
    done
  done
}
allowed() { # allowed LAYER TARGET
  printf '%s\n' "$rules" | while IFS="$tab" read -r layer pats allow; do
    [ "$layer" = "$1" ] || continue
    for a in $allow; do [ "$a" = "$2" ] && { echo yes; exit 0; }; done
    exit 0
  done
}

build=$(pwd)
cd "$top" || exit 1
bad=0 n=0
files=$(find include src kernels -type f \( -name '*.c' -o -name '*.h' \
  -o -name '*.cu' -o -name '*.cuh' -o -name '*.inc' \) | sort)
for f in $files; do
  from=$(layer_of "$f")
  [ -n "$from" ] || { echo "not ok - $f: in no layer of $doc"; bad=1; continue; }
  for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
    n=$((n + 1))
    hits=
    for root in include src kernels; do [ -f "$root/$inc" ] && hits="$hits $root/$inc"; done
    if [ -f "$(dirname "$f")/$inc" ]; then
      target=$(dirname "$f")/$inc
    else
      set -- $hits
      [ $# -gt 1 ] && { echo "not ok - $f: \"$inc\" is ambiguous:$hits"; bad=1; continue; }
      [ $# -eq 0 ] && continue # generated (config.h) or a system header
      target=$1
    fi
    to=$(layer_of "$target")
    [ "$to" = "$from" ] && continue
    if [ -z "$(allowed "$from" "$to")" ]; then
      echo "not ok - $f ($from) includes $target ($to)"
      bad=1
    fi
  done
done
[ "$bad" = 0 ] && echo "ok - $n includes of $(echo "$files" | wc -l) files keep the layers"

# Every .cu file that defines kernels registers its module, so that all of
# them are loaded before a kernel can wait for another (common/modules.h).
unreg=$(cd "$top" && find kernels -name '*.cu' | sort | xargs grep -l '__global__' |
  while read -r f; do
    grep -q '^#include "common/modules.cuh"' "$f" || echo "$f"
  done)
if [ -n "$unreg" ]; then
  for f in $unreg; do
    echo "not ok - $f defines kernels without including common/modules.cuh"
  done
  bad=1
else
  echo "ok - every .cu file with kernels registers its module"
fi

# Calls: in a build directory, every mkx_* function an object file uses is
# defined in its own layer or one it may include (a kernel launcher counts
# as kernel-api; the public MKX_* functions are the api's).
objs=$(cd "$build" && find src kernels -path '*/.libs/*.o' 2>/dev/null | sort)
[ -n "$objs" ] || objs=$(cd "$build" && find src kernels -name '*.o' 2>/dev/null | sort)
if [ -z "$objs" ]; then
  echo "ok - # SKIP calls: no object files under $build"
  exit $bad
fi
# source_of OBJECT: src/core/.libs/comm.o (or src/core/comm.o) ->
# src/core/comm.c
source_of() {
  d=$(dirname "$1") b=$(basename "$1" .o)
  [ "$(basename "$d")" = .libs ] && d=$(dirname "$d")
  b=${b#lib*_la-}
  for ext in c cu F90; do [ -f "$d/$b.$ext" ] && { echo "$d/$b.$ext"; return; }; done
}
syms=$(for o in $objs; do
  s=$(source_of "$o")
  [ -n "$s" ] || continue
  l=$(layer_of "$s") d=$l
  [ "$l" = kernels ] && d=kernel-api # what other layers may reach of it
  nm --defined-only -g "$build/$o" | awk -v f="$s" -v l="$d" \
    '$3 ~ /^mkx_/ { print "D", $3, f, l }'
  nm -u "$build/$o" | awk -v f="$s" -v l="$l" \
    '$2 ~ /^mkx_/ { print "U", $2, f, l }'
done)
pairs=$(printf '%s\n' "$syms" | awk '
  $1 == "D" { where[$2] = $3; layer[$2] = $4; next }
  $1 == "U" && ($2 in where) && layer[$2] != $4 {
    print $4, layer[$2], $3, $2, where[$2] }')
ncalls=$(printf '%s\n' "$syms" | grep -c '^U')
breaches=$(printf '%s\n' "$pairs" | sort -u | while read -r from to file sym def; do
  [ -n "$from" ] || continue
  [ -n "$(allowed "$from" "$to")" ] ||
    echo "not ok - $file ($from) calls $sym of $def ($to)"
done)
if [ -n "$breaches" ]; then echo "$breaches"; bad=1; else
  echo "ok - $ncalls calls to mkx_* functions keep the layers"; fi
exit $bad
