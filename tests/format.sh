#!/bin/sh
# The C and CUDA sources follow .clang-format (kernels/.clang-format for
# the CUDA tree): clang-format --dry-run on every one.  Formatting differs
# between clang-format versions, so only the version the files were
# formatted with judges them; another version (or none) skips (77).  Run
# from the build directory (make check) or anywhere.
set -u
top=${srcdir:-$(dirname "$0")/..}
want=14
cf=
for c in clang-format-$want clang-format; do
  command -v "$c" >/dev/null 2>&1 || continue
  case $("$c" --version 2>/dev/null) in
    *"version $want."*) cf=$c; break ;;
  esac
done
if [ -z "$cf" ]; then
  echo "skip: no clang-format $want here (the sources follow its output)"
  exit 77
fi
bad=0 n=0
for f in $(find "$top/src" "$top/include" "$top/kernels" "$top/tests" \
             "$top/examples" -type f \( -name '*.c' -o -name '*.h' \
             -o -name '*.cu' -o -name '*.cuh' \) | sort); do
  n=$((n + 1))
  if ! "$cf" --style=file --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "not ok - ${f#"$top"/} is not as $cf formats it (run: $cf -i --style=file ${f#"$top"/})"
    bad=$((bad + 1))
  fi
done
[ "$bad" = 0 ] && echo "ok - $n C and CUDA files as $cf formats them"
[ "$bad" = 0 ]
