dnl MKX_CHECK_MPI_CC: --with-mpi[=MPICC]: compile everything with the MPI
dnl compiler wrapper (default: mpicc from PATH).  Must run before AC_PROG_CC.
AC_DEFUN([MKX_CHECK_MPI_CC], [
  AC_ARG_WITH([mpi],
    [AS_HELP_STRING([--with-mpi@<:@=MPICC@:>@],
      [MPI C compiler wrapper to build with (default: mpicc)])],
    [], [with_mpi=yes])
  AS_CASE([$with_mpi],
    [no], [AC_MSG_ERROR([MKX needs MPI: --without-mpi is not supported])],
    [yes], [AS_IF([test -z "$CC"], [AC_CHECK_PROGS([CC], [mpicc])])],
    [CC="$with_mpi"])
])

dnl MKX_CHECK_MPI: the compiler must find mpi.h and link MPI_Init.
AC_DEFUN([MKX_CHECK_MPI], [
  AC_MSG_CHECKING([whether $CC compiles and links MPI programs])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]],
                                  [[MPI_Init(0, 0); MPI_Finalize();]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([MKX needs MPI: use --with-mpi=/path/to/mpicc or CC=mpicc])])
  mkx_mpi_summary=yes
])
