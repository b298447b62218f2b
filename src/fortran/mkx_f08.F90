! mkx_f08.F90 - Fortran 2008 bindings of MKX: module mkx_f08.
!
! Every public C function of mkx.h has a Fortran twin of the same name and
! the same arguments in the same order, in the style of MPI's mpi_f08:
!
!  - Subroutines, each with an optional last argument
!      integer, optional, intent(out) :: ierror
!    that receives MKX_SUCCESS or an MKX_ERR_* code.  If ierror is absent and
!    the call fails, the subroutine simply returns: the program is NOT
!    stopped (unlike MPI's default error handler).  Check ierror where a
!    failure matters.  Either way MKX_Get_last_error(msg) gives the message
!    of the last call made through this module on this thread (empty if it
!    succeeded).
!  - Communicators and infos are mpi_f08's type(MPI_Comm) and type(MPI_Info);
!    they are converted with MPI_Comm_f2c / MPI_Info_f2c in a small C shim
!    (src/fortran/mkx_f08_shim.c).
!  - MKX handles are type(MKX_Comm) and type(MKX_Request) (BIND(C), one
!    type(c_ptr) component, null by default; compare with == and /=;
!    MKX_COMM_NULL and MKX_REQUEST_NULL are the null handles).
!  - Named constants for every enumerator and error code of mkx.h, with the
!    same values (default integer kind); tests/fortran/test_f08_api checks
!    them against the C values exported by the shim.
!  - Sizes, counts and leading dimensions are integer(c_int64_t) (write
!    8_int64 or use integer(int64) variables); datatypes, orders, the
!    transposition and communicator queries are default integers; `causal`
!    of MKX_Ring_attention is a logical and `scale` a real(c_double).
!  - `scales` of the _scaled calls is an optional type(MKX_Scales)
!    (BIND(C), the struct of mkx.h: an integer(c_int) layout and three
!    type(c_ptr) addresses of fp32 scales); absent means NULL (every scale
!    1).  It follows `order`, so a call that leaves it out names the
!    arguments after it (comm=comm, ...).
!  - The stream is an optional type(c_ptr) (a cudaStream_t); absent means
!    the NULL (legacy) stream.  Host buffers ignore it.
!
! Buffers of the operations (A, B, C, ..., Q, K, V, X, W, ...): each
! operation is a generic interface with two kinds of specific procedure.
!
!  - Arrays (the host path).  Pass ordinary Fortran arrays of any type:
!      real(c_double) for MKX_FP64, real(c_float) for MKX_FP32, 16-bit
!      integers (integer(c_int16_t)) holding the bits of MKX_BF16/MKX_FP16,
!      and 8-bit integers (integer(int8) or integer(c_int8_t)) holding the
!      bits of MKX_FP8_E4M3/MKX_FP8_E5M2.
!    Fortran arrays are column-major: pass order = MKX_COL_MAJOR, with the
!    leading dimension = the first extent of the array as allocated.  The
!    first buffer argument must be an array (rank 1 or 2; rank 1 to 4 for
!    Q of MKX_Ring_attention); the others may have any rank.  The dummies
!    are type(*), dimension(..) (TS 29113) and reach C as descriptors: MKX
!    uses the address of the first element, so sections are allowed when
!    they are contiguous in their first dimension (A(1:m, :) of a larger
!    array with lda = size(A, 1) is fine; A(1:m:2, :) is refused).  The
!    shim also checks each element size against the datatype (and the
!    integer(c_int32_t) / integer(c_int64_t) / real(c_float) arguments of
!    the MoE and attention calls), and returns MKX_ERR_INVALID_ARG on a
!    mismatch, on every rank (the others get MKX_ERR_PEER).
!  - type(c_ptr) (device pointers, MKX_Alloc_mem memory, or c_loc of host
!    data).  Every buffer argument is then a type(c_ptr), passed to C
!    unchanged; optional buffers may be given as c_null_ptr or left out.
!    Mixing the two kinds in one call is refused: at compile time when the
!    first buffer is a type(c_ptr), else at run time (MKX_ERR_INVALID_ARG).
!
!  Why two specifics and not one type(*), dimension(..) dummy for both:
!  a type(c_ptr) passed to an assumed-type dummy is not handed over the
!  same way by gfortran 12 in every case (a variable, an expression like
!  c_loc(x), the constant c_null_ptr), so pointers and arrays are kept
!  apart by the rank of the first buffer (scalar c_ptr vs array), which
!  makes the generic unambiguous.
!
!  Optional buffers in the middle of an argument list (A_out and ld_aout of
!  MKX_Allgather_gemm, LSE of MKX_Ring_attention, topk_weight and origin of
!  MKX_Moe_dispatch_gemm) are left out by naming the arguments that follow,
!  e.g.  call MKX_Allgather_gemm(A, m, k, lda, B, n, ldb, MKX_NO_TRANS, C,
!                                ldc, dtype=MKX_FP64, ctype=MKX_FP64,
!                                order=MKX_COL_MAJOR, comm=comm)
!
!  Persistent requests (MKX_*_init) keep the addresses of their buffers:
!  pass variables (not expressions) that stay allocated until
!  MKX_Request_free, with the TARGET or ASYNCHRONOUS attribute.  The
!  type(MKX_Scales) of a _scaled _init is copied, but the scale arrays it
!  points to are read at each MKX_Start: they too stay allocated.
!
! Index conventions are those of C: MKX_Comm_rank, MKX_Block_range's block
! b and first row, and the MoE expert ids and origins are 0-based.
!
! Build: libmkx_f08 (this module and the shim; links libmkx).  The module
! file mkx_f08.mod is installed into $(includedir), beside mkx.h:
!   mpifort app.f90 -I$PREFIX/include -L$PREFIX/lib -lmkx_f08 -lmkx
!
! Maintainers: the operations and the communicator queries are generated
! from the table mkx_f08.def into mkx_f08_gen_spec.inc and
! mkx_f08_gen_procs.inc (included here) and mkx_f08_gen_shim.inc (included
! by the shim): edit the table and run  sh src/fortran/mkx_f08_gen.sh.
! What is written here by hand has a shape of its own.
module mkx_f08
  use, intrinsic :: iso_c_binding, only: c_ptr, c_null_ptr, c_int, &
      c_int64_t, c_size_t, c_double, c_char, c_null_char, c_associated, &
      c_f_pointer
  use, intrinsic :: iso_fortran_env, only: output_unit
  use mpi_f08, only: MPI_Comm, MPI_Info
  implicit none
  private

  ! ---- constants (values of mkx.h) -----------------------------------------
  integer, parameter, public :: MKX_VERSION_MAJOR = 0
  integer, parameter, public :: MKX_VERSION_MINOR = 1
  integer, parameter, public :: MKX_VERSION_PATCH = 0
  integer, parameter, public :: MKX_VERSION = MKX_VERSION_MAJOR * 10000 + &
      MKX_VERSION_MINOR * 100 + MKX_VERSION_PATCH

  integer, parameter, public :: MKX_SUCCESS = 0
  integer, parameter, public :: MKX_ERR_INVALID_ARG = 1
  integer, parameter, public :: MKX_ERR_NULL_POINTER = 2
  integer, parameter, public :: MKX_ERR_BAD_SIZE = 3
  integer, parameter, public :: MKX_ERR_BAD_LD = 4
  integer, parameter, public :: MKX_ERR_UNSUPPORTED = 5
  integer, parameter, public :: MKX_ERR_SHAPE_MISMATCH = 6
  integer, parameter, public :: MKX_ERR_TRUNCATE = 7
  integer, parameter, public :: MKX_ERR_CUDA = 8
  integer, parameter, public :: MKX_ERR_MPI = 9
  integer, parameter, public :: MKX_ERR_NET = 10
  integer, parameter, public :: MKX_ERR_TIMEOUT = 11
  integer, parameter, public :: MKX_ERR_NOMEM = 12
  integer, parameter, public :: MKX_ERR_PEER = 13
  integer, parameter, public :: MKX_ERR_INVALID_COMM = 14
  integer, parameter, public :: MKX_ERR_INVALID_REQUEST = 15
  integer, parameter, public :: MKX_ERR_INTERNAL = 16
  integer, parameter, public :: MKX_ERR_LASTCODE = 16

  integer, parameter, public :: MKX_BF16 = 1
  integer, parameter, public :: MKX_FP16 = 2
  integer, parameter, public :: MKX_FP32 = 3
  integer, parameter, public :: MKX_FP64 = 4
  integer, parameter, public :: MKX_FP8_E4M3 = 5
  integer, parameter, public :: MKX_FP8_E5M2 = 6

  integer, parameter, public :: MKX_ROW_MAJOR = 101
  integer, parameter, public :: MKX_COL_MAJOR = 102

  integer, parameter, public :: MKX_NO_TRANS = 111
  integer, parameter, public :: MKX_TRANS = 112

  ! Layouts of the scales of fp8 operands (MKX_Scales%layout).
  integer, parameter, public :: MKX_SCALE_NONE = 0
  integer, parameter, public :: MKX_SCALE_TENSOR = 1
  integer, parameter, public :: MKX_SCALE_ROW = 2
  integer, parameter, public :: MKX_SCALE_BLOCK = 3
  integer, parameter, public :: MKX_SCALE_BLOCK_SIZE = 128

  ! ---- handles ----------------------------------------------------------------
  type, bind(C), public :: MKX_Comm
    type(c_ptr) :: ptr = c_null_ptr
  end type MKX_Comm

  type, bind(C), public :: MKX_Request
    type(c_ptr) :: ptr = c_null_ptr
  end type MKX_Request

  ! A tile set (mkx_tiles.h).
  type, bind(C), public :: MKX_Tiles
    type(c_ptr) :: ptr = c_null_ptr
  end type MKX_Tiles

  ! The scales of the _scaled calls (struct MKX_Scales of mkx.h): layout
  ! one of MKX_SCALE_*, and the addresses of fp32 scale arrays in the
  ! memory of A and B (c_loc of real(c_float) host arrays with the TARGET
  ! attribute, or device pointers); c_null_ptr where mkx.h allows NULL.
  ! The default is MKX_SCALE_NONE with null addresses; the constructor
  ! takes the components in order: MKX_Scales(MKX_SCALE_TENSOR, c_loc(sa),
  ! c_loc(sb), c_null_ptr).
  type, bind(C), public :: MKX_Scales
    integer(c_int) :: layout = MKX_SCALE_NONE
    type(c_ptr) :: a = c_null_ptr
    type(c_ptr) :: b = c_null_ptr
    type(c_ptr) :: a_out = c_null_ptr
  end type MKX_Scales

  type(MKX_Comm), parameter, public :: MKX_COMM_NULL = MKX_Comm(c_null_ptr)
  type(MKX_Tiles), parameter, public :: MKX_TILES_NULL = MKX_Tiles(c_null_ptr)
  type(MKX_Request), parameter, public :: &
      MKX_REQUEST_NULL = MKX_Request(c_null_ptr)

  interface operator(==)
    module procedure comm_eq, request_eq, tiles_eq
  end interface
  interface operator(/=)
    module procedure comm_ne, request_ne, tiles_ne
  end interface
  public :: operator(==), operator(/=)

  ! ---- procedures ---------------------------------------------------------------
  ! Those of mkx_f08.def (the operations and the communicator queries) are
  ! declared in mkx_f08_gen_spec.inc, generated from it.
  public :: MKX_Get_version, MKX_Error_string, MKX_Get_last_error
  public :: MKX_Type_size
  public :: MKX_Comm_create, MKX_Comm_free, MKX_Block_range
  public :: MKX_Alloc_mem, MKX_Free_mem
  public :: MKX_Start, MKX_Request_free
  public :: MKX_Request_get_path, MKX_Comm_get_last_path
  public :: MKX_Info_print
  public :: MKX_Tiles_create, MKX_Tiles_free, MKX_Tiles_begin
  public :: MKX_Tiles_wait, MKX_Tiles_signal, MKX_Tiles_get_async_error
  public :: MKX_Allgather_tiles, MKX_Tiles_gemm
  public :: MKX_Reduce_scatter_tiles, MKX_Allreduce_tiles

#include "mkx_f08_gen_spec.inc"

  ! ---- the C side (mkx.h, and the shim for MPI handles and arrays) ------------
  interface
    subroutine mkx_f08_clear_error() bind(C, name="mkx_f08_clear_error")
    end subroutine mkx_f08_clear_error

    function mkx_f08_last_error() bind(C, name="mkx_f08_last_error") &
        result(msg)
      import :: c_ptr
      type(c_ptr) :: msg
    end function mkx_f08_last_error

    function c_strlen(s) bind(C, name="strlen") result(n)
      import :: c_ptr, c_size_t
      type(c_ptr), value :: s
      integer(c_size_t) :: n
    end function c_strlen

    function c_get_version(major, minor, patch) &
        bind(C, name="MKX_Get_version") result(rc)
      import :: c_int
      integer(c_int), intent(out) :: major, minor, patch
      integer(c_int) :: rc
    end function c_get_version

    function c_error_string(err) bind(C, name="MKX_Error_string") result(s)
      import :: c_int, c_ptr
      integer(c_int), value :: err
      type(c_ptr) :: s
    end function c_error_string

    function c_type_size(t, size) bind(C, name="mkx_f08_type_size") &
        result(rc)
      import :: c_int, c_int64_t
      integer(c_int), value :: t
      integer(c_int64_t), intent(out) :: size
      integer(c_int) :: rc
    end function c_type_size

    function c_comm_create(comm, info, newcomm) &
        bind(C, name="mkx_f08_comm_create") result(rc)
      import :: c_int, c_ptr
      integer(c_int), value :: comm, info
      type(c_ptr), intent(out) :: newcomm
      integer(c_int) :: rc
    end function c_comm_create

    function c_comm_free(comm) bind(C, name="MKX_Comm_free") result(rc)
      import :: c_int, c_ptr
      type(c_ptr), intent(inout) :: comm
      integer(c_int) :: rc
    end function c_comm_free

    function c_block_range(rows, nblocks, b, first, count) &
        bind(C, name="MKX_Block_range") result(rc)
      import :: c_int, c_int64_t
      integer(c_int64_t), value :: rows
      integer(c_int), value :: nblocks, b
      integer(c_int64_t), intent(out) :: first, count
      integer(c_int) :: rc
    end function c_block_range

    function c_alloc_mem(comm, size, ptr) bind(C, name="mkx_f08_alloc_mem") &
        result(rc)
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: comm
      integer(c_int64_t), value :: size
      type(c_ptr), intent(out) :: ptr
      integer(c_int) :: rc
    end function c_alloc_mem

    function c_free_mem(comm, ptr) bind(C, name="MKX_Free_mem") result(rc)
      import :: c_int, c_ptr
      type(c_ptr), value :: comm, ptr
      integer(c_int) :: rc
    end function c_free_mem

    function c_start(request, stream) bind(C, name="MKX_Start") result(rc)
      import :: c_int, c_ptr
      type(c_ptr), value :: request, stream
      integer(c_int) :: rc
    end function c_start

    function c_tiles_create(buf, rows, cols, ld, tile_rows, tile_cols, &
        dtype, order, comm, tiles) bind(C, name="MKX_Tiles_create") result(rc)
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: buf, comm
      integer(c_int64_t), value :: rows, cols, ld, tile_rows, tile_cols
      integer(c_int), value :: dtype, order
      type(c_ptr), intent(out) :: tiles
      integer(c_int) :: rc
    end function c_tiles_create

    function c_tiles_free(tiles) bind(C, name="MKX_Tiles_free") result(rc)
      import :: c_int, c_ptr
      type(c_ptr), intent(inout) :: tiles
      integer(c_int) :: rc
    end function c_tiles_free

    function c_tiles_begin(tiles, stream) bind(C, name="MKX_Tiles_begin") &
        result(rc)
      import :: c_int, c_ptr
      type(c_ptr), value :: tiles, stream
      integer(c_int) :: rc
    end function c_tiles_begin

    function c_tiles_wait(tiles, rank, row0, nrows, col0, ncols, stream) &
        bind(C, name="MKX_Tiles_wait") result(rc)
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: tiles, stream
      integer(c_int), value :: rank
      integer(c_int64_t), value :: row0, nrows, col0, ncols
      integer(c_int) :: rc
    end function c_tiles_wait

    function c_tiles_signal(tiles, rank, row0, nrows, col0, ncols, stream) &
        bind(C, name="MKX_Tiles_signal") result(rc)
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: tiles, stream
      integer(c_int), value :: rank
      integer(c_int64_t), value :: row0, nrows, col0, ncols
      integer(c_int) :: rc
    end function c_tiles_signal

    function c_tiles_get_async_error(tiles, err) &
        bind(C, name="MKX_Tiles_get_async_error") result(rc)
      import :: c_int, c_ptr
      type(c_ptr), value :: tiles
      integer(c_int), intent(out) :: err
      integer(c_int) :: rc
    end function c_tiles_get_async_error

    function c_allgather_tiles(send, ld_send, tiles, stream) &
        bind(C, name="MKX_Allgather_tiles") result(rc)
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: send, tiles, stream
      integer(c_int64_t), value :: ld_send
      integer(c_int) :: rc
    end function c_allgather_tiles

    function c_reduce_scatter_tiles(tiles, recv, ld_recv, stream) &
        bind(C, name="MKX_Reduce_scatter_tiles") result(rc)
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: tiles, recv, stream
      integer(c_int64_t), value :: ld_recv
      integer(c_int) :: rc
    end function c_reduce_scatter_tiles

    function c_allreduce_tiles(tiles, out, stream) &
        bind(C, name="MKX_Allreduce_tiles") result(rc)
      import :: c_int, c_ptr
      type(c_ptr), value :: tiles, out, stream
      integer(c_int) :: rc
    end function c_allreduce_tiles

    function c_tiles_gemm(a, a_rank, b, n, ldb, transb, c, ldc, ctype, &
        c_tiles, chunk_rows, stream) bind(C, name="MKX_Tiles_gemm") result(rc)
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: a, b, c, c_tiles, stream
      integer(c_int), value :: a_rank, transb, ctype
      integer(c_int64_t), value :: n, ldb, ldc, chunk_rows
      integer(c_int) :: rc
    end function c_tiles_gemm

    function c_request_free(request) bind(C, name="MKX_Request_free") &
        result(rc)
      import :: c_int, c_ptr
      type(c_ptr), intent(inout) :: request
      integer(c_int) :: rc
    end function c_request_free

    function c_request_get_path(request, name, capturable, ctas) &
        bind(C, name="MKX_Request_get_path") result(rc)
      import :: c_int, c_ptr
      type(c_ptr), value :: request
      type(c_ptr), intent(out) :: name
      integer(c_int), intent(out) :: capturable, ctas
      integer(c_int) :: rc
    end function c_request_get_path

    function c_comm_get_last_path(comm, name, capturable, ctas) &
        bind(C, name="MKX_Comm_get_last_path") result(rc)
      import :: c_int, c_ptr
      type(c_ptr), value :: comm
      type(c_ptr), intent(out) :: name
      integer(c_int), intent(out) :: capturable, ctas
      integer(c_int) :: rc
    end function c_comm_get_last_path

    function c_info_print(comm, file) bind(C, name="mkx_f08_info_print") &
        result(rc)
      import :: c_int, c_ptr
      type(c_ptr), value :: comm, file
      integer(c_int) :: rc
    end function c_info_print
  end interface

contains

  ! ---- helpers ---------------------------------------------------------------

  subroutine set_ierror(rc, ierror)
    integer(c_int), intent(in) :: rc
    integer, intent(out), optional :: ierror
    if (present(ierror)) ierror = int(rc)
  end subroutine set_ierror

  function opt_ptr(p) result(q)
    type(c_ptr), intent(in), optional :: p
    type(c_ptr) :: q
    q = c_null_ptr
    if (present(p)) q = p
  end function opt_ptr

  function opt_i64(v) result(w)
    integer(c_int64_t), intent(in), optional :: v
    integer(c_int64_t) :: w
    w = 0
    if (present(v)) w = v
  end function opt_i64

  ! A NUL-terminated C string as a Fortran string.
  function f_string(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer :: n, i
    if (.not. c_associated(p)) then
      s = ""
      return
    end if
    n = int(c_strlen(p))
    allocate(character(len=n) :: s)
    if (n == 0) return
    call c_f_pointer(p, chars, [n])
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function f_string

  logical function tiles_eq(a, b)
    type(MKX_Tiles), intent(in) :: a, b
    tiles_eq = same_ptr(a%ptr, b%ptr)
  end function tiles_eq

  logical function tiles_ne(a, b)
    type(MKX_Tiles), intent(in) :: a, b
    tiles_ne = .not. same_ptr(a%ptr, b%ptr)
  end function tiles_ne

  logical function comm_eq(a, b)
    type(MKX_Comm), intent(in) :: a, b
    comm_eq = same_ptr(a%ptr, b%ptr)
  end function comm_eq

  logical function comm_ne(a, b)
    type(MKX_Comm), intent(in) :: a, b
    comm_ne = .not. same_ptr(a%ptr, b%ptr)
  end function comm_ne

  logical function request_eq(a, b)
    type(MKX_Request), intent(in) :: a, b
    request_eq = same_ptr(a%ptr, b%ptr)
  end function request_eq

  logical function request_ne(a, b)
    type(MKX_Request), intent(in) :: a, b
    request_ne = .not. same_ptr(a%ptr, b%ptr)
  end function request_ne

  logical function same_ptr(a, b)
    type(c_ptr), intent(in) :: a, b
    if (c_associated(a)) then
      same_ptr = c_associated(a, b)
    else
      same_ptr = .not. c_associated(b)
    end if
  end function same_ptr

  ! ---- version, errors, types ------------------------------------------------

  ! The version of the library actually linked.
  subroutine MKX_Get_version(major, minor, patch, ierror)
    integer, intent(out) :: major, minor, patch
    integer, intent(out), optional :: ierror
    integer(c_int) :: a, b, c, rc
    call mkx_f08_clear_error()
    rc = c_get_version(a, b, c)
    major = int(a)
    minor = int(b)
    patch = int(c)
    call set_ierror(rc, ierror)
  end subroutine MKX_Get_version

  ! The static description of an error code, allocated to its length.
  subroutine MKX_Error_string(errorcode, string, ierror)
    integer, intent(in) :: errorcode
    character(len=:), allocatable, intent(out) :: string
    integer, intent(out), optional :: ierror
    string = f_string(c_error_string(int(errorcode, c_int)))
    if (present(ierror)) ierror = MKX_SUCCESS
  end subroutine MKX_Error_string

  ! The message of the last call made through this module on this thread
  ! (argument, rank or tile at fault); empty if that call succeeded.
  subroutine MKX_Get_last_error(string, ierror)
    character(len=:), allocatable, intent(out) :: string
    integer, intent(out), optional :: ierror
    string = f_string(mkx_f08_last_error())
    if (present(ierror)) ierror = MKX_SUCCESS
  end subroutine MKX_Get_last_error

  ! Size in bytes of one element; an invalid datatype gives size = 0 and
  ! MKX_ERR_INVALID_ARG.
  subroutine MKX_Type_size(datatype, size, ierror)
    integer, intent(in) :: datatype
    integer(c_int64_t), intent(out) :: size
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    size = 0
    rc = c_type_size(int(datatype, c_int), size)
    call set_ierror(rc, ierror)
  end subroutine MKX_Type_size

  ! ---- communicators -----------------------------------------------------------

  ! Collective over comm.  info may be MPI_INFO_NULL.
  subroutine MKX_Comm_create(comm, info, newcomm, ierror)
    type(MPI_Comm), intent(in) :: comm
    type(MPI_Info), intent(in) :: info
    type(MKX_Comm), intent(out) :: newcomm
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    rc = c_comm_create(int(comm%MPI_VAL, c_int), int(info%MPI_VAL, c_int), &
        newcomm%ptr)
    call set_ierror(rc, ierror)
  end subroutine MKX_Comm_create

  ! Collective; sets comm to MKX_COMM_NULL.
  subroutine MKX_Comm_free(comm, ierror)
    type(MKX_Comm), intent(inout) :: comm
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    call mkx_f08_clear_error()
    rc = c_comm_free(comm%ptr)
    call set_ierror(rc, ierror)
  end subroutine MKX_Comm_free


  ! Rows [first, first + count) (0-based) of block b of rows split over
  ! nblocks blocks; in Fortran indexing rows first+1 .. first+count.
  subroutine MKX_Block_range(rows, nblocks, b, first, count, ierror)
    integer(c_int64_t), intent(in) :: rows
    integer, intent(in) :: nblocks, b
    integer(c_int64_t), intent(out) :: first, count
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    call mkx_f08_clear_error()
    first = 0
    count = 0
    rc = c_block_range(rows, int(nblocks, c_int), int(b, c_int), first, count)
    call set_ierror(rc, ierror)
  end subroutine MKX_Block_range

  ! ---- memory ------------------------------------------------------------------

  ! Collective.  size in bytes (same on every rank; negative: MKX_ERR_BAD_SIZE).
  ! Use the memory through c_f_pointer on the host path, or pass baseptr as
  ! a device pointer.
  subroutine MKX_Alloc_mem(comm, size, baseptr, ierror)
    type(MKX_Comm), intent(in) :: comm
    integer(c_int64_t), intent(in) :: size
    type(c_ptr), intent(out) :: baseptr
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    baseptr = c_null_ptr
    rc = c_alloc_mem(comm%ptr, size, baseptr)
    call set_ierror(rc, ierror)
  end subroutine MKX_Alloc_mem

  subroutine MKX_Free_mem(comm, baseptr, ierror)
    type(MKX_Comm), intent(in) :: comm
    type(c_ptr), intent(in) :: baseptr
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    call mkx_f08_clear_error()
    rc = c_free_mem(comm%ptr, baseptr)
    call set_ierror(rc, ierror)
  end subroutine MKX_Free_mem

  ! ---- persistent requests -------------------------------------------------------

  ! Collective over the request's communicator.
  subroutine MKX_Start(request, stream, ierror)
    type(MKX_Request), intent(in) :: request
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    call mkx_f08_clear_error()
    rc = c_start(request%ptr, opt_ptr(stream))
    call set_ierror(rc, ierror)
  end subroutine MKX_Start

  ! Collective; sets request to MKX_REQUEST_NULL.
  subroutine MKX_Request_free(request, ierror)
    type(MKX_Request), intent(inout) :: request
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    call mkx_f08_clear_error()
    rc = c_request_free(request%ptr)
    call set_ierror(rc, ierror)
  end subroutine MKX_Request_free

  ! ---- which path a call took ----------------------------------------------------

  ! The path MKX_Start of request runs, whether a start of it may be captured
  ! in a CUDA graph, and the CTAs its kernels take on this rank (mkx.h).
  subroutine MKX_Request_get_path(request, name, capturable, ctas, ierror)
    type(MKX_Request), intent(in) :: request
    character(len=:), allocatable, intent(out) :: name
    logical, intent(out) :: capturable
    integer, intent(out) :: ctas
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc, cap, n
    type(c_ptr) :: s
    call mkx_f08_clear_error()
    rc = c_request_get_path(request%ptr, s, cap, n)
    call path_out(rc, s, cap, n, name, capturable, ctas, ierror)
  end subroutine MKX_Request_get_path

  ! The same for the last call or start on comm ("none" before any).
  subroutine MKX_Comm_get_last_path(comm, name, capturable, ctas, ierror)
    type(MKX_Comm), intent(in) :: comm
    character(len=:), allocatable, intent(out) :: name
    logical, intent(out) :: capturable
    integer, intent(out) :: ctas
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc, cap, n
    type(c_ptr) :: s
    call mkx_f08_clear_error()
    rc = c_comm_get_last_path(comm%ptr, s, cap, n)
    call path_out(rc, s, cap, n, name, capturable, ctas, ierror)
  end subroutine MKX_Comm_get_last_path

  ! The outputs of a path query, as Fortran takes them (nothing of a failed
  ! one but ierror).
  subroutine path_out(rc, s, cap, n, name, capturable, ctas, ierror)
    integer(c_int), intent(in) :: rc, cap, n
    type(c_ptr), intent(in) :: s
    character(len=:), allocatable, intent(out) :: name
    logical, intent(out) :: capturable
    integer, intent(out) :: ctas
    integer, intent(out), optional :: ierror
    name = ""
    capturable = .false.
    ctas = 0
    if (rc == MKX_SUCCESS) then
      name = f_string(s)
      capturable = cap /= 0
      ctas = int(n)
    end if
    call set_ierror(rc, ierror)
  end subroutine path_out

  ! ---- options -------------------------------------------------------------------

  ! Prints version, build features, every option and, if comm is given (and
  ! not MKX_COMM_NULL), this rank's placement.  file: a C FILE * (type(c_ptr));
  ! absent: standard output (Fortran's output is flushed first).
  subroutine MKX_Info_print(comm, file, ierror)
    type(MKX_Comm), intent(in), optional :: comm
    type(c_ptr), intent(in), optional :: file
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    type(c_ptr) :: c
    c = c_null_ptr
    if (present(comm)) c = comm%ptr
    flush(output_unit)
    rc = c_info_print(c, opt_ptr(file))
    call set_ierror(rc, ierror)
  end subroutine MKX_Info_print

  ! ---- data tiles (mkx_tiles.h) ---------------------------------------------------
  ! Buffers are type(c_ptr) device pointers; ranks, rows and columns are
  ! 0-based as in C.  The device descriptor (MKX_Tiles_device) is for CUDA
  ! kernels and has no Fortran twin.

  ! Collective: a tile set over each rank's buf (c_null_ptr on every rank:
  ! semaphores only).
  subroutine MKX_Tiles_create(buf, rows, cols, ld, tile_rows, tile_cols, &
      dtype, order, comm, tiles, ierror)
    type(c_ptr), intent(in) :: buf
    integer(c_int64_t), intent(in) :: rows, cols, ld, tile_rows, tile_cols
    integer, intent(in) :: dtype, order
    type(MKX_Comm), intent(in) :: comm
    type(MKX_Tiles), intent(out) :: tiles
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    rc = c_tiles_create(buf, rows, cols, ld, tile_rows, tile_cols, &
        int(dtype, c_int), int(order, c_int), comm%ptr, tiles%ptr)
    call set_ierror(rc, ierror)
  end subroutine MKX_Tiles_create

  ! Collective; sets tiles to MKX_TILES_NULL.
  subroutine MKX_Tiles_free(tiles, ierror)
    type(MKX_Tiles), intent(inout) :: tiles
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    call mkx_f08_clear_error()
    rc = c_tiles_free(tiles%ptr)
    call set_ierror(rc, ierror)
  end subroutine MKX_Tiles_free

  ! The next epoch on stream (every rank, in the same order).
  subroutine MKX_Tiles_begin(tiles, stream, ierror)
    type(MKX_Tiles), intent(in) :: tiles
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    rc = c_tiles_begin(tiles%ptr, opt_ptr(stream))
    call set_ierror(rc, ierror)
  end subroutine MKX_Tiles_begin

  ! stream waits until the rectangle's data tiles of rank's copy are complete.
  subroutine MKX_Tiles_wait(tiles, rank, row0, nrows, col0, ncols, stream, &
      ierror)
    type(MKX_Tiles), intent(in) :: tiles
    integer, intent(in) :: rank
    integer(c_int64_t), intent(in) :: row0, nrows, col0, ncols
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    rc = c_tiles_wait(tiles%ptr, int(rank, c_int), row0, nrows, col0, ncols, &
        opt_ptr(stream))
    call set_ierror(rc, ierror)
  end subroutine MKX_Tiles_wait

  ! After stream's earlier work, the rectangle of rank's copy is signalled.
  subroutine MKX_Tiles_signal(tiles, rank, row0, nrows, col0, ncols, stream, &
      ierror)
    type(MKX_Tiles), intent(in) :: tiles
    integer, intent(in) :: rank
    integer(c_int64_t), intent(in) :: row0, nrows, col0, ncols
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    rc = c_tiles_signal(tiles%ptr, int(rank, c_int), row0, nrows, col0, &
        ncols, opt_ptr(stream))
    call set_ierror(rc, ierror)
  end subroutine MKX_Tiles_signal

  ! The set's recorded failure (MKX_SUCCESS if none), without waiting.
  subroutine MKX_Tiles_get_async_error(tiles, async_error, ierror)
    type(MKX_Tiles), intent(in) :: tiles
    integer, intent(out) :: async_error
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc, e
    e = 0
    rc = c_tiles_get_async_error(tiles%ptr, e)
    async_error = int(e)
    call set_ierror(rc, ierror)
  end subroutine MKX_Tiles_get_async_error

  ! Every node rank's rows into every node rank's copy, in an epoch.
  subroutine MKX_Allgather_tiles(send, ld_send, tiles, stream, ierror)
    type(c_ptr), intent(in) :: send
    integer(c_int64_t), intent(in) :: ld_send
    type(MKX_Tiles), intent(in) :: tiles
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    rc = c_allgather_tiles(send, ld_send, tiles%ptr, opt_ptr(stream))
    call set_ierror(rc, ierror)
  end subroutine MKX_Allgather_tiles

  ! This rank's block of rows of the sum of the node ranks' copies, into recv.
  subroutine MKX_Reduce_scatter_tiles(tiles, recv, ld_recv, stream, ierror)
    type(MKX_Tiles), intent(in) :: tiles
    type(c_ptr), intent(in) :: recv
    integer(c_int64_t), intent(in) :: ld_recv
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    rc = c_reduce_scatter_tiles(tiles%ptr, recv, ld_recv, opt_ptr(stream))
    call set_ierror(rc, ierror)
  end subroutine MKX_Reduce_scatter_tiles

  ! The sum of the node ranks' copies into every rank's copy of out.
  subroutine MKX_Allreduce_tiles(tiles, out, stream, ierror)
    type(MKX_Tiles), intent(in) :: tiles, out
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    rc = c_allreduce_tiles(tiles%ptr, out%ptr, opt_ptr(stream))
    call set_ierror(rc, ierror)
  end subroutine MKX_Allreduce_tiles

  ! C = A x B by cuBLAS in chunks, each after a wait for its rows of A
  ! (row-major, as in C); c_tiles may be MKX_TILES_NULL.
  subroutine MKX_Tiles_gemm(a, a_rank, b, n, ldb, transb, c, ldc, ctype, &
      c_tiles, chunk_rows, stream, ierror)
    type(MKX_Tiles), intent(in) :: a, c_tiles
    integer, intent(in) :: a_rank, transb, ctype
    type(c_ptr), intent(in) :: b, c
    integer(c_int64_t), intent(in) :: n, ldb, ldc, chunk_rows
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    rc = c_tiles_gemm(a%ptr, int(a_rank, c_int), b, n, ldb, &
        int(transb, c_int), c, ldc, int(ctype, c_int), c_tiles%ptr, &
        chunk_rows, opt_ptr(stream))
    call set_ierror(rc, ierror)
  end subroutine MKX_Tiles_gemm

  ! ---- the operations and the communicator queries ----------------------------
#include "mkx_f08_gen_procs.inc"
end module mkx_f08
