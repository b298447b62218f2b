dnl MKX_CHECK_BLAS: --with-blas=LIB: the CBLAS behind the host path
dnl (default: OpenBLAS through pkg-config, then -lopenblas, -lcblas, -lblas).
AC_DEFUN([MKX_CHECK_BLAS], [
  AC_ARG_WITH([blas],
    [AS_HELP_STRING([--with-blas=LIB],
      [CBLAS library for the host path, e.g. openblas, blis, cblas (default: openblas)])],
    [], [with_blas=openblas])
  AS_IF([test "x$with_blas" = xno],
        [AC_MSG_ERROR([the host path needs a CBLAS: --without-blas is not supported])])
  mkx_blas_summary=no
  AS_IF([test "x$with_blas" = xopenblas],
        [PKG_CHECK_MODULES([BLAS], [openblas], [mkx_blas_pc=yes], [mkx_blas_pc=no])])
  mkx_save_LIBS=$LIBS
  mkx_save_CPPFLAGS=$CPPFLAGS
  CPPFLAGS="$CPPFLAGS $BLAS_CFLAGS"
  AS_IF([test "x$mkx_blas_pc" = xyes],
        [LIBS="$BLAS_LIBS $LIBS"
         AC_CHECK_FUNC([cblas_sgemm], [mkx_blas_summary="openblas (pkg-config)"])],
        [AC_SEARCH_LIBS([cblas_sgemm], [$with_blas cblas blas],
           [mkx_blas_summary="$ac_cv_search_cblas_sgemm"
            AS_IF([test "x$ac_cv_search_cblas_sgemm" != "xnone required"],
                  [BLAS_LIBS="$ac_cv_search_cblas_sgemm"])])])
  AS_IF([test "x$mkx_blas_summary" = xno],
        [AC_MSG_ERROR([no CBLAS found: install libopenblas-dev or use --with-blas=LIB])])
  AC_CHECK_HEADER([cblas.h], [],
        [AC_MSG_ERROR([cblas.h not found: install libopenblas-dev or set CPPFLAGS])])
  AC_CHECK_FUNCS([cblas_sbgemm])
  LIBS=$mkx_save_LIBS
  CPPFLAGS=$mkx_save_CPPFLAGS
  AC_SUBST([BLAS_CFLAGS])
  AC_SUBST([BLAS_LIBS])
  AC_DEFINE_UNQUOTED([MKX_BLAS_NAME], ["$mkx_blas_summary"], [CBLAS in use])
])
