#!/bin/sh
# Every public function of include/mkx.h and include/mkx_tiles.h against
# its documentation: a man page (installed: listed in man/Makefile.include),
# a row of README.md's table of calls, and a Fortran twin of the same name
# in module mkx_f08 (but MKX_Tiles_device, whose descriptor is for CUDA
# kernels); and every man page and README row names a function of the
# headers.
set -u
top=${srcdir:-$(dirname "$0")/..}
fail=0
bad() { echo "not ok - $*"; fail=1; }
# declarations: a line that starts with a type and names MKX_Xxx(
fns=$(sed -n 's/^[a-z][a-z_ *]*[ *]\(MKX_[A-Z][a-z][A-Za-z0-9_]*\)(.*/\1/p' \
  "$top/include/mkx.h" "$top/include/mkx_tiles.h" | sort -u)
[ -n "$fns" ] || { echo "not ok - no function found in include/mkx.h"; exit 1; }
no_fortran="MKX_Tiles_device"
rows=$(sed -n 's/^| `\(MKX_[A-Z][a-z][A-Za-z0-9_]*\)` |.*/\1/p' "$top/README.md" |
  sort -u)
fortran=$(cat "$top"/src/fortran/mkx_f08.F90 "$top"/src/fortran/mkx_f08_gen_*.inc)
for f in $fns; do
  [ -f "$top/man/man3/$f.3" ] || bad "$f: no man page man/man3/$f.3"
  grep -q "man/man3/$f\.3" "$top/man/Makefile.include" ||
    bad "$f: man/Makefile.include does not install man/man3/$f.3"
  echo "$rows" | grep -qx "$f" || bad "$f: no row in README.md's table of calls"
  case " $no_fortran " in *" $f "*) continue ;; esac
  echo "$fortran" | grep -qiw "$f" || bad "$f: no Fortran twin in mkx_f08"
done
for page in "$top"/man/man3/MKX_*.3; do
  f=$(basename "$page" .3)
  echo "$fns" | grep -qx "$f" || bad "man page $f.3: no such function in mkx.h"
done
for f in $rows; do
  echo "$fns" | grep -qx "$f" || bad "README.md row $f: no such function in mkx.h"
done
[ "$fail" = 0 ] &&
  echo "ok - the $(echo "$fns" | wc -l) functions of mkx.h and mkx_tiles.h have man pages, README rows and Fortran twins"
exit "$fail"
