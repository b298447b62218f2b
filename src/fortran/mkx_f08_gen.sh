#!/bin/sh
# Writes the generated part of the Fortran bindings from src/fortran/mkx_f08.def
# (see the top of that file):
#   sh src/fortran/mkx_f08_gen.sh [DIR]
# DIR defaults to src/fortran itself; commit what it writes there.  AWK
# names the awk to use (any POSIX awk).
set -e
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
mkdir -p "$out"
exec ${AWK:-awk} -v out="$out" -f "$here/mkx_f08_gen.awk" "$here/mkx_f08.def"
