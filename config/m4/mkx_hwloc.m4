dnl MKX_CHECK_HWLOC: --with-hwloc (default: use it if pkg-config finds it).
AC_DEFUN([MKX_CHECK_HWLOC], [
  AC_ARG_WITH([hwloc],
    [AS_HELP_STRING([--with-hwloc], [topology discovery with hwloc (default: if found)])],
    [], [with_hwloc=check])
  mkx_hwloc_summary=no
  AS_IF([test "x$with_hwloc" != xno],
    [PKG_CHECK_MODULES([HWLOC], [hwloc >= 2.0], [mkx_hwloc_summary=yes],
       [AS_IF([test "x$with_hwloc" = xyes], [AC_MSG_ERROR([hwloc >= 2.0 not found])])])])
  AS_IF([test "x$mkx_hwloc_summary" = xyes],
        [AC_DEFINE([HAVE_HWLOC], [1], [hwloc available])],
        [AC_DEFINE([HAVE_HWLOC], [0], [hwloc available])])
  AM_CONDITIONAL([HAVE_HWLOC], [test "x$mkx_hwloc_summary" = xyes])
])
