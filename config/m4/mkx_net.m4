dnl MKX_CHECK_NET: --with-verbs (libibverbs) and --enable-efa (efadv), each
dnl with feature checks, since installed headers vary in age.
AC_DEFUN([MKX_CHECK_NET], [
  AC_ARG_WITH([verbs],
    [AS_HELP_STRING([--with-verbs], [RDMA transport over libibverbs (default: if found)])],
    [], [with_verbs=check])
  AC_ARG_ENABLE([efa],
    [AS_HELP_STRING([--enable-efa], [EFA SRD transport through efadv (default: if found)])],
    [], [enable_efa=check])
  mkx_verbs_summary=no
  mkx_efa_summary=no
  VERBS_LIBS=
  AS_IF([test "x$with_verbs" != xno], [
    AC_CHECK_HEADER([infiniband/verbs.h],
      [AC_CHECK_LIB([ibverbs], [ibv_get_device_list],
         [VERBS_LIBS=-libverbs; mkx_verbs_summary=yes])])
    AS_IF([test "x$with_verbs" = xyes && test "x$mkx_verbs_summary" = xno],
          [AC_MSG_ERROR([libibverbs requested but not found (libibverbs-dev)])])
  ])
  AS_IF([test "x$mkx_verbs_summary" = xyes], [
    mkx_save_LIBS=$LIBS
    LIBS="$VERBS_LIBS $LIBS"
    AC_CHECK_FUNCS([ibv_reg_dmabuf_mr])
    LIBS=$mkx_save_LIBS
    AC_DEFINE([HAVE_VERBS], [1], [libibverbs available])
    AS_IF([test "x$enable_efa" != xno], [
      AC_CHECK_HEADER([infiniband/efadv.h],
        [AC_CHECK_LIB([efa], [efadv_query_device],
           [VERBS_LIBS="-lefa $VERBS_LIBS"; mkx_efa_summary=yes])])
      AS_IF([test "x$mkx_efa_summary" = xyes],
        [AC_CHECK_DECLS([EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE], [mkx_efa_summary="yes (RDMA write)"],
           [mkx_efa_summary="yes (no RDMA-write capability bit in efadv.h)"],
           [[#include <infiniband/efadv.h>]])])
      AS_IF([test "x$enable_efa" = xyes && test "x$mkx_efa_summary" = xno],
            [AC_MSG_ERROR([EFA requested but efadv not found])])
    ])
  ], [AC_DEFINE([HAVE_VERBS], [0], [libibverbs available])])
  AS_IF([test "x$mkx_efa_summary" != xno],
        [AC_DEFINE([HAVE_EFA], [1], [efadv available])],
        [AC_DEFINE([HAVE_EFA], [0], [efadv available])])
  AC_SUBST([VERBS_LIBS])
  AM_CONDITIONAL([HAVE_VERBS], [test "x$mkx_verbs_summary" = xyes])
])
