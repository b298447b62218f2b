#!/bin/sh
# README.md's option table against the options table itself (as mkx_info
# prints it): every option has a row, every row is an option, and the
# defaults agree.  Run in the build directory (make check).
set -u
top=${srcdir:-$(dirname "$0")/..}
readme=$top/README.md
info=./mkx_info
[ -x "$info" ] || { echo "not ok - no ./mkx_info here"; exit 1; }
env -u MKX_LOG_LEVEL "$info" --no-comm >opts.out 2>&1 || {
  echo "not ok - mkx_info --no-comm failed"; cat opts.out; exit 1; }
# "MKX_NAME default" from mkx_info, and from README's rows (| `MKX_X` | `d` |)
awk '/^  MKX_/ { name = $1 } /\(default / && name {
       d = $0; sub(/.*\(default /, "", d); sub(/, current .*/, "", d)
       print name, (d == "" ? "-" : d); name = "" }' opts.out | sort >opts.table
sed -n 's/^| `\(MKX_[A-Z0-9_]*\)` | \([^|]*\) |.*/\1 \2/p' "$readme" |
  sed 's/`//g; s/ *$//; s/ (.*)$/ -/' | sort >opts.readme
if cmp -s opts.table opts.readme; then
  echo "ok - README.md lists the $(wc -l <opts.table) options with their defaults"
  rm -f opts.out opts.table opts.readme
  exit 0
fi
echo "not ok - README.md's option table and the options table differ"
echo "# < options table (mkx_info), > README.md"
diff opts.table opts.readme | sed 's/^/# /'
exit 1
