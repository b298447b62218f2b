#!/bin/sh
# The layer rule of docs/architecture.md: every #include "..." of include/,
# src/ and kernels/ names a header of its own layer or of one its table row
# allows, and resolves in one include root only.  Reads the table from the
# doc itself, so the two cannot drift.  Prints each breach; fails on any.
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
exit $bad
