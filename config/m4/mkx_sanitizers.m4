dnl MKX_CHECK_SANITIZERS: --enable-sanitizers: the host C code (libmkx,
dnl its tools and tests, the Fortran shim) built with AddressSanitizer and
dnl UndefinedBehaviorSanitizer, for testing only.  nvcc compiles the .cu
dnl files (device code and their host stubs) without them: NVCC_FLAGS never
dnl see CFLAGS.
dnl
dnl The flags go into CFLAGS and LDFLAGS, after the user's, rather than into
dnl AM_CFLAGS: targets with their own _LDFLAGS (libmkx, libmkx_f08, the
dnl fake-verbs tests) would otherwise link without the runtime, and Fortran
dnl programs that link libmkx need it too.  Expand it last, so that no other
dnl check runs instrumented.
dnl
dnl -fno-sanitize-recover=undefined: a UB report aborts the process, so the
dnl test fails instead of printing and passing.  The run-time options and
dnl suppressions of `make check` are in tests/Makefile.include and
dnl tests/sanitizers/.
AC_DEFUN([MKX_CHECK_SANITIZERS], [
  AC_ARG_ENABLE([sanitizers],
    [AS_HELP_STRING([--enable-sanitizers],
      [build the host C code and the tests with AddressSanitizer and
       UndefinedBehaviorSanitizer (for testing; CUDA code is not instrumented)])],
    [], [enable_sanitizers=no])
  mkx_sanitizers_summary=no
  AS_IF([test "x$enable_sanitizers" = xyes], [
    mkx_san_cflags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
    mkx_san_ldflags="-fsanitize=address,undefined"
    AC_MSG_CHECKING([whether $CC builds and links with $mkx_san_cflags])
    CFLAGS="$CFLAGS $mkx_san_cflags"
    LDFLAGS="$LDFLAGS $mkx_san_ldflags"
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <stdlib.h>]],
                                    [[char *p = malloc(4); free(p); return p == 0;]])],
      [AC_MSG_RESULT([yes])],
      [AC_MSG_RESULT([no])
       AC_MSG_ERROR([--enable-sanitizers: $CC cannot build with $mkx_san_cflags (GCC or Clang with libasan and libubsan)])])
    dnl Fortran code itself stays uninstrumented; its programs link libmkx
    dnl and so need the runtime (LDFLAGS above reaches FC's link line too).
    mkx_sanitizers_summary="address, undefined (host C; CUDA not instrumented)"
  ])
  dnl Tests that must tell the sanitizers something (lsan_interface.h).
  AS_IF([test "x$enable_sanitizers" = xyes],
        [AC_DEFINE([MKX_SANITIZERS], [1], [Built with --enable-sanitizers])],
        [AC_DEFINE([MKX_SANITIZERS], [0], [Built with --enable-sanitizers])])
  AM_CONDITIONAL([MKX_SANITIZERS], [test "x$enable_sanitizers" = xyes])
])
