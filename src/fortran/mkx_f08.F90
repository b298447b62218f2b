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
!  - The stream is an optional type(c_ptr) (a cudaStream_t); absent means
!    the NULL (legacy) stream.  Host buffers ignore it.
!
! Buffers of the operations (A, B, C, ..., Q, K, V, X, W, ...): each
! operation is a generic interface with two kinds of specific procedure.
!
!  - Arrays (the host path).  Pass ordinary Fortran arrays of any type:
!      real(c_double) for MKX_FP64, real(c_float) for MKX_FP32, and 16-bit
!      integers (integer(c_int16_t)) holding the bits of MKX_BF16/MKX_FP16.
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
!  MKX_Request_free, with the TARGET or ASYNCHRONOUS attribute.
!
! Index conventions are those of C: MKX_Comm_rank, MKX_Block_range's block
! b and first row, and the MoE expert ids and origins are 0-based.
!
! Build: libmkx_f08 (this module and the shim; links libmkx).  The module
! file mkx_f08.mod is installed into $(includedir), beside mkx.h:
!   mpifort app.f90 -I$PREFIX/include -L$PREFIX/lib -lmkx_f08 -lmkx
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

  integer, parameter, public :: MKX_ROW_MAJOR = 101
  integer, parameter, public :: MKX_COL_MAJOR = 102

  integer, parameter, public :: MKX_NO_TRANS = 111
  integer, parameter, public :: MKX_TRANS = 112

  ! ---- handles ----------------------------------------------------------------
  type, bind(C), public :: MKX_Comm
    type(c_ptr) :: ptr = c_null_ptr
  end type MKX_Comm

  type, bind(C), public :: MKX_Request
    type(c_ptr) :: ptr = c_null_ptr
  end type MKX_Request

  type(MKX_Comm), parameter, public :: MKX_COMM_NULL = MKX_Comm(c_null_ptr)
  type(MKX_Request), parameter, public :: &
      MKX_REQUEST_NULL = MKX_Request(c_null_ptr)

  interface operator(==)
    module procedure comm_eq, request_eq
  end interface
  interface operator(/=)
    module procedure comm_ne, request_ne
  end interface
  public :: operator(==), operator(/=)

  ! ---- procedures ---------------------------------------------------------------
  public :: MKX_Get_version, MKX_Error_string, MKX_Get_last_error
  public :: MKX_Type_size
  public :: MKX_Comm_create, MKX_Comm_free, MKX_Comm_rank, MKX_Comm_size
  public :: MKX_Comm_node, MKX_Comm_num_nodes, MKX_Comm_local_rank
  public :: MKX_Comm_local_size, MKX_Comm_device, MKX_Block_range
  public :: MKX_Comm_get_async_error
  public :: MKX_Alloc_mem, MKX_Free_mem
  public :: MKX_Allgather_gemm, MKX_Gemm_reduce_scatter, MKX_Gemm_allreduce
  public :: MKX_Ring_attention, MKX_Moe_dispatch_gemm, MKX_Moe_layer
  public :: MKX_Allgather_gemm_init, MKX_Gemm_reduce_scatter_init
  public :: MKX_Gemm_allreduce_init, MKX_Start, MKX_Request_free
  public :: MKX_Info_print

  ! Operations: one specific for type(c_ptr) buffers (_ptr) and one per rank
  ! of the first buffer for arrays (_r1, _r2, ...).
  interface MKX_Allgather_gemm
    module procedure mkx_allgather_gemm_ptr, &
      mkx_allgather_gemm_r1, mkx_allgather_gemm_r2
  end interface MKX_Allgather_gemm

  interface MKX_Allgather_gemm_init
    module procedure mkx_allgather_gemm_init_ptr, &
      mkx_allgather_gemm_init_r1, mkx_allgather_gemm_init_r2
  end interface MKX_Allgather_gemm_init

  interface MKX_Gemm_reduce_scatter
    module procedure mkx_gemm_reduce_scatter_ptr, &
      mkx_gemm_reduce_scatter_r1, mkx_gemm_reduce_scatter_r2
  end interface MKX_Gemm_reduce_scatter

  interface MKX_Gemm_reduce_scatter_init
    module procedure mkx_gemm_reduce_scatter_init_ptr, &
      mkx_gemm_reduce_scatter_init_r1, mkx_gemm_reduce_scatter_init_r2
  end interface MKX_Gemm_reduce_scatter_init

  interface MKX_Gemm_allreduce
    module procedure mkx_gemm_allreduce_ptr, &
      mkx_gemm_allreduce_r1, mkx_gemm_allreduce_r2
  end interface MKX_Gemm_allreduce

  interface MKX_Gemm_allreduce_init
    module procedure mkx_gemm_allreduce_init_ptr, &
      mkx_gemm_allreduce_init_r1, mkx_gemm_allreduce_init_r2
  end interface MKX_Gemm_allreduce_init

  interface MKX_Ring_attention
    module procedure mkx_ring_attention_ptr, &
      mkx_ring_attention_r1, mkx_ring_attention_r2, mkx_ring_attention_r3, &
      mkx_ring_attention_r4
  end interface MKX_Ring_attention

  interface MKX_Moe_dispatch_gemm
    module procedure mkx_moe_dispatch_gemm_ptr, &
      mkx_moe_dispatch_gemm_r1, mkx_moe_dispatch_gemm_r2
  end interface MKX_Moe_dispatch_gemm

  interface MKX_Moe_layer
    module procedure mkx_moe_layer_ptr, mkx_moe_layer_r1, &
      mkx_moe_layer_r2
  end interface MKX_Moe_layer
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

    function c_comm_rank(comm, rank) bind(C, name="MKX_Comm_rank") &
        result(rc)
      import :: c_int, c_ptr
      type(c_ptr), value :: comm
      integer(c_int), intent(out) :: rank
      integer(c_int) :: rc
    end function c_comm_rank

    function c_comm_size(comm, size) bind(C, name="MKX_Comm_size") &
        result(rc)
      import :: c_int, c_ptr
      type(c_ptr), value :: comm
      integer(c_int), intent(out) :: size
      integer(c_int) :: rc
    end function c_comm_size

    function c_comm_node(comm, node) bind(C, name="MKX_Comm_node") &
        result(rc)
      import :: c_int, c_ptr
      type(c_ptr), value :: comm
      integer(c_int), intent(out) :: node
      integer(c_int) :: rc
    end function c_comm_node

    function c_comm_num_nodes(comm, num_nodes) bind(C, name="MKX_Comm_num_nodes") &
        result(rc)
      import :: c_int, c_ptr
      type(c_ptr), value :: comm
      integer(c_int), intent(out) :: num_nodes
      integer(c_int) :: rc
    end function c_comm_num_nodes

    function c_comm_local_rank(comm, local_rank) bind(C, name="MKX_Comm_local_rank") &
        result(rc)
      import :: c_int, c_ptr
      type(c_ptr), value :: comm
      integer(c_int), intent(out) :: local_rank
      integer(c_int) :: rc
    end function c_comm_local_rank

    function c_comm_local_size(comm, local_size) bind(C, name="MKX_Comm_local_size") &
        result(rc)
      import :: c_int, c_ptr
      type(c_ptr), value :: comm
      integer(c_int), intent(out) :: local_size
      integer(c_int) :: rc
    end function c_comm_local_size

    function c_comm_device(comm, device) bind(C, name="MKX_Comm_device") &
        result(rc)
      import :: c_int, c_ptr
      type(c_ptr), value :: comm
      integer(c_int), intent(out) :: device
      integer(c_int) :: rc
    end function c_comm_device

    function c_comm_get_async_error(comm, err) &
        bind(C, name="MKX_Comm_get_async_error") result(rc)
      import :: c_int, c_ptr
      type(c_ptr), value :: comm
      integer(c_int), intent(out) :: err
      integer(c_int) :: rc
    end function c_comm_get_async_error

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

    function c_request_free(request) bind(C, name="MKX_Request_free") &
        result(rc)
      import :: c_int, c_ptr
      type(c_ptr), intent(inout) :: request
      integer(c_int) :: rc
    end function c_request_free

    function c_info_print(comm, file) bind(C, name="mkx_f08_info_print") &
        result(rc)
      import :: c_int, c_ptr
      type(c_ptr), value :: comm, file
      integer(c_int) :: rc
    end function c_info_print

    function c_allgather_gemm_p(A, m_local, k, lda, B, n, ldb, transb, &
        C, ldc, A_out, ld_aout, dtype, ctype, order, comm, stream) &
        bind(C, name="MKX_Allgather_gemm") result(rc)
      import :: c_ptr, c_int, c_int64_t, c_double
      type(c_ptr), value :: A
      integer(c_int64_t), value :: m_local
      integer(c_int64_t), value :: k
      integer(c_int64_t), value :: lda
      type(c_ptr), value :: B
      integer(c_int64_t), value :: n
      integer(c_int64_t), value :: ldb
      integer(c_int), value :: transb
      type(c_ptr), value :: C
      integer(c_int64_t), value :: ldc
      type(c_ptr), value :: A_out
      integer(c_int64_t), value :: ld_aout
      integer(c_int), value :: dtype
      integer(c_int), value :: ctype
      integer(c_int), value :: order
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
      integer(c_int) :: rc
    end function c_allgather_gemm_p

    function c_allgather_gemm_a(A, m_local, k, lda, B, n, ldb, transb, &
        C, ldc, A_out, ld_aout, dtype, ctype, order, comm, stream, &
        persistent, info, request) &
        bind(C, name="mkx_f08_allgather_gemm_a") result(rc)
      import :: c_ptr, c_int, c_int64_t, c_double
      type(*), dimension(..), intent(in) :: A
      integer(c_int64_t), value :: m_local
      integer(c_int64_t), value :: k
      integer(c_int64_t), value :: lda
      type(*), dimension(..), intent(in) :: B
      integer(c_int64_t), value :: n
      integer(c_int64_t), value :: ldb
      integer(c_int), value :: transb
      type(*), dimension(..) :: C
      integer(c_int64_t), value :: ldc
      type(*), dimension(..), optional :: A_out
      integer(c_int64_t), value :: ld_aout
      integer(c_int), value :: dtype
      integer(c_int), value :: ctype
      integer(c_int), value :: order
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
      integer(c_int), value :: persistent
      integer(c_int), value :: info
      type(c_ptr), intent(inout) :: request
      integer(c_int) :: rc
    end function c_allgather_gemm_a

    function c_allgather_gemm_init_p(A, m_local, k, lda, B, n, ldb, transb, &
        C, ldc, A_out, ld_aout, dtype, ctype, order, comm, info, request) &
        bind(C, name="mkx_f08_allgather_gemm_init_p") result(rc)
      import :: c_ptr, c_int, c_int64_t, c_double
      type(c_ptr), value :: A
      integer(c_int64_t), value :: m_local
      integer(c_int64_t), value :: k
      integer(c_int64_t), value :: lda
      type(c_ptr), value :: B
      integer(c_int64_t), value :: n
      integer(c_int64_t), value :: ldb
      integer(c_int), value :: transb
      type(c_ptr), value :: C
      integer(c_int64_t), value :: ldc
      type(c_ptr), value :: A_out
      integer(c_int64_t), value :: ld_aout
      integer(c_int), value :: dtype
      integer(c_int), value :: ctype
      integer(c_int), value :: order
      type(c_ptr), value :: comm
      integer(c_int), value :: info
      type(c_ptr), intent(inout) :: request
      integer(c_int) :: rc
    end function c_allgather_gemm_init_p

    function c_gemm_reduce_scatter_p(A, M, k_local, lda, B, n, ldb, transb, &
        C, ldc, dtype, ctype, order, comm, stream) &
        bind(C, name="MKX_Gemm_reduce_scatter") result(rc)
      import :: c_ptr, c_int, c_int64_t, c_double
      type(c_ptr), value :: A
      integer(c_int64_t), value :: M
      integer(c_int64_t), value :: k_local
      integer(c_int64_t), value :: lda
      type(c_ptr), value :: B
      integer(c_int64_t), value :: n
      integer(c_int64_t), value :: ldb
      integer(c_int), value :: transb
      type(c_ptr), value :: C
      integer(c_int64_t), value :: ldc
      integer(c_int), value :: dtype
      integer(c_int), value :: ctype
      integer(c_int), value :: order
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
      integer(c_int) :: rc
    end function c_gemm_reduce_scatter_p

    function c_gemm_reduce_scatter_a(A, M, k_local, lda, B, n, ldb, transb, &
        C, ldc, dtype, ctype, order, comm, stream, persistent, info, request) &
        bind(C, name="mkx_f08_gemm_reduce_scatter_a") result(rc)
      import :: c_ptr, c_int, c_int64_t, c_double
      type(*), dimension(..), intent(in) :: A
      integer(c_int64_t), value :: M
      integer(c_int64_t), value :: k_local
      integer(c_int64_t), value :: lda
      type(*), dimension(..), intent(in) :: B
      integer(c_int64_t), value :: n
      integer(c_int64_t), value :: ldb
      integer(c_int), value :: transb
      type(*), dimension(..) :: C
      integer(c_int64_t), value :: ldc
      integer(c_int), value :: dtype
      integer(c_int), value :: ctype
      integer(c_int), value :: order
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
      integer(c_int), value :: persistent
      integer(c_int), value :: info
      type(c_ptr), intent(inout) :: request
      integer(c_int) :: rc
    end function c_gemm_reduce_scatter_a

    function c_gemm_reduce_scatter_init_p(A, M, k_local, lda, B, n, ldb, transb, &
        C, ldc, dtype, ctype, order, comm, info, request) &
        bind(C, name="mkx_f08_gemm_reduce_scatter_init_p") result(rc)
      import :: c_ptr, c_int, c_int64_t, c_double
      type(c_ptr), value :: A
      integer(c_int64_t), value :: M
      integer(c_int64_t), value :: k_local
      integer(c_int64_t), value :: lda
      type(c_ptr), value :: B
      integer(c_int64_t), value :: n
      integer(c_int64_t), value :: ldb
      integer(c_int), value :: transb
      type(c_ptr), value :: C
      integer(c_int64_t), value :: ldc
      integer(c_int), value :: dtype
      integer(c_int), value :: ctype
      integer(c_int), value :: order
      type(c_ptr), value :: comm
      integer(c_int), value :: info
      type(c_ptr), intent(inout) :: request
      integer(c_int) :: rc
    end function c_gemm_reduce_scatter_init_p

    function c_gemm_allreduce_p(A, M, k_local, lda, B, n, ldb, transb, &
        C, ldc, dtype, ctype, order, comm, stream) &
        bind(C, name="MKX_Gemm_allreduce") result(rc)
      import :: c_ptr, c_int, c_int64_t, c_double
      type(c_ptr), value :: A
      integer(c_int64_t), value :: M
      integer(c_int64_t), value :: k_local
      integer(c_int64_t), value :: lda
      type(c_ptr), value :: B
      integer(c_int64_t), value :: n
      integer(c_int64_t), value :: ldb
      integer(c_int), value :: transb
      type(c_ptr), value :: C
      integer(c_int64_t), value :: ldc
      integer(c_int), value :: dtype
      integer(c_int), value :: ctype
      integer(c_int), value :: order
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
      integer(c_int) :: rc
    end function c_gemm_allreduce_p

    function c_gemm_allreduce_a(A, M, k_local, lda, B, n, ldb, transb, &
        C, ldc, dtype, ctype, order, comm, stream, persistent, info, request) &
        bind(C, name="mkx_f08_gemm_allreduce_a") result(rc)
      import :: c_ptr, c_int, c_int64_t, c_double
      type(*), dimension(..), intent(in) :: A
      integer(c_int64_t), value :: M
      integer(c_int64_t), value :: k_local
      integer(c_int64_t), value :: lda
      type(*), dimension(..), intent(in) :: B
      integer(c_int64_t), value :: n
      integer(c_int64_t), value :: ldb
      integer(c_int), value :: transb
      type(*), dimension(..) :: C
      integer(c_int64_t), value :: ldc
      integer(c_int), value :: dtype
      integer(c_int), value :: ctype
      integer(c_int), value :: order
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
      integer(c_int), value :: persistent
      integer(c_int), value :: info
      type(c_ptr), intent(inout) :: request
      integer(c_int) :: rc
    end function c_gemm_allreduce_a

    function c_gemm_allreduce_init_p(A, M, k_local, lda, B, n, ldb, transb, &
        C, ldc, dtype, ctype, order, comm, info, request) &
        bind(C, name="mkx_f08_gemm_allreduce_init_p") result(rc)
      import :: c_ptr, c_int, c_int64_t, c_double
      type(c_ptr), value :: A
      integer(c_int64_t), value :: M
      integer(c_int64_t), value :: k_local
      integer(c_int64_t), value :: lda
      type(c_ptr), value :: B
      integer(c_int64_t), value :: n
      integer(c_int64_t), value :: ldb
      integer(c_int), value :: transb
      type(c_ptr), value :: C
      integer(c_int64_t), value :: ldc
      integer(c_int), value :: dtype
      integer(c_int), value :: ctype
      integer(c_int), value :: order
      type(c_ptr), value :: comm
      integer(c_int), value :: info
      type(c_ptr), intent(inout) :: request
      integer(c_int) :: rc
    end function c_gemm_allreduce_init_p

    function c_ring_attention_p(Q, K, V, O, LSE, batch, seq_local, &
        heads_q, heads_kv, head_dim, causal, scale, dtype, comm, stream) &
        bind(C, name="MKX_Ring_attention") result(rc)
      import :: c_ptr, c_int, c_int64_t, c_double
      type(c_ptr), value :: Q
      type(c_ptr), value :: K
      type(c_ptr), value :: V
      type(c_ptr), value :: O
      type(c_ptr), value :: LSE
      integer(c_int64_t), value :: batch
      integer(c_int64_t), value :: seq_local
      integer(c_int64_t), value :: heads_q
      integer(c_int64_t), value :: heads_kv
      integer(c_int64_t), value :: head_dim
      integer(c_int), value :: causal
      real(c_double), value :: scale
      integer(c_int), value :: dtype
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
      integer(c_int) :: rc
    end function c_ring_attention_p

    function c_ring_attention_a(Q, K, V, O, LSE, batch, seq_local, &
        heads_q, heads_kv, head_dim, causal, scale, dtype, comm, stream) &
        bind(C, name="mkx_f08_ring_attention_a") result(rc)
      import :: c_ptr, c_int, c_int64_t, c_double
      type(*), dimension(..), intent(in) :: Q
      type(*), dimension(..), intent(in) :: K
      type(*), dimension(..), intent(in) :: V
      type(*), dimension(..) :: O
      type(*), dimension(..), optional :: LSE
      integer(c_int64_t), value :: batch
      integer(c_int64_t), value :: seq_local
      integer(c_int64_t), value :: heads_q
      integer(c_int64_t), value :: heads_kv
      integer(c_int64_t), value :: head_dim
      integer(c_int), value :: causal
      real(c_double), value :: scale
      integer(c_int), value :: dtype
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
      integer(c_int) :: rc
    end function c_ring_attention_a

    function c_moe_dispatch_gemm_p(X, num_tokens, hidden, topk_ids, &
        topk_weight, topk, num_experts, W, n, Y, y_rows, expert_rows, &
        origin, dtype, comm, stream) &
        bind(C, name="MKX_Moe_dispatch_gemm") result(rc)
      import :: c_ptr, c_int, c_int64_t, c_double
      type(c_ptr), value :: X
      integer(c_int64_t), value :: num_tokens
      integer(c_int64_t), value :: hidden
      type(c_ptr), value :: topk_ids
      type(c_ptr), value :: topk_weight
      integer(c_int64_t), value :: topk
      integer(c_int64_t), value :: num_experts
      type(c_ptr), value :: W
      integer(c_int64_t), value :: n
      type(c_ptr), value :: Y
      integer(c_int64_t), value :: y_rows
      type(c_ptr), value :: expert_rows
      type(c_ptr), value :: origin
      integer(c_int), value :: dtype
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
      integer(c_int) :: rc
    end function c_moe_dispatch_gemm_p

    function c_moe_dispatch_gemm_a(X, num_tokens, hidden, topk_ids, &
        topk_weight, topk, num_experts, W, n, Y, y_rows, expert_rows, &
        origin, dtype, comm, stream) &
        bind(C, name="mkx_f08_moe_dispatch_gemm_a") result(rc)
      import :: c_ptr, c_int, c_int64_t, c_double
      type(*), dimension(..), intent(in) :: X
      integer(c_int64_t), value :: num_tokens
      integer(c_int64_t), value :: hidden
      type(*), dimension(..), intent(in) :: topk_ids
      type(*), dimension(..), intent(in), optional :: topk_weight
      integer(c_int64_t), value :: topk
      integer(c_int64_t), value :: num_experts
      type(*), dimension(..), intent(in) :: W
      integer(c_int64_t), value :: n
      type(*), dimension(..) :: Y
      integer(c_int64_t), value :: y_rows
      type(*), dimension(..) :: expert_rows
      type(*), dimension(..), optional :: origin
      integer(c_int), value :: dtype
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
      integer(c_int) :: rc
    end function c_moe_dispatch_gemm_a

    function c_moe_layer_p(X, num_tokens, hidden, topk_ids, &
        topk_weight, topk, num_experts, W1, W2, ffn, out, dtype, comm, &
        stream) &
        bind(C, name="MKX_Moe_layer") result(rc)
      import :: c_ptr, c_int, c_int64_t, c_double
      type(c_ptr), value :: X
      integer(c_int64_t), value :: num_tokens
      integer(c_int64_t), value :: hidden
      type(c_ptr), value :: topk_ids
      type(c_ptr), value :: topk_weight
      integer(c_int64_t), value :: topk
      integer(c_int64_t), value :: num_experts
      type(c_ptr), value :: W1
      type(c_ptr), value :: W2
      integer(c_int64_t), value :: ffn
      type(c_ptr), value :: out
      integer(c_int), value :: dtype
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
      integer(c_int) :: rc
    end function c_moe_layer_p

    function c_moe_layer_a(X, num_tokens, hidden, topk_ids, &
        topk_weight, topk, num_experts, W1, W2, ffn, out, dtype, comm, &
        stream) &
        bind(C, name="mkx_f08_moe_layer_a") result(rc)
      import :: c_ptr, c_int, c_int64_t, c_double
      type(*), dimension(..), intent(in) :: X
      integer(c_int64_t), value :: num_tokens
      integer(c_int64_t), value :: hidden
      type(*), dimension(..), intent(in) :: topk_ids
      type(*), dimension(..), intent(in) :: topk_weight
      integer(c_int64_t), value :: topk
      integer(c_int64_t), value :: num_experts
      type(*), dimension(..), intent(in) :: W1
      type(*), dimension(..), intent(in) :: W2
      integer(c_int64_t), value :: ffn
      type(*), dimension(..) :: out
      integer(c_int), value :: dtype
      type(c_ptr), value :: comm
      type(c_ptr), value :: stream
      integer(c_int) :: rc
    end function c_moe_layer_a
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

  subroutine MKX_Comm_rank(comm, rank, ierror)
    type(MKX_Comm), intent(in) :: comm
    integer, intent(out) :: rank
    integer, intent(out), optional :: ierror
    integer(c_int) :: v, rc
    call mkx_f08_clear_error()
    v = -1
    rc = c_comm_rank(comm%ptr, v)
    rank = int(v)
    call set_ierror(rc, ierror)
  end subroutine MKX_Comm_rank

  subroutine MKX_Comm_size(comm, size, ierror)
    type(MKX_Comm), intent(in) :: comm
    integer, intent(out) :: size
    integer, intent(out), optional :: ierror
    integer(c_int) :: v, rc
    call mkx_f08_clear_error()
    v = -1
    rc = c_comm_size(comm%ptr, v)
    size = int(v)
    call set_ierror(rc, ierror)
  end subroutine MKX_Comm_size

  ! Node index, 0-based.
  subroutine MKX_Comm_node(comm, node, ierror)
    type(MKX_Comm), intent(in) :: comm
    integer, intent(out) :: node
    integer, intent(out), optional :: ierror
    integer(c_int) :: v, rc
    call mkx_f08_clear_error()
    v = -1
    rc = c_comm_node(comm%ptr, v)
    node = int(v)
    call set_ierror(rc, ierror)
  end subroutine MKX_Comm_node

  subroutine MKX_Comm_num_nodes(comm, num_nodes, ierror)
    type(MKX_Comm), intent(in) :: comm
    integer, intent(out) :: num_nodes
    integer, intent(out), optional :: ierror
    integer(c_int) :: v, rc
    call mkx_f08_clear_error()
    v = -1
    rc = c_comm_num_nodes(comm%ptr, v)
    num_nodes = int(v)
    call set_ierror(rc, ierror)
  end subroutine MKX_Comm_num_nodes

  ! Rank in the node, 0-based.
  subroutine MKX_Comm_local_rank(comm, local_rank, ierror)
    type(MKX_Comm), intent(in) :: comm
    integer, intent(out) :: local_rank
    integer, intent(out), optional :: ierror
    integer(c_int) :: v, rc
    call mkx_f08_clear_error()
    v = -1
    rc = c_comm_local_rank(comm%ptr, v)
    local_rank = int(v)
    call set_ierror(rc, ierror)
  end subroutine MKX_Comm_local_rank

  ! Ranks in the node.
  subroutine MKX_Comm_local_size(comm, local_size, ierror)
    type(MKX_Comm), intent(in) :: comm
    integer, intent(out) :: local_size
    integer, intent(out), optional :: ierror
    integer(c_int) :: v, rc
    call mkx_f08_clear_error()
    v = -1
    rc = c_comm_local_size(comm%ptr, v)
    local_size = int(v)
    call set_ierror(rc, ierror)
  end subroutine MKX_Comm_local_size

  ! CUDA device ordinal of this rank, -1 on the host path.
  subroutine MKX_Comm_device(comm, device, ierror)
    type(MKX_Comm), intent(in) :: comm
    integer, intent(out) :: device
    integer, intent(out), optional :: ierror
    integer(c_int) :: v, rc
    call mkx_f08_clear_error()
    v = -1
    rc = c_comm_device(comm%ptr, v)
    device = int(v)
    call set_ierror(rc, ierror)
  end subroutine MKX_Comm_device

  ! The failure of GPU work enqueued earlier on comm (MKX_SUCCESS if none),
  ! without waiting for it; see MKX_Comm_get_async_error in mkx.h.
  subroutine MKX_Comm_get_async_error(comm, async_error, ierror)
    type(MKX_Comm), intent(in) :: comm
    integer, intent(out) :: async_error
    integer, intent(out), optional :: ierror
    integer(c_int) :: v, rc
    call mkx_f08_clear_error()
    v = 0
    rc = c_comm_get_async_error(comm%ptr, v)
    async_error = int(v)
    call set_ierror(rc, ierror)
  end subroutine MKX_Comm_get_async_error

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

  ! ---- operations ------------------------------------------------------------------
  ! Arguments as in mkx.h; see the top of this file for buffers.  The
  ! specifics of one operation differ only in the declaration of the first
  ! buffer (_ptr: type(c_ptr); _rN: an array of rank N): a change to a C
  ! signature is made to each of them, to its c_*_p / c_*_a interface and,
  ! for arrays, to the shim.

  subroutine mkx_allgather_gemm_ptr(A, m_local, k, lda, B, n, ldb, transb, &
      C, ldc, A_out, ld_aout, dtype, ctype, order, comm, stream, ierror)
    type(c_ptr), intent(in) :: A
    integer(c_int64_t), intent(in) :: m_local
    integer(c_int64_t), intent(in) :: k
    integer(c_int64_t), intent(in) :: lda
    type(c_ptr), intent(in) :: B
    integer(c_int64_t), intent(in) :: n
    integer(c_int64_t), intent(in) :: ldb
    integer, intent(in) :: transb
    type(c_ptr), intent(in) :: C
    integer(c_int64_t), intent(in) :: ldc
    type(c_ptr), intent(in), optional :: A_out
    integer(c_int64_t), intent(in), optional :: ld_aout
    integer, intent(in) :: dtype
    integer, intent(in) :: ctype
    integer, intent(in) :: order
    type(MKX_Comm), intent(in) :: comm
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    call mkx_f08_clear_error()
    rc = c_allgather_gemm_p(A, m_local, k, lda, B, n, ldb, &
        int(transb, c_int), C, ldc, opt_ptr(A_out), opt_i64(ld_aout), &
        int(dtype, c_int), int(ctype, c_int), int(order, c_int), comm%ptr, &
        opt_ptr(stream))
    call set_ierror(rc, ierror)
  end subroutine mkx_allgather_gemm_ptr

  subroutine mkx_allgather_gemm_init_ptr(A, m_local, k, lda, B, n, ldb, transb, &
      C, ldc, A_out, ld_aout, dtype, ctype, order, comm, info, request, &
      ierror)
    type(c_ptr), intent(in) :: A
    integer(c_int64_t), intent(in) :: m_local
    integer(c_int64_t), intent(in) :: k
    integer(c_int64_t), intent(in) :: lda
    type(c_ptr), intent(in) :: B
    integer(c_int64_t), intent(in) :: n
    integer(c_int64_t), intent(in) :: ldb
    integer, intent(in) :: transb
    type(c_ptr), intent(in) :: C
    integer(c_int64_t), intent(in) :: ldc
    type(c_ptr), intent(in), optional :: A_out
    integer(c_int64_t), intent(in), optional :: ld_aout
    integer, intent(in) :: dtype
    integer, intent(in) :: ctype
    integer, intent(in) :: order
    type(MKX_Comm), intent(in) :: comm
    type(MPI_Info), intent(in) :: info
    type(MKX_Request), intent(out) :: request
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    call mkx_f08_clear_error()
    rc = c_allgather_gemm_init_p(A, m_local, k, lda, B, n, ldb, &
        int(transb, c_int), C, ldc, opt_ptr(A_out), opt_i64(ld_aout), &
        int(dtype, c_int), int(ctype, c_int), int(order, c_int), comm%ptr, &
        int(info%MPI_VAL, c_int), request%ptr)
    call set_ierror(rc, ierror)
  end subroutine mkx_allgather_gemm_init_ptr

  subroutine mkx_gemm_reduce_scatter_ptr(A, M, k_local, lda, B, n, ldb, transb, &
      C, ldc, dtype, ctype, order, comm, stream, ierror)
    type(c_ptr), intent(in) :: A
    integer(c_int64_t), intent(in) :: M
    integer(c_int64_t), intent(in) :: k_local
    integer(c_int64_t), intent(in) :: lda
    type(c_ptr), intent(in) :: B
    integer(c_int64_t), intent(in) :: n
    integer(c_int64_t), intent(in) :: ldb
    integer, intent(in) :: transb
    type(c_ptr), intent(in) :: C
    integer(c_int64_t), intent(in) :: ldc
    integer, intent(in) :: dtype
    integer, intent(in) :: ctype
    integer, intent(in) :: order
    type(MKX_Comm), intent(in) :: comm
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    call mkx_f08_clear_error()
    rc = c_gemm_reduce_scatter_p(A, M, k_local, lda, B, n, ldb, &
        int(transb, c_int), C, ldc, int(dtype, c_int), int(ctype, c_int), &
        int(order, c_int), comm%ptr, opt_ptr(stream))
    call set_ierror(rc, ierror)
  end subroutine mkx_gemm_reduce_scatter_ptr

  subroutine mkx_gemm_reduce_scatter_init_ptr(A, M, k_local, lda, B, n, ldb, transb, &
      C, ldc, dtype, ctype, order, comm, info, request, ierror)
    type(c_ptr), intent(in) :: A
    integer(c_int64_t), intent(in) :: M
    integer(c_int64_t), intent(in) :: k_local
    integer(c_int64_t), intent(in) :: lda
    type(c_ptr), intent(in) :: B
    integer(c_int64_t), intent(in) :: n
    integer(c_int64_t), intent(in) :: ldb
    integer, intent(in) :: transb
    type(c_ptr), intent(in) :: C
    integer(c_int64_t), intent(in) :: ldc
    integer, intent(in) :: dtype
    integer, intent(in) :: ctype
    integer, intent(in) :: order
    type(MKX_Comm), intent(in) :: comm
    type(MPI_Info), intent(in) :: info
    type(MKX_Request), intent(out) :: request
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    call mkx_f08_clear_error()
    rc = c_gemm_reduce_scatter_init_p(A, M, k_local, lda, B, n, ldb, &
        int(transb, c_int), C, ldc, int(dtype, c_int), int(ctype, c_int), &
        int(order, c_int), comm%ptr, int(info%MPI_VAL, c_int), request%ptr)
    call set_ierror(rc, ierror)
  end subroutine mkx_gemm_reduce_scatter_init_ptr

  subroutine mkx_gemm_allreduce_ptr(A, M, k_local, lda, B, n, ldb, transb, &
      C, ldc, dtype, ctype, order, comm, stream, ierror)
    type(c_ptr), intent(in) :: A
    integer(c_int64_t), intent(in) :: M
    integer(c_int64_t), intent(in) :: k_local
    integer(c_int64_t), intent(in) :: lda
    type(c_ptr), intent(in) :: B
    integer(c_int64_t), intent(in) :: n
    integer(c_int64_t), intent(in) :: ldb
    integer, intent(in) :: transb
    type(c_ptr), intent(in) :: C
    integer(c_int64_t), intent(in) :: ldc
    integer, intent(in) :: dtype
    integer, intent(in) :: ctype
    integer, intent(in) :: order
    type(MKX_Comm), intent(in) :: comm
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    call mkx_f08_clear_error()
    rc = c_gemm_allreduce_p(A, M, k_local, lda, B, n, ldb, &
        int(transb, c_int), C, ldc, int(dtype, c_int), int(ctype, c_int), &
        int(order, c_int), comm%ptr, opt_ptr(stream))
    call set_ierror(rc, ierror)
  end subroutine mkx_gemm_allreduce_ptr

  subroutine mkx_gemm_allreduce_init_ptr(A, M, k_local, lda, B, n, ldb, transb, &
      C, ldc, dtype, ctype, order, comm, info, request, ierror)
    type(c_ptr), intent(in) :: A
    integer(c_int64_t), intent(in) :: M
    integer(c_int64_t), intent(in) :: k_local
    integer(c_int64_t), intent(in) :: lda
    type(c_ptr), intent(in) :: B
    integer(c_int64_t), intent(in) :: n
    integer(c_int64_t), intent(in) :: ldb
    integer, intent(in) :: transb
    type(c_ptr), intent(in) :: C
    integer(c_int64_t), intent(in) :: ldc
    integer, intent(in) :: dtype
    integer, intent(in) :: ctype
    integer, intent(in) :: order
    type(MKX_Comm), intent(in) :: comm
    type(MPI_Info), intent(in) :: info
    type(MKX_Request), intent(out) :: request
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    call mkx_f08_clear_error()
    rc = c_gemm_allreduce_init_p(A, M, k_local, lda, B, n, ldb, &
        int(transb, c_int), C, ldc, int(dtype, c_int), int(ctype, c_int), &
        int(order, c_int), comm%ptr, int(info%MPI_VAL, c_int), request%ptr)
    call set_ierror(rc, ierror)
  end subroutine mkx_gemm_allreduce_init_ptr

  subroutine mkx_ring_attention_ptr(Q, K, V, O, LSE, batch, seq_local, &
      heads_q, heads_kv, head_dim, causal, scale, dtype, comm, stream, &
      ierror)
    type(c_ptr), intent(in) :: Q
    type(c_ptr), intent(in) :: K
    type(c_ptr), intent(in) :: V
    type(c_ptr), intent(in) :: O
    type(c_ptr), intent(in), optional :: LSE
    integer(c_int64_t), intent(in) :: batch
    integer(c_int64_t), intent(in) :: seq_local
    integer(c_int64_t), intent(in) :: heads_q
    integer(c_int64_t), intent(in) :: heads_kv
    integer(c_int64_t), intent(in) :: head_dim
    logical, intent(in) :: causal
    real(c_double), intent(in) :: scale
    integer, intent(in) :: dtype
    type(MKX_Comm), intent(in) :: comm
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    call mkx_f08_clear_error()
    rc = c_ring_attention_p(Q, K, V, O, opt_ptr(LSE), batch, &
        seq_local, heads_q, heads_kv, head_dim, &
        merge(1_c_int, 0_c_int, causal), scale, int(dtype, c_int), &
        comm%ptr, opt_ptr(stream))
    call set_ierror(rc, ierror)
  end subroutine mkx_ring_attention_ptr

  subroutine mkx_moe_dispatch_gemm_ptr(X, num_tokens, hidden, topk_ids, &
      topk_weight, topk, num_experts, W, n, Y, y_rows, expert_rows, origin, &
      dtype, comm, stream, ierror)
    type(c_ptr), intent(in) :: X
    integer(c_int64_t), intent(in) :: num_tokens
    integer(c_int64_t), intent(in) :: hidden
    type(c_ptr), intent(in) :: topk_ids
    type(c_ptr), intent(in), optional :: topk_weight
    integer(c_int64_t), intent(in) :: topk
    integer(c_int64_t), intent(in) :: num_experts
    type(c_ptr), intent(in) :: W
    integer(c_int64_t), intent(in) :: n
    type(c_ptr), intent(in) :: Y
    integer(c_int64_t), intent(in) :: y_rows
    type(c_ptr), intent(in) :: expert_rows
    type(c_ptr), intent(in), optional :: origin
    integer, intent(in) :: dtype
    type(MKX_Comm), intent(in) :: comm
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    call mkx_f08_clear_error()
    rc = c_moe_dispatch_gemm_p(X, num_tokens, hidden, topk_ids, &
        opt_ptr(topk_weight), topk, num_experts, W, n, Y, y_rows, &
        expert_rows, opt_ptr(origin), int(dtype, c_int), comm%ptr, &
        opt_ptr(stream))
    call set_ierror(rc, ierror)
  end subroutine mkx_moe_dispatch_gemm_ptr

  subroutine mkx_moe_layer_ptr(X, num_tokens, hidden, topk_ids, &
      topk_weight, topk, num_experts, W1, W2, ffn, out, dtype, comm, &
      stream, ierror)
    type(c_ptr), intent(in) :: X
    integer(c_int64_t), intent(in) :: num_tokens
    integer(c_int64_t), intent(in) :: hidden
    type(c_ptr), intent(in) :: topk_ids
    type(c_ptr), intent(in) :: topk_weight
    integer(c_int64_t), intent(in) :: topk
    integer(c_int64_t), intent(in) :: num_experts
    type(c_ptr), intent(in) :: W1
    type(c_ptr), intent(in) :: W2
    integer(c_int64_t), intent(in) :: ffn
    type(c_ptr), intent(in) :: out
    integer, intent(in) :: dtype
    type(MKX_Comm), intent(in) :: comm
    type(c_ptr), intent(in), optional :: stream
    integer, intent(out), optional :: ierror
    integer(c_int) :: rc
    call mkx_f08_clear_error()
    rc = c_moe_layer_p(X, num_tokens, hidden, topk_ids, &
        topk_weight, topk, num_experts, W1, W2, ffn, out, &
        int(dtype, c_int), comm%ptr, opt_ptr(stream))
    call set_ierror(rc, ierror)
  end subroutine mkx_moe_layer_ptr

! The array variants, one set per rank of the first buffer.
#define ARRAY_RANK dimension(:)
#define NAME_ALLGATHER_GEMM mkx_allgather_gemm_r1
#define NAME_ALLGATHER_GEMM_INIT mkx_allgather_gemm_init_r1
#define NAME_GEMM_REDUCE_SCATTER mkx_gemm_reduce_scatter_r1
#define NAME_GEMM_REDUCE_SCATTER_INIT mkx_gemm_reduce_scatter_init_r1
#define NAME_GEMM_ALLREDUCE mkx_gemm_allreduce_r1
#define NAME_GEMM_ALLREDUCE_INIT mkx_gemm_allreduce_init_r1
#define NAME_MOE_DISPATCH_GEMM mkx_moe_dispatch_gemm_r1
#define NAME_MOE_LAYER mkx_moe_layer_r1
#include "mkx_f08_arrays.inc"
#undef ARRAY_RANK
#undef NAME_ALLGATHER_GEMM
#undef NAME_ALLGATHER_GEMM_INIT
#undef NAME_GEMM_REDUCE_SCATTER
#undef NAME_GEMM_REDUCE_SCATTER_INIT
#undef NAME_GEMM_ALLREDUCE
#undef NAME_GEMM_ALLREDUCE_INIT
#undef NAME_MOE_DISPATCH_GEMM
#undef NAME_MOE_LAYER
#define ARRAY_RANK dimension(:,:)
#define NAME_ALLGATHER_GEMM mkx_allgather_gemm_r2
#define NAME_ALLGATHER_GEMM_INIT mkx_allgather_gemm_init_r2
#define NAME_GEMM_REDUCE_SCATTER mkx_gemm_reduce_scatter_r2
#define NAME_GEMM_REDUCE_SCATTER_INIT mkx_gemm_reduce_scatter_init_r2
#define NAME_GEMM_ALLREDUCE mkx_gemm_allreduce_r2
#define NAME_GEMM_ALLREDUCE_INIT mkx_gemm_allreduce_init_r2
#define NAME_MOE_DISPATCH_GEMM mkx_moe_dispatch_gemm_r2
#define NAME_MOE_LAYER mkx_moe_layer_r2
#include "mkx_f08_arrays.inc"
#undef ARRAY_RANK
#undef NAME_ALLGATHER_GEMM
#undef NAME_ALLGATHER_GEMM_INIT
#undef NAME_GEMM_REDUCE_SCATTER
#undef NAME_GEMM_REDUCE_SCATTER_INIT
#undef NAME_GEMM_ALLREDUCE
#undef NAME_GEMM_ALLREDUCE_INIT
#undef NAME_MOE_DISPATCH_GEMM
#undef NAME_MOE_LAYER
#define ARRAY_RANK dimension(:)
#define NAME_RING_ATTENTION mkx_ring_attention_r1
#include "mkx_f08_attention.inc"
#undef ARRAY_RANK
#undef NAME_RING_ATTENTION
#define ARRAY_RANK dimension(:,:)
#define NAME_RING_ATTENTION mkx_ring_attention_r2
#include "mkx_f08_attention.inc"
#undef ARRAY_RANK
#undef NAME_RING_ATTENTION
#define ARRAY_RANK dimension(:,:,:)
#define NAME_RING_ATTENTION mkx_ring_attention_r3
#include "mkx_f08_attention.inc"
#undef ARRAY_RANK
#undef NAME_RING_ATTENTION
#define ARRAY_RANK dimension(:,:,:,:)
#define NAME_RING_ATTENTION mkx_ring_attention_r4
#include "mkx_f08_attention.inc"
#undef ARRAY_RANK
#undef NAME_RING_ATTENTION

end module mkx_f08
