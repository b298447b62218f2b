dnl MKX_CHECK_CUDA: --with-cuda[=DIR] (default: try /usr/local/cuda).
dnl Without CUDA the library still builds and runs the host path.
AC_DEFUN([MKX_CHECK_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@],
      [build the GPU kernels with the CUDA toolkit in DIR (default: /usr/local/cuda if present)])],
    [], [with_cuda=check])
  AC_ARG_WITH([nvcc-gencode],
    [AS_HELP_STRING([--with-nvcc-gencode=FLAGS],
      [nvcc code generation flags (default: -gencode=arch=compute_90a,code=sm_90a)])],
    [], [with_nvcc_gencode="-gencode=arch=compute_90a,code=sm_90a"])
  mkx_cuda_ok=no
  mkx_nccl_ok=no
  mkx_cuda_summary=no
  AS_CASE([$with_cuda],
    [check|yes], [mkx_cuda_dir=/usr/local/cuda],
    [no], [mkx_cuda_dir=],
    [mkx_cuda_dir=$with_cuda])
  AS_IF([test -n "$mkx_cuda_dir"], [
    AC_PATH_PROG([NVCC], [nvcc], [], [$mkx_cuda_dir/bin$PATH_SEPARATOR$PATH])
    mkx_cuda_libdir=$mkx_cuda_dir/lib64
    AS_IF([test -d "$mkx_cuda_libdir"], [], [mkx_cuda_libdir=$mkx_cuda_dir/lib])
    mkx_save_CPPFLAGS=$CPPFLAGS
    mkx_save_LIBS=$LIBS
    CPPFLAGS="$CPPFLAGS -I$mkx_cuda_dir/include"
    LIBS="-L$mkx_cuda_libdir $LIBS"
    AS_IF([test -n "$NVCC"],
      [AC_CHECK_HEADER([cuda_runtime.h],
        [AC_CHECK_LIB([cudart], [cudaGetDeviceCount],
          [AC_CHECK_LIB([cublas], [cublasCreate_v2], [mkx_cuda_ok=yes])])])])
    dnl NCCL only serves the benchmark's cuBLAS + NCCL baseline.
    mkx_nccl_ok=no
    AS_IF([test "x$mkx_cuda_ok" = xyes],
      [AC_CHECK_LIB([nccl], [ncclCommInitRank], [mkx_nccl_ok=yes], [], [-lcudart])])
    CPPFLAGS=$mkx_save_CPPFLAGS
    LIBS=$mkx_save_LIBS
  ])
  AS_IF([test "x$mkx_cuda_ok" = xyes], [
    CUDA_CPPFLAGS="-I$mkx_cuda_dir/include"
    dnl Link the runtime, never the driver stub: programs linked to
    dnl libcuda.so's stub do not start on machines without a driver.
    CUDA_LIBS="-L$mkx_cuda_libdir -Wl,-rpath,$mkx_cuda_libdir -lcublas -lcudart -lstdc++"
    NVCC_GENCODE=$with_nvcc_gencode
    mkx_cuda_summary="yes ($mkx_cuda_dir, $NVCC_GENCODE)"
    AC_DEFINE([HAVE_CUDA], [1], [Build the CUDA kernels and device paths])
  ], [
    AS_IF([test "x$with_cuda" != xcheck && test "x$with_cuda" != xno],
          [AC_MSG_ERROR([CUDA requested but nvcc, cuda_runtime.h, cudart or cublas not found under $mkx_cuda_dir])])
    AC_DEFINE([HAVE_CUDA], [0], [Build the CUDA kernels and device paths])
  ])
  AC_DEFINE_UNQUOTED([MKX_NVCC_GENCODE], ["$with_nvcc_gencode"], [nvcc targets])
  AC_SUBST([CUDA_CPPFLAGS])
  AC_SUBST([CUDA_LIBS])
  AC_SUBST([NVCC_GENCODE])
  AM_CONDITIONAL([HAVE_CUDA], [test "x$mkx_cuda_ok" = xyes])
  AM_CONDITIONAL([HAVE_NCCL], [test "x$mkx_nccl_ok" = xyes])
])
