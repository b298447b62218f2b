! tp_solver: a tensor-parallel Jacobi solver for A x = b in Fortran, with
! the MKX module mkx_f08.
!
! The N x N matrix A (diagonally dominant) is split by columns over the
! ranks and x by the same blocks (MKX_Block_range): rank r holds
! A_r = A(:, first+1:first+count) and x_r = x(first+1:first+count).
! Each Jacobi step needs y = A x = sum_r A_r x_r, then updates
!     x_r <- x_r + (b_r - y_r) / diag(A)_r .
!  - fp64: MKX_Gemm_reduce_scatter gives each rank exactly its rows y_r
!    (row block r of the sum), through a persistent plan
!    (MKX_Gemm_reduce_scatter_init once, MKX_Start every step);
!  - fp32: MKX_Gemm_allreduce gives every rank the whole y.
! Ordinary column-major Fortran arrays (the host path; with device
! pointers the same calls take type(c_ptr) buffers).  The result is checked
! against the same iteration done serially in fp64 on the whole matrix.
!
!   mpirun -np 4 examples/fortran/tp_solver [N [steps]]
!
! Prints OK or FAILED on rank 0; exit status non-zero on failure.
program tp_solver
  use, intrinsic :: iso_c_binding, only: c_int64_t
  use, intrinsic :: iso_fortran_env, only: real64, real32, int64
  use mpi_f08
  use mkx_f08
  implicit none

  integer(int64) :: n, first, count
  integer :: steps, rank, nranks, ierr, it, j, bad, allbad
  type(MKX_Comm) :: comm
  type(MKX_Request) :: plan
  real(real64), allocatable, target :: A64(:,:), x64(:), y64(:)
  real(real32), allocatable :: A32(:,:), x32(:), y32(:)
  real(real64), allocatable :: Afull(:,:), b(:), xref(:), d(:)
  real(real64) :: err64, err32, res
  character(len=32) :: arg

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks)
  n = 96
  steps = 25
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read (arg, *) n
  end if
  if (command_argument_count() >= 2) then
    call get_command_argument(2, arg)
    read (arg, *) steps
  end if

  call MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL, comm, ierr)
  call require(ierr, "MKX_Comm_create")

  ! The whole problem, the same on every rank (for the serial check).
  call make_problem(n, Afull, b)
  allocate(d(n))
  do j = 1, int(n)
    d(j) = Afull(j, j)
  end do

  ! This rank's block of columns of A and of x.
  call MKX_Block_range(n, nranks, rank, first, count, ierr)
  call require(ierr, "MKX_Block_range")
  allocate(A64(n, max(count, 1_int64)), x64(max(count, 1_int64)), &
      y64(max(count, 1_int64)))
  A64(:, 1:count) = Afull(:, first + 1:first + count)
  x64 = 0

  ! fp64: one persistent plan, started every step.  y64 receives rows
  ! first+1 .. first+count of A x: exactly the rows this rank updates.
  call MKX_Gemm_reduce_scatter_init(A64, n, count, n, x64, 1_int64, &
      max(count, 1_int64), MKX_NO_TRANS, y64, max(count, 1_int64), &
      MKX_FP64, MKX_FP64, MKX_COL_MAJOR, comm, MPI_INFO_NULL, plan, ierr)
  call require(ierr, "MKX_Gemm_reduce_scatter_init")
  do it = 1, steps
    call MKX_Start(plan, ierror=ierr)
    call require(ierr, "MKX_Start")
    x64(1:count) = x64(1:count) + (b(first + 1:first + count) - &
        y64(1:count)) / d(first + 1:first + count)
  end do
  call MKX_Request_free(plan, ierr)
  call require(ierr, "MKX_Request_free")

  ! fp32: y = A x whole on every rank with MKX_Gemm_allreduce.
  allocate(A32(n, max(count, 1_int64)), x32(max(count, 1_int64)), y32(n))
  A32 = real(A64, real32)
  x32 = 0
  do it = 1, steps
    call MKX_Gemm_allreduce(A32, n, count, n, x32, 1_int64, &
        max(count, 1_int64), MKX_NO_TRANS, y32, n, MKX_FP32, MKX_FP32, &
        MKX_COL_MAJOR, comm, ierror=ierr)
    call require(ierr, "MKX_Gemm_allreduce")
    x32(1:count) = x32(1:count) + real((b(first + 1:first + count) - &
        y32(first + 1:first + count)) / d(first + 1:first + count), real32)
  end do

  ! Serial reference: the same steps in fp64 on the whole matrix.
  allocate(xref(n))
  xref = 0
  do it = 1, steps
    xref = xref + (b - matmul(Afull, xref)) / d
  end do
  res = norm2(b - matmul(Afull, xref)) / norm2(b)

  err64 = maxval(abs(x64(1:count) - xref(first + 1:first + count))) / &
      maxval(abs(xref))
  err32 = maxval(abs(real(x32(1:count), real64) - &
      xref(first + 1:first + count))) / maxval(abs(xref))
  if (count == 0) then
    err64 = 0
    err32 = 0
  end if
  bad = 0
  if (.not. (err64 < 1e-12_real64)) bad = 1
  if (.not. (err32 < 1e-4_real64)) bad = 1
  if (.not. (res < 1e-6_real64)) bad = 1
  call MPI_Allreduce(MPI_IN_PLACE, err64, 1, MPI_DOUBLE_PRECISION, MPI_MAX, &
      MPI_COMM_WORLD)
  call MPI_Allreduce(MPI_IN_PLACE, err32, 1, MPI_DOUBLE_PRECISION, MPI_MAX, &
      MPI_COMM_WORLD)
  call MPI_Allreduce(bad, allbad, 1, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD)

  call MKX_Comm_free(comm, ierr)
  call require(ierr, "MKX_Comm_free")
  ! The main program's arrays are never freed by the compiler at its end.
  deallocate(A64, x64, y64, A32, x32, y32, Afull, b, xref, d)
  if (rank == 0) then
    print '(a,i0,a,i0,a,i0,a)', "tp_solver: N = ", n, ", ", steps, &
        " Jacobi steps on ", nranks, " ranks"
    print '(a,es9.2)', "  residual |b - A x| / |b| after the steps: ", res
    print '(a,es9.2,a)', "  fp64 (MKX_Gemm_reduce_scatter, persistent): ", &
        err64, " relative error vs serial"
    print '(a,es9.2,a)', "  fp32 (MKX_Gemm_allreduce):                   ", &
        err32, " relative error vs serial"
    if (allbad == 0) then
      print '(a)', "OK"
    else
      print '(a)', "FAILED"
    end if
  end if
  call MPI_Finalize()
  if (allbad /= 0) error stop 1

contains

  ! Stop (all ranks) on an MKX error, with its message.
  subroutine require(code, what)
    integer, intent(in) :: code
    character(len=*), intent(in) :: what
    character(len=:), allocatable :: msg, text
    if (code == MKX_SUCCESS) return
    call MKX_Error_string(code, text)
    call MKX_Get_last_error(msg)
    print '(a,i0,6a)', "rank ", rank, ": ", what, ": ", text, ": ", msg
    print '(a)', "FAILED"
    call MPI_Abort(MPI_COMM_WORLD, 1)
    error stop 1
  end subroutine require

  ! A diagonally dominant N x N matrix and a right-hand side.
  subroutine make_problem(n, A, b)
    integer(int64), intent(in) :: n
    real(real64), allocatable, intent(out) :: A(:,:), b(:)
    integer :: i, j
    allocate(A(n, n), b(n))
    do j = 1, int(n)
      do i = 1, int(n)
        A(i, j) = sin(0.7_real64 * i + 1.3_real64 * j) / real(n, real64)
      end do
      A(j, j) = 2 + cos(real(j, real64))
      b(j) = 1 + 0.5_real64 * sin(0.1_real64 * j)
    end do
  end subroutine make_problem

end program tp_solver
