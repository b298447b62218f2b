dnl MKX_CHECK_FORTRAN: --enable-fortran (default: if an MPI Fortran wrapper
dnl with the mpi_f08 module is found).  The bindings themselves come with
dnl the Fortran issue; this records whether they can be built.
AC_DEFUN([MKX_CHECK_FORTRAN], [
  AC_ARG_ENABLE([fortran],
    [AS_HELP_STRING([--enable-fortran], [Fortran 2008 bindings (default: if mpi_f08 is found)])],
    [], [enable_fortran=check])
  mkx_fortran_summary=no
  AS_IF([test "x$enable_fortran" != xno], [
    AC_CHECK_PROGS([MPIFC], [mpifort mpif90])
    AS_IF([test -n "$MPIFC"], [
      AC_MSG_CHECKING([whether $MPIFC provides mpi_f08])
      mkx_dir=$(mktemp -d)
      printf 'program t\n  use mpi_f08\n  type(MPI_Comm) :: c\n  c = MPI_COMM_WORLD\nend program t\n' > "$mkx_dir/t.f90"
      AS_IF([(cd "$mkx_dir" && $MPIFC t.f90 -o t) >&AS_MESSAGE_LOG_FD 2>&1],
            [mkx_fortran_summary="yes ($MPIFC, mpi_f08)"; AC_MSG_RESULT([yes])],
            [AC_MSG_RESULT([no])])
      rm -rf "$mkx_dir"
    ])
    AS_IF([test "x$enable_fortran" = xyes && test "x$mkx_fortran_summary" = xno],
          [AC_MSG_ERROR([Fortran requested but no MPI Fortran compiler with mpi_f08])])
  ])
  AM_CONDITIONAL([HAVE_FORTRAN], [test "x$mkx_fortran_summary" != xno])
])
