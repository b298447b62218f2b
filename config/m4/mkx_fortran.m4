dnl MKX_CHECK_FORTRAN: the Fortran 2008 bindings (module mkx_f08, library
dnl libmkx_f08; see src/fortran/Makefile.include).
dnl
dnl --enable-fortran   require them (configure fails if they cannot be built)
dnl --disable-fortran  never build them (no Fortran compiler is probed)
dnl (default)          build them if the checks below pass
dnl
dnl FC defaults to the MPI Fortran wrapper (mpifort, else mpif90); set FC to
dnl use another.  The bindings need, all from one MPI installation:
dnl   - FC compiles and links a program that uses mpi_f08;
dnl   - FC supports TS 29113 assumed-type, assumed-rank dummies (type(*),
dnl     dimension(..)) in BIND(C) interfaces (gfortran >= 9 compiles them;
dnl     MKX needs the GCC 12 descriptor layout, so use matching gcc/gfortran);
dnl   - the C compiler finds ISO_Fortran_binding.h (for the C shim), if
dnl     need be in the directory that FC reports for it;
dnl   - FC's module output and include flags are known.
dnl Sets HAVE_FORTRAN (AM_CONDITIONAL), FC_MODOUT, FC_MODINC, FC_MODEXT,
dnl MKX_CFI_CPPFLAGS and mkx_fortran_summary.
dnl
dnl Must be expanded after LT_INIT (for LT_LANG).  AC_PROG_FC and libtool's
dnl Fortran (FC) tag are set up unconditionally, at top level (an autoconf
dnl requirement); neither fails when no compiler is found, and FC=no (set by
dnl --disable-fortran) turns the tag off.
AC_DEFUN([_MKX_FORTRAN_ENABLE], [
  AC_ARG_ENABLE([fortran],
    [AS_HELP_STRING([--enable-fortran],
      [Fortran 2008 bindings, module mkx_f08 (default: if FC, by default
       mpifort, provides mpi_f08)])],
    [], [enable_fortran=check])
  dnl libtool reads FC=no as "no Fortran tag".  Otherwise MPI's Fortran
  dnl wrapper comes first (AC_PROG_FC's own list starts with gfortran).
  AS_IF([test "x$enable_fortran" = xno], [FC=no],
        [test -z "$FC"], [AC_CHECK_PROGS([FC], [mpifort mpif90])])
])

dnl libtool's Fortran tag; it requires AC_PROG_FC itself.
AC_DEFUN([_MKX_FORTRAN_TAG], [LT_LANG([Fortran])])

AC_DEFUN([MKX_CHECK_FORTRAN], [
  dnl Required, not expanded: LT_LANG requires AC_PROG_FC, which is then
  dnl expanded once, as a requirement, ahead of everything that needs it
  dnl (expanding AC_PROG_FC here after LT_INIT makes autoconf warn
  dnl "expanded before it was required").
  AC_REQUIRE([_MKX_FORTRAN_ENABLE])
  AC_REQUIRE([_MKX_FORTRAN_TAG])

  mkx_fortran_summary=no
  mkx_fortran_why=
  MKX_CFI_CPPFLAGS=
  AS_IF([test "x$enable_fortran" = xno], [mkx_fortran_why="--disable-fortran"],
        [test -z "$FC" || test "x$FC" = xno],
          [mkx_fortran_why="no Fortran compiler (set FC)"],
  [
    AC_LANG_PUSH([Fortran])
    AC_FC_SRCEXT([f90], [], [mkx_fortran_why="$FC does not compile .f90 files"])
    AS_IF([test -z "$mkx_fortran_why"],
      [AC_FC_PP_SRCEXT([F90], [],
         [mkx_fortran_why="$FC does not preprocess .F90 files"])])
    AS_IF([test -z "$mkx_fortran_why"], [
      AC_MSG_CHECKING([whether $FC compiles and links programs using mpi_f08])
      AC_LINK_IFELSE([AC_LANG_SOURCE([[
program t
  use mpi_f08
  implicit none
  type(MPI_Comm) :: c
  type(MPI_Info) :: i
  c = MPI_COMM_WORLD
  i = MPI_INFO_NULL
  call MPI_Init()
  print *, c%MPI_VAL, i%MPI_VAL
  call MPI_Finalize()
end program t]])],
        [AC_MSG_RESULT([yes])],
        [AC_MSG_RESULT([no]); mkx_fortran_why="$FC has no usable mpi_f08"])
    ])
    AS_IF([test -z "$mkx_fortran_why"], [
      AC_MSG_CHECKING([whether $FC supports type(*), dimension(..) in BIND(C) interfaces])
      AC_COMPILE_IFELSE([AC_LANG_SOURCE([[
module conftest_mkx
  use, intrinsic :: iso_c_binding
  implicit none
  type, bind(C) :: h
    type(c_ptr) :: ptr = c_null_ptr
  end type h
  interface
    integer(c_int) function f(a, b) bind(C, name="f")
      import :: c_int
      type(*), dimension(..), intent(in) :: a
      type(*), dimension(..), intent(in), optional :: b
    end function f
  end interface
end module conftest_mkx]])],
        [AC_MSG_RESULT([yes])],
        [AC_MSG_RESULT([no])
         mkx_fortran_why="$FC lacks TS 29113 (assumed type and rank)"])
      rm -f conftest_mkx.* CONFTEST_MKX.*
    ])
    AS_IF([test -z "$mkx_fortran_why"], [
      AC_FC_MODULE_EXTENSION
      AC_FC_MODULE_FLAG([], [mkx_fortran_why="module include flag of $FC unknown"])
      AC_FC_MODULE_OUTPUT_FLAG([], [mkx_fortran_why="module output flag of $FC unknown"])
      AS_IF([test -z "$FC_MODEXT"], [FC_MODEXT=mod])
    ])
    AC_LANG_POP([Fortran])
    dnl The C shim reads Fortran array descriptors: ISO_Fortran_binding.h
    dnl from the C compiler, else from FC's own include directory.
    AS_IF([test -z "$mkx_fortran_why"], [
      AC_MSG_CHECKING([for ISO_Fortran_binding.h])
      AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <ISO_Fortran_binding.h>]],
                                         [[CFI_cdesc_t *d = 0; (void)d;]])],
        [AC_MSG_RESULT([yes])],
        [mkx_cfi=`$FC -print-file-name=include/ISO_Fortran_binding.h 2>/dev/null`
         AS_IF([test -n "$mkx_cfi" && test -f "$mkx_cfi"], [
           mkx_save_CPPFLAGS=$CPPFLAGS
           CPPFLAGS="$CPPFLAGS -I`dirname $mkx_cfi`"
           AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <ISO_Fortran_binding.h>]],
                                              [[CFI_cdesc_t *d = 0; (void)d;]])],
             [MKX_CFI_CPPFLAGS="-I`dirname $mkx_cfi`"])
           CPPFLAGS=$mkx_save_CPPFLAGS])
         AS_IF([test -n "$MKX_CFI_CPPFLAGS"], [AC_MSG_RESULT([$MKX_CFI_CPPFLAGS])],
               [AC_MSG_RESULT([no])
                mkx_fortran_why="C compiler finds no ISO_Fortran_binding.h"])])
    ])
    AS_IF([test -z "$mkx_fortran_why"],
          [mkx_fortran_summary="yes ($FC, mpi_f08)"])
  ])
  AS_IF([test "x$mkx_fortran_summary" = xno && test -n "$mkx_fortran_why"],
        [mkx_fortran_summary="no ($mkx_fortran_why)"])
  AS_IF([test "x$enable_fortran" = xyes && test -n "$mkx_fortran_why"],
        [AC_MSG_ERROR([--enable-fortran: $mkx_fortran_why])])
  AC_SUBST([MKX_CFI_CPPFLAGS])
  AC_SUBST([FC_MODEXT])
  AM_CONDITIONAL([HAVE_FORTRAN], [test -z "$mkx_fortran_why"])
])
