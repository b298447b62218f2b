! test_f08_api: every binding of module mkx_f08 called at least once, on
! any number of ranks (host path, ordinary column-major Fortran arrays and
! type(c_ptr) buffers): constants against the C values of mkx.h, results
! against serial references, ierror for bad arguments (present and absent),
! and MKX_Get_last_error after an error.  Exit status non-zero on failure.
program test_f08_api
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: int64, real64, real32, int32, &
      int8, error_unit
  use mpi_f08
  use mkx_f08
  implicit none

  interface
    ! Exported by the module's C shim for this test: the C value of a
    ! constant of mkx.h by name; returns 0 for an unknown name.
    function c_constant(name, value) bind(C, name="mkx_f08_c_constant") &
        result(found)
      import :: c_char, c_int
      character(kind=c_char), dimension(*), intent(in) :: name
      integer(c_int), intent(out) :: value
      integer(c_int) :: found
    end function c_constant

    ! To reach cudaMemcpy (if libmkx loaded the CUDA runtime) without
    ! linking it: glibc's dlsym with RTLD_DEFAULT (NULL).
    function dlsym(handle, name) bind(C, name="dlsym") result(f)
      import :: c_ptr, c_funptr, c_char
      type(c_ptr), value :: handle
      character(kind=c_char), dimension(*), intent(in) :: name
      type(c_funptr) :: f
    end function dlsym
  end interface

  abstract interface
    function cuda_memcpy_fn(dst, src, count, kind) bind(C) result(rc)
      import :: c_ptr, c_size_t, c_int
      type(c_ptr), value :: dst, src
      integer(c_size_t), value :: count
      integer(c_int), value :: kind
      integer(c_int) :: rc
    end function cuda_memcpy_fn
  end interface

  type(MKX_Comm) :: comm
  integer :: rank, nranks, nfail, ierr, total_fail

  nfail = 0
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks)

  call test_constants()
  call test_version_errors_types()
  call MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL, comm, ierr)
  call check(ierr == MKX_SUCCESS, "MKX_Comm_create")
  call check(comm /= MKX_COMM_NULL, "MKX_Comm_create gives a handle")
  call test_comm_queries()
  call test_memory()
  call test_tiles()
  call test_allgather_gemm()
  call test_gemm_reduce_scatter()
  call test_gemm_allreduce()
  call test_allgather_gemm_scaled()
  call test_gemm_reduce_scatter_scaled()
  call test_gemm_allreduce_scaled()
  call test_device_pointers()
  call test_ring_attention()
  call test_moe_dispatch_gemm()
  call test_moe_dispatch_gemm_scaled()
  call test_moe_layer()
  call test_moe_layer_scaled()
  call test_persistent()
  call test_errors()
  call test_info_print()
  call MKX_Comm_free(comm, ierr)
  call check(ierr == MKX_SUCCESS .and. comm == MKX_COMM_NULL, "MKX_Comm_free")

  call MPI_Allreduce(nfail, total_fail, 1, MPI_INTEGER, MPI_SUM, &
      MPI_COMM_WORLD)
  if (rank == 0) then
    if (total_fail == 0) then
      print '(a,i0,a)', "test_f08_api on ", nranks, " ranks: OK"
    else
      print '(a,i0,a,i0,a)', "test_f08_api on ", nranks, " ranks: FAILED (", &
          total_fail, " checks)"
    end if
  end if
  call MPI_Finalize()
  if (total_fail /= 0) error stop 1

contains

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    character(len=:), allocatable :: msg
    if (ok) return
    nfail = nfail + 1
    call MKX_Get_last_error(msg)
    if (len(msg) > 0) then
      write (error_unit, '(a,i0,5a)') "rank ", rank, ": FAILED: ", what, &
          " (last error: ", msg, ")"
    else
      write (error_unit, '(a,i0,2a)') "rank ", rank, ": FAILED: ", what
    end if
  end subroutine check

  ! Relative max-norm error of x against the reference r.
  real(real64) function rel_err(x, r)
    real(real64), intent(in) :: x(:), r(:)
    rel_err = maxval(abs(x - r)) / max(maxval(abs(r)), 1.0e-30_real64)
  end function rel_err

  ! Deterministic values, the same on every rank.
  real(real64) function val(i, j, s)
    integer, intent(in) :: i, j, s
    val = sin(0.37_real64 * i + 0.91_real64 * j + 0.13_real64 * s) + &
        0.1_real64 * modulo(i * 7 + j * 3 + s, 5)
  end function val

  ! ---- constants -------------------------------------------------------------
  subroutine test_constants()
    type(MKX_Scales) :: scales
    call cmp("MKX_VERSION_MAJOR", MKX_VERSION_MAJOR)
    call cmp("MKX_VERSION_MINOR", MKX_VERSION_MINOR)
    call cmp("MKX_VERSION_PATCH", MKX_VERSION_PATCH)
    call cmp("MKX_VERSION", MKX_VERSION)
    call cmp("MKX_SUCCESS", MKX_SUCCESS)
    call cmp("MKX_ERR_INVALID_ARG", MKX_ERR_INVALID_ARG)
    call cmp("MKX_ERR_NULL_POINTER", MKX_ERR_NULL_POINTER)
    call cmp("MKX_ERR_BAD_SIZE", MKX_ERR_BAD_SIZE)
    call cmp("MKX_ERR_BAD_LD", MKX_ERR_BAD_LD)
    call cmp("MKX_ERR_UNSUPPORTED", MKX_ERR_UNSUPPORTED)
    call cmp("MKX_ERR_SHAPE_MISMATCH", MKX_ERR_SHAPE_MISMATCH)
    call cmp("MKX_ERR_TRUNCATE", MKX_ERR_TRUNCATE)
    call cmp("MKX_ERR_CUDA", MKX_ERR_CUDA)
    call cmp("MKX_ERR_MPI", MKX_ERR_MPI)
    call cmp("MKX_ERR_NET", MKX_ERR_NET)
    call cmp("MKX_ERR_TIMEOUT", MKX_ERR_TIMEOUT)
    call cmp("MKX_ERR_NOMEM", MKX_ERR_NOMEM)
    call cmp("MKX_ERR_PEER", MKX_ERR_PEER)
    call cmp("MKX_ERR_INVALID_COMM", MKX_ERR_INVALID_COMM)
    call cmp("MKX_ERR_INVALID_REQUEST", MKX_ERR_INVALID_REQUEST)
    call cmp("MKX_ERR_INTERNAL", MKX_ERR_INTERNAL)
    call cmp("MKX_ERR_LASTCODE", MKX_ERR_LASTCODE)
    call cmp("MKX_BF16", MKX_BF16)
    call cmp("MKX_FP16", MKX_FP16)
    call cmp("MKX_FP32", MKX_FP32)
    call cmp("MKX_FP64", MKX_FP64)
    call cmp("MKX_FP8_E4M3", MKX_FP8_E4M3)
    call cmp("MKX_FP8_E5M2", MKX_FP8_E5M2)
    call cmp("MKX_ROW_MAJOR", MKX_ROW_MAJOR)
    call cmp("MKX_COL_MAJOR", MKX_COL_MAJOR)
    call cmp("MKX_NO_TRANS", MKX_NO_TRANS)
    call cmp("MKX_TRANS", MKX_TRANS)
    call cmp("MKX_SCALE_NONE", MKX_SCALE_NONE)
    call cmp("MKX_SCALE_TENSOR", MKX_SCALE_TENSOR)
    call cmp("MKX_SCALE_ROW", MKX_SCALE_ROW)
    call cmp("MKX_SCALE_BLOCK", MKX_SCALE_BLOCK)
    call cmp("MKX_SCALE_BLOCK_SIZE", MKX_SCALE_BLOCK_SIZE)
    call cmp("sizeof(MKX_Scales)", int(c_sizeof(scales)))
    call check(scales%layout == MKX_SCALE_NONE .and. &
        .not. c_associated(scales%a) .and. .not. c_associated(scales%b) .and. &
        .not. c_associated(scales%a_out), "type(MKX_Scales): default")
  end subroutine test_constants

  subroutine cmp(name, fvalue)
    character(len=*), intent(in) :: name
    integer, intent(in) :: fvalue
    integer(c_int) :: cvalue
    cvalue = -12345
    call check(c_constant(name // c_null_char, cvalue) == 1, &
        "C value of " // name // " exported")
    call check(int(cvalue) == fvalue, name // ": Fortran value /= C value")
  end subroutine cmp

  ! ---- version, error strings, type sizes --------------------------------------
  subroutine test_version_errors_types()
    integer :: major, minor, patch, e
    integer(c_int64_t) :: sz
    character(len=:), allocatable :: s
    call MKX_Get_version(major, minor, patch, ierr)
    call check(ierr == MKX_SUCCESS .and. major == MKX_VERSION_MAJOR .and. &
        minor == MKX_VERSION_MINOR .and. patch == MKX_VERSION_PATCH, &
        "MKX_Get_version")
    call MKX_Get_version(major, minor, patch)
    do e = MKX_SUCCESS, MKX_ERR_LASTCODE
      call MKX_Error_string(e, s, ierr)
      call check(ierr == MKX_SUCCESS .and. len(s) > 0, "MKX_Error_string")
    end do
    call MKX_Error_string(MKX_ERR_BAD_SIZE, s)
    call check(s == "invalid size", "MKX_Error_string(MKX_ERR_BAD_SIZE)")
    call MKX_Error_string(9999, s)
    call check(len(s) > 0, "MKX_Error_string(unknown code)")
    call MKX_Type_size(MKX_BF16, sz, ierr)
    call check(sz == 2 .and. ierr == MKX_SUCCESS, "MKX_Type_size(MKX_BF16)")
    call MKX_Type_size(MKX_FP16, sz)
    call check(sz == 2, "MKX_Type_size(MKX_FP16)")
    call MKX_Type_size(MKX_FP32, sz)
    call check(sz == 4, "MKX_Type_size(MKX_FP32)")
    call MKX_Type_size(MKX_FP64, sz)
    call check(sz == 8, "MKX_Type_size(MKX_FP64)")
    call MKX_Type_size(MKX_FP8_E4M3, sz)
    call check(sz == 1, "MKX_Type_size(MKX_FP8_E4M3)")
    call MKX_Type_size(MKX_FP8_E5M2, sz)
    call check(sz == 1, "MKX_Type_size(MKX_FP8_E5M2)")
    call MKX_Type_size(77, sz, ierr)
    call check(sz == 0 .and. ierr == MKX_ERR_INVALID_ARG, &
        "MKX_Type_size(invalid)")
    call MKX_Get_last_error(s)
    call check(index(s, "77") > 0, "MKX_Get_last_error after MKX_Type_size")
  end subroutine test_version_errors_types

  ! ---- communicator queries, block ranges ----------------------------------------
  subroutine test_comm_queries()
    integer :: r, p, node, nnodes, lrank, lsize, dev, b
    integer(c_int64_t) :: first, count, next
    call MKX_Comm_rank(comm, r, ierr)
    call check(ierr == MKX_SUCCESS .and. r == rank, "MKX_Comm_rank")
    call MKX_Comm_size(comm, p, ierr)
    call check(ierr == MKX_SUCCESS .and. p == nranks, "MKX_Comm_size")
    call MKX_Comm_node(comm, node, ierr)
    call MKX_Comm_num_nodes(comm, nnodes)
    call check(ierr == MKX_SUCCESS .and. node >= 0 .and. node < nnodes, &
        "MKX_Comm_node, MKX_Comm_num_nodes")
    call MKX_Comm_local_rank(comm, lrank, ierr)
    call MKX_Comm_local_size(comm, lsize)
    call check(ierr == MKX_SUCCESS .and. lrank >= 0 .and. lrank < lsize .and. &
        lsize <= nranks, "MKX_Comm_local_rank, MKX_Comm_local_size")
    call MKX_Comm_device(comm, dev, ierr)
    call check(ierr == MKX_SUCCESS .and. dev >= -1, "MKX_Comm_device")
    call MKX_Comm_get_async_error(comm, b, ierr)
    call check(ierr == MKX_SUCCESS .and. b == MKX_SUCCESS, &
        "MKX_Comm_get_async_error: nothing failed")
    next = 0
    do b = 0, 2
      call MKX_Block_range(10_c_int64_t, 3, b, first, count, ierr)
      call check(ierr == MKX_SUCCESS .and. first == next .and. &
          count == merge(4, 3, b == 0), "MKX_Block_range")
      next = first + count
    end do
    call MKX_Block_range(10_c_int64_t, 0, 0, first, count, ierr)
    call check(ierr /= MKX_SUCCESS, "MKX_Block_range(nblocks = 0) fails")
  end subroutine test_comm_queries

  ! ---- memory ------------------------------------------------------------------------
  subroutine test_memory()
    type(c_ptr) :: p
    integer :: dev
    real(real64), pointer :: x(:)
    call MKX_Alloc_mem(comm, 800_c_int64_t, p, ierr)
    call check(ierr == MKX_SUCCESS .and. c_associated(p), "MKX_Alloc_mem")
    if (ierr /= MKX_SUCCESS) return
    call check(modulo(transfer(p, 0_c_intptr_t), 256_c_intptr_t) == 0, &
        "MKX_Alloc_mem: 256-byte aligned")
    call MKX_Comm_device(comm, dev)
    if (dev < 0) then               ! host memory on the host path
      call c_f_pointer(p, x, [100])
      x = 1.5_real64
      call check(sum(x) == 150.0_real64, "MKX_Alloc_mem memory usable")
    end if
    call MKX_Free_mem(comm, p, ierr)
    call check(ierr == MKX_SUCCESS, "MKX_Free_mem")
    call MKX_Alloc_mem(comm, -1_c_int64_t, p, ierr)
    call check(ierr == MKX_ERR_BAD_SIZE .and. .not. c_associated(p), &
        "MKX_Alloc_mem(size = -1) gives MKX_ERR_BAD_SIZE")
  end subroutine test_memory

  ! ---- data tiles: arguments, and the host path's refusal ------------------------
  subroutine test_tiles()
    type(MKX_Tiles) :: t
    integer :: dev, e
    call MKX_Comm_device(comm, dev)
    call MKX_Tiles_create(c_null_ptr, 100_c_int64_t, 60_c_int64_t, &
        0_c_int64_t, 0_c_int64_t, 16_c_int64_t, MKX_BF16, MKX_ROW_MAJOR, &
        comm, t, ierr)
    call check(ierr == MKX_ERR_BAD_SIZE .and. t == MKX_TILES_NULL, &
        "MKX_Tiles_create(tile_rows = 0) gives MKX_ERR_BAD_SIZE")
    call MKX_Tiles_create(c_null_ptr, 100_c_int64_t, 60_c_int64_t, &
        0_c_int64_t, 32_c_int64_t, 16_c_int64_t, MKX_BF16, MKX_ROW_MAJOR, &
        comm, t, ierr)
    if (dev < 0) then
      call check(ierr == MKX_ERR_UNSUPPORTED .and. t == MKX_TILES_NULL, &
          "MKX_Tiles_create on the host path gives MKX_ERR_UNSUPPORTED")
    else
      call check(ierr == MKX_SUCCESS .and. t /= MKX_TILES_NULL, &
          "MKX_Tiles_create on the GPU")
      call MKX_Tiles_get_async_error(t, e, ierr)
      call check(ierr == MKX_SUCCESS .and. e == MKX_SUCCESS, &
          "MKX_Tiles_get_async_error of a new set")
      call MKX_Tiles_wait(t, nranks, 0_c_int64_t, 1_c_int64_t, 0_c_int64_t, &
          1_c_int64_t, ierror=ierr)
      call check(ierr == MKX_ERR_INVALID_ARG, "MKX_Tiles_wait(rank = size)")
      call MKX_Tiles_free(t, ierr)
      call check(ierr == MKX_SUCCESS .and. t == MKX_TILES_NULL, &
          "MKX_Tiles_free")
    end if
    call MKX_Tiles_free(t, ierr)
    call check(ierr == MKX_ERR_INVALID_ARG, &
        "MKX_Tiles_free(MKX_TILES_NULL) gives MKX_ERR_INVALID_ARG")
    call MKX_Tiles_begin(MKX_TILES_NULL, ierror=ierr)
    call check(ierr == MKX_ERR_INVALID_ARG, "MKX_Tiles_begin(MKX_TILES_NULL)")
  end subroutine test_tiles

  ! ---- AllGather + GEMM (fp64 arrays; transposed B; A_out) ------------------------------
  subroutine test_allgather_gemm()
    integer, parameter :: k = 5, n = 3
    integer :: ml, mtot, off, i, j, q
    real(real64), allocatable :: A(:,:), Bt(:,:), C(:,:), Aout(:,:), &
        Afull(:,:), Cref(:,:)
    ml = rank + 1                     ! m_local differs per rank
    mtot = nranks * (nranks + 1) / 2
    off = rank * (rank + 1) / 2
    allocate(A(ml + 1, k), Bt(n, k), C(mtot + 2, n), Aout(mtot, k), &
        Afull(mtot, k), Cref(mtot, n))
    do q = 0, nranks - 1
      do i = 1, q + 1
        do j = 1, k
          Afull(q * (q + 1) / 2 + i, j) = val(q * (q + 1) / 2 + i, j, 1)
        end do
      end do
    end do
    A = -7
    A(1:ml, :) = Afull(off + 1:off + ml, :)
    do i = 1, n
      do j = 1, k
        Bt(i, j) = val(i, j, 10 + rank)     ! B is per rank
      end do
    end do
    Cref = matmul(Afull, transpose(Bt))
    C = -1
    ! lda > m_local, ldc > M: leading dimensions are the allocated extents
    call MKX_Allgather_gemm(A, int(ml, c_int64_t), int(k, c_int64_t), &
        int(size(A, 1), c_int64_t), Bt, int(n, c_int64_t), &
        int(n, c_int64_t), MKX_TRANS, C, int(size(C, 1), c_int64_t), &
        Aout, int(mtot, c_int64_t), MKX_FP64, MKX_FP64, MKX_COL_MAJOR, &
        comm, ierror=ierr)
    call check(ierr == MKX_SUCCESS, "MKX_Allgather_gemm (arrays)")
    call check(rel_err(reshape(C(1:mtot, :), [mtot * n]), &
        reshape(Cref, [mtot * n])) < 1e-12_real64, "MKX_Allgather_gemm: C")
    call check(all(C(mtot + 1:, :) == -1), &
        "MKX_Allgather_gemm: rows beyond M untouched")
    call check(all(Aout == Afull), "MKX_Allgather_gemm: A_out")
    ! without A_out (keywords after the optional arguments), stream given
    C = 0
    call MKX_Allgather_gemm(A, int(ml, c_int64_t), int(k, c_int64_t), &
        int(size(A, 1), c_int64_t), Bt, int(n, c_int64_t), &
        int(n, c_int64_t), MKX_TRANS, C, int(size(C, 1), c_int64_t), &
        dtype=MKX_FP64, ctype=MKX_FP64, order=MKX_COL_MAJOR, comm=comm, &
        stream=c_null_ptr, ierror=ierr)
    call check(ierr == MKX_SUCCESS .and. rel_err(reshape(C(1:mtot, :), &
        [mtot * n]), reshape(Cref, [mtot * n])) < 1e-12_real64, &
        "MKX_Allgather_gemm without A_out")
  end subroutine test_allgather_gemm

  ! ---- GEMM + ReduceScatter (fp32 arrays, rank-1 A) ---------------------------------------
  subroutine test_gemm_reduce_scatter()
    integer, parameter :: m = 7, n = 4
    integer :: kl, ktot, i, j, l, q
    integer(c_int64_t) :: first, count
    real(real32), allocatable :: A(:), B(:,:), C(:,:)
    real(real64), allocatable :: Aq(:,:), Bq(:,:), Cref(:,:)
    kl = 2 + modulo(rank, 2)
    allocate(Cref(m, n))
    Cref = 0
    ktot = 0
    do q = 0, nranks - 1      ! the reference sums every rank's product
      l = 2 + modulo(q, 2)
      allocate(Aq(m, l), Bq(l, n))
      do j = 1, l
        do i = 1, m
          Aq(i, j) = val(i, ktot + j, 2)
        end do
        do i = 1, n
          Bq(j, i) = val(ktot + j, i, 3)
        end do
      end do
      if (q == rank) then
        A = real(reshape(Aq, [m * l]), real32)   ! rank 1: m x k_local
        B = real(Bq, real32)
      end if
      Cref = Cref + matmul(Aq, Bq)
      ktot = ktot + l
      deallocate(Aq, Bq)
    end do
    call MKX_Block_range(int(m, c_int64_t), nranks, rank, first, count)
    allocate(C(max(count, 1_c_int64_t), n))
    call MKX_Gemm_reduce_scatter(A, int(m, c_int64_t), int(kl, c_int64_t), &
        int(m, c_int64_t), B, int(n, c_int64_t), int(kl, c_int64_t), &
        MKX_NO_TRANS, C, int(size(C, 1), c_int64_t), MKX_FP32, MKX_FP32, &
        MKX_COL_MAJOR, comm, ierror=ierr)
    call check(ierr == MKX_SUCCESS, "MKX_Gemm_reduce_scatter (arrays)")
    if (count > 0) call check(rel_err(real(reshape(C(1:count, :), &
        [count * n]), real64), reshape(Cref(first + 1:first + count, :), &
        [count * n])) < 1e-5_real64, "MKX_Gemm_reduce_scatter: C")
  end subroutine test_gemm_reduce_scatter

  ! ---- GEMM + AllReduce (fp64 arrays, then type(c_ptr) buffers) ----------------------------
  subroutine test_gemm_allreduce()
    integer, parameter :: m = 6, n = 5, kl = 3
    integer :: i, j, q
    real(real64), target :: A(m, kl), B(kl, n), C(m, n), C2(m, n)
    real(real64) :: Cref(m, n), Aq(m, kl), Bq(kl, n)
    Cref = 0
    do q = 0, nranks - 1
      do j = 1, kl
        do i = 1, m
          Aq(i, j) = val(i, q * kl + j, 4)
        end do
        do i = 1, n
          Bq(j, i) = val(q * kl + j, i, 5)
        end do
      end do
      if (q == rank) then
        A = Aq
        B = Bq
      end if
      Cref = Cref + matmul(Aq, Bq)
    end do
    call MKX_Gemm_allreduce(A, int(m, c_int64_t), int(kl, c_int64_t), &
        int(m, c_int64_t), B, int(n, c_int64_t), int(kl, c_int64_t), &
        MKX_NO_TRANS, C, int(m, c_int64_t), MKX_FP64, MKX_FP64, &
        MKX_COL_MAJOR, comm, ierror=ierr)
    call check(ierr == MKX_SUCCESS .and. rel_err(reshape(C, [m * n]), &
        reshape(Cref, [m * n])) < 1e-12_real64, "MKX_Gemm_allreduce (arrays)")
    ! type(c_ptr) specific: host memory through c_loc takes the host path
    call MKX_Gemm_allreduce(c_loc(A), int(m, c_int64_t), &
        int(kl, c_int64_t), int(m, c_int64_t), c_loc(B), int(n, c_int64_t), &
        int(kl, c_int64_t), MKX_NO_TRANS, c_loc(C2), int(m, c_int64_t), &
        MKX_FP64, MKX_FP64, MKX_COL_MAJOR, comm, c_null_ptr, ierr)
    call check(ierr == MKX_SUCCESS .and. all(C2 == C), &
        "MKX_Gemm_allreduce (type(c_ptr)), same bits")
  end subroutine test_gemm_allreduce

  ! ---- fp8 operands with scales (the _scaled calls and their _init) --------
  ! A and B hold bit patterns of small values that fp8 holds exactly, the
  ! scales are powers of two: every product and sum is exact in fp32.

  ! The bits of an exactly representable value (i picks one of eight):
  ! E4M3 (e5m2 false) or E5M2.
  integer(int8) function fp8(i, e5m2)
    integer, intent(in) :: i
    logical, intent(in) :: e5m2
    ! 0.5, 1, 1.5, 2, 3, -1, -2, 0.75
    integer, parameter :: e4(0:7) = [48, 56, 60, 64, 68, 184, 192, 52]
    integer, parameter :: e5(0:7) = [56, 60, 62, 64, 66, 188, 192, 58]
    integer :: b
    b = merge(e5(modulo(i, 8)), e4(modulo(i, 8)), e5m2)
    if (b > 127) b = b - 256
    fp8 = int(b, int8)
  end function fp8

  ! The value of fp8 bits (finite values only).
  real(real64) elemental function fp8_val(bits, e5m2)
    integer(int8), intent(in) :: bits
    logical, intent(in) :: e5m2
    integer :: u, e, m, mbits, bias
    mbits = merge(2, 3, e5m2)
    bias = merge(15, 7, e5m2)
    u = iand(int(bits), 255)
    e = iand(ishft(u, -mbits), ishft(1, 7 - mbits) - 1)
    m = iand(u, ishft(1, mbits) - 1)
    if (e == 0) then
      fp8_val = m * 2.0_real64**(1 - bias - mbits)
    else
      fp8_val = (1 + m * 2.0_real64**(-mbits)) * 2.0_real64**(e - bias)
    end if
    if (u >= 128) fp8_val = -fp8_val
  end function fp8_val

  ! AllGather + GEMM: E4M3 A with A_out and its scales (a_out), tensor
  ! scales that differ per rank; then its _init.
  subroutine test_allgather_gemm_scaled()
    integer, parameter :: k = 4, n = 3
    integer :: ml, mtot, off, i, j, q
    integer(int8), allocatable, target :: A(:,:), B(:,:), Aout(:,:)
    integer(int8), allocatable :: Afull(:,:)
    real(c_float), allocatable, target :: C(:,:), C2(:,:), aos(:)
    real(real64), allocatable :: Cref(:,:), rowscale(:)
    real(c_float), target :: sa(1), sb(1)
    type(MKX_Request) :: req
    ml = rank + 1
    mtot = nranks * (nranks + 1) / 2
    off = rank * (rank + 1) / 2
    allocate(A(ml, k), B(k, n), Aout(mtot, k), Afull(mtot, k), &
        C(mtot, n), C2(mtot, n), aos(mtot), Cref(mtot, n), rowscale(mtot))
    do q = 0, nranks - 1
      do i = q * (q + 1) / 2 + 1, q * (q + 1) / 2 + q + 1
        rowscale(i) = merge(2.0_real64, 4.0_real64, modulo(q, 2) == 0)
        do j = 1, k
          Afull(i, j) = fp8(i + 2 * j, .false.)
        end do
      end do
    end do
    A = Afull(off + 1:off + ml, :)
    do j = 1, n
      do i = 1, k
        B(i, j) = fp8(3 * i + j + rank, .false.)       ! B is per rank
      end do
    end do
    sa = real(rowscale(off + 1), c_float)
    sb = 0.5_c_float
    do j = 1, n
      do i = 1, mtot
        Cref(i, j) = rowscale(i) * 0.5_real64 * sum(fp8_val(Afull(i, :), &
            .false.) * fp8_val(B(:, j), .false.))
      end do
    end do
    C = -1
    aos = -1
    call MKX_Allgather_gemm_scaled(A, int(ml, c_int64_t), int(k, c_int64_t), &
        int(ml, c_int64_t), B, int(n, c_int64_t), int(k, c_int64_t), &
        MKX_NO_TRANS, C, int(mtot, c_int64_t), Aout, int(mtot, c_int64_t), &
        MKX_FP8_E4M3, MKX_FP32, MKX_COL_MAJOR, MKX_Scales(MKX_SCALE_TENSOR, &
        c_loc(sa), c_loc(sb), c_loc(aos)), comm, ierror=ierr)
    call check(ierr == MKX_SUCCESS, "MKX_Allgather_gemm_scaled (arrays)")
    call check(rel_err(real(reshape(C, [mtot * n]), real64), &
        reshape(Cref, [mtot * n])) < 1e-6_real64, &
        "MKX_Allgather_gemm_scaled: C")
    call check(all(Aout == Afull), "MKX_Allgather_gemm_scaled: A_out")
    call check(all(real(aos, real64) == rowscale), &
        "MKX_Allgather_gemm_scaled: a_out, the gathered rows' scales")
    ! persistent, without A_out: C as above
    C2 = -1
    call MKX_Allgather_gemm_scaled_init(A, int(ml, c_int64_t), &
        int(k, c_int64_t), int(ml, c_int64_t), B, int(n, c_int64_t), &
        int(k, c_int64_t), MKX_NO_TRANS, C2, int(mtot, c_int64_t), &
        dtype=MKX_FP8_E4M3, ctype=MKX_FP32, order=MKX_COL_MAJOR, &
        scales=MKX_Scales(MKX_SCALE_TENSOR, c_loc(sa), c_loc(sb), &
        c_null_ptr), comm=comm, info=MPI_INFO_NULL, request=req, ierror=ierr)
    call check(ierr == MKX_SUCCESS .and. req /= MKX_REQUEST_NULL, &
        "MKX_Allgather_gemm_scaled_init")
    call MKX_Start(req, ierror=ierr)
    call check(ierr == MKX_SUCCESS .and. all(C2 == C), &
        "MKX_Allgather_gemm_scaled_init: started, C")
    call MKX_Request_free(req, ierr)
    call check(ierr == MKX_SUCCESS, "MKX_Request_free (allgather scaled)")
  end subroutine test_allgather_gemm_scaled

  ! GEMM + ReduceScatter: E5M2, tensor scales 2 and 0.5 (b: 0.25 on odd
  ! ranks), transposed B; then its _init.
  subroutine test_gemm_reduce_scatter_scaled()
    integer, parameter :: m = 5, n = 4, kl = 3
    integer :: i, j, q
    integer(c_int64_t) :: first, count
    integer(int8), target :: A(m, kl), Bt(n, kl), Aq(m, kl), Bq(n, kl)
    real(c_float), allocatable, target :: C(:,:), C2(:,:)
    real(real64) :: Cref(m, n), sbq
    real(c_float), target :: sa(1), sb(1)
    type(MKX_Request) :: req
    Cref = 0
    do q = 0, nranks - 1
      do j = 1, kl
        do i = 1, m
          Aq(i, j) = fp8(i + j + 2 * q, .true.)
        end do
        do i = 1, n
          Bq(i, j) = fp8(5 * i + j + q, .true.)
        end do
      end do
      sbq = merge(0.5_real64, 0.25_real64, modulo(q, 2) == 0)
      if (q == rank) then
        A = Aq
        Bt = Bq
        sb = real(sbq, c_float)
      end if
      Cref = Cref + 2 * sbq * matmul(fp8_val(Aq, .true.), &
          transpose(fp8_val(Bq, .true.)))
    end do
    sa = 2.0_c_float
    call MKX_Block_range(int(m, c_int64_t), nranks, rank, first, count)
    allocate(C(max(count, 1_c_int64_t), n), C2(max(count, 1_c_int64_t), n))
    C = -1
    call MKX_Gemm_reduce_scatter_scaled(A, int(m, c_int64_t), &
        int(kl, c_int64_t), int(m, c_int64_t), Bt, int(n, c_int64_t), &
        int(n, c_int64_t), MKX_TRANS, C, int(size(C, 1), c_int64_t), &
        MKX_FP8_E5M2, MKX_FP32, MKX_COL_MAJOR, MKX_Scales(MKX_SCALE_TENSOR, &
        c_loc(sa), c_loc(sb), c_null_ptr), comm, ierror=ierr)
    call check(ierr == MKX_SUCCESS, "MKX_Gemm_reduce_scatter_scaled (arrays)")
    if (count > 0) call check(rel_err(real(reshape(C(1:count, :), &
        [count * n]), real64), reshape(Cref(first + 1:first + count, :), &
        [count * n])) < 1e-6_real64, "MKX_Gemm_reduce_scatter_scaled: C")
    C2 = -1
    call MKX_Gemm_reduce_scatter_scaled_init(A, int(m, c_int64_t), &
        int(kl, c_int64_t), int(m, c_int64_t), Bt, int(n, c_int64_t), &
        int(n, c_int64_t), MKX_TRANS, C2, int(size(C2, 1), c_int64_t), &
        MKX_FP8_E5M2, MKX_FP32, MKX_COL_MAJOR, MKX_Scales(MKX_SCALE_TENSOR, &
        c_loc(sa), c_loc(sb), c_null_ptr), comm, MPI_INFO_NULL, req, ierr)
    call check(ierr == MKX_SUCCESS .and. req /= MKX_REQUEST_NULL, &
        "MKX_Gemm_reduce_scatter_scaled_init")
    call MKX_Start(req, ierror=ierr)
    call check(ierr == MKX_SUCCESS .and. &
        all(C2(1:count, :) == C(1:count, :)), &
        "MKX_Gemm_reduce_scatter_scaled_init: started, C")
    call MKX_Request_free(req, ierr)
    call check(ierr == MKX_SUCCESS, "MKX_Request_free (reduce_scatter scaled)")
  end subroutine test_gemm_reduce_scatter_scaled

  ! GEMM + AllReduce: E4M3 with row scales (arrays), tensor scales
  ! (type(c_ptr) buffers), no scales; then its _init; then bad scales.
  subroutine test_gemm_allreduce_scaled()
    integer, parameter :: m = 6, n = 5, kl = 2
    integer :: i, j, q
    integer(int8), target :: A(m, kl), B(kl, n), Aq(m, kl), Bq(kl, n)
    real(c_float), target :: C(m, n), C2(m, n), sa(m), sb(n), ta(1), tb(1)
    real(real64), target :: Ad(m, kl), Bd(kl, n), Cd(m, n)
    real(real64) :: Cref(m, n), Ctensor(m, n), Cone(m, n), saq(m), sbq(n)
    type(MKX_Request) :: req
    Cref = 0
    Ctensor = 0
    Cone = 0
    do q = 0, nranks - 1
      do j = 1, kl
        do i = 1, m
          Aq(i, j) = fp8(2 * i + j + q, .false.)
        end do
        do i = 1, n
          Bq(j, i) = fp8(i + 3 * j + q, .false.)
        end do
      end do
      saq = [(2.0_real64**modulo(i + q, 3), i = 1, m)]       ! 1, 2 or 4
      sbq = [(0.5_real64**modulo(i + q, 2), i = 1, n)]       ! 1 or 0.5
      if (q == rank) then
        A = Aq
        B = Bq
        sa = real(saq, c_float)
        sb = real(sbq, c_float)
      end if
      Cone = Cone + matmul(fp8_val(Aq, .false.), fp8_val(Bq, .false.))
      do j = 1, n
        do i = 1, m
          Cref(i, j) = Cref(i, j) + saq(i) * sbq(j) * &
              sum(fp8_val(Aq(i, :), .false.) * fp8_val(Bq(:, j), .false.))
        end do
      end do
    end do
    Ctensor = 2 * 0.5_real64 * Cone
    C = -1
    call MKX_Gemm_allreduce_scaled(A, int(m, c_int64_t), int(kl, c_int64_t), &
        int(m, c_int64_t), B, int(n, c_int64_t), int(kl, c_int64_t), &
        MKX_NO_TRANS, C, int(m, c_int64_t), MKX_FP8_E4M3, MKX_FP32, &
        MKX_COL_MAJOR, MKX_Scales(MKX_SCALE_ROW, c_loc(sa), c_loc(sb), &
        c_null_ptr), comm, ierror=ierr)
    call check(ierr == MKX_SUCCESS .and. rel_err(real(reshape(C, [m * n]), &
        real64), reshape(Cref, [m * n])) < 1e-6_real64, &
        "MKX_Gemm_allreduce_scaled (arrays, MKX_SCALE_ROW)")
    ! type(c_ptr) specific, tensor scales 2 and 0.5
    ta = 2.0_c_float
    tb = 0.5_c_float
    C2 = -1
    call MKX_Gemm_allreduce_scaled(c_loc(A), int(m, c_int64_t), &
        int(kl, c_int64_t), int(m, c_int64_t), c_loc(B), int(n, c_int64_t), &
        int(kl, c_int64_t), MKX_NO_TRANS, c_loc(C2), int(m, c_int64_t), &
        MKX_FP8_E4M3, MKX_FP32, MKX_COL_MAJOR, MKX_Scales(MKX_SCALE_TENSOR, &
        c_loc(ta), c_loc(tb), c_null_ptr), comm, c_null_ptr, ierr)
    call check(ierr == MKX_SUCCESS .and. rel_err(real(reshape(C2, [m * n]), &
        real64), reshape(Ctensor, [m * n])) < 1e-6_real64, &
        "MKX_Gemm_allreduce_scaled (type(c_ptr), MKX_SCALE_TENSOR)")
    ! scales absent: every scale 1
    C2 = -1
    call MKX_Gemm_allreduce_scaled(A, int(m, c_int64_t), int(kl, c_int64_t), &
        int(m, c_int64_t), B, int(n, c_int64_t), int(kl, c_int64_t), &
        MKX_NO_TRANS, C2, int(m, c_int64_t), MKX_FP8_E4M3, MKX_FP32, &
        MKX_COL_MAJOR, comm=comm, ierror=ierr)
    call check(ierr == MKX_SUCCESS .and. rel_err(real(reshape(C2, [m * n]), &
        real64), reshape(Cone, [m * n])) < 1e-6_real64, &
        "MKX_Gemm_allreduce_scaled without scales")
    ! persistent: the scale arrays are read at each start
    C2 = -1
    call MKX_Gemm_allreduce_scaled_init(A, int(m, c_int64_t), &
        int(kl, c_int64_t), int(m, c_int64_t), B, int(n, c_int64_t), &
        int(kl, c_int64_t), MKX_NO_TRANS, C2, int(m, c_int64_t), &
        MKX_FP8_E4M3, MKX_FP32, MKX_COL_MAJOR, MKX_Scales(MKX_SCALE_TENSOR, &
        c_loc(ta), c_loc(tb), c_null_ptr), comm, MPI_INFO_NULL, req, ierr)
    call check(ierr == MKX_SUCCESS .and. req /= MKX_REQUEST_NULL, &
        "MKX_Gemm_allreduce_scaled_init")
    call MKX_Start(req, ierror=ierr)
    call check(ierr == MKX_SUCCESS .and. rel_err(real(reshape(C2, [m * n]), &
        real64), reshape(Ctensor, [m * n])) < 1e-6_real64, &
        "MKX_Gemm_allreduce_scaled_init: started, C")
    ta = 4.0_c_float
    call MKX_Start(req, ierror=ierr)
    call check(ierr == MKX_SUCCESS .and. rel_err(real(reshape(C2, [m * n]), &
        real64), reshape(2 * Ctensor, [m * n])) < 1e-6_real64, &
        "MKX_Gemm_allreduce_scaled_init: new scale values at a start")
    call MKX_Request_free(req, ierr)
    call check(ierr == MKX_SUCCESS, "MKX_Request_free (allreduce scaled)")
    ! bad scales, the same on every rank
    call MKX_Gemm_allreduce_scaled(A, int(m, c_int64_t), int(kl, c_int64_t), &
        int(m, c_int64_t), B, int(n, c_int64_t), int(kl, c_int64_t), &
        MKX_NO_TRANS, C2, int(m, c_int64_t), MKX_FP8_E4M3, MKX_FP32, &
        MKX_COL_MAJOR, MKX_Scales(MKX_SCALE_ROW, c_null_ptr, c_loc(sb), &
        c_null_ptr), comm, ierror=ierr)
    call check(ierr == MKX_ERR_NULL_POINTER, &
        "MKX_SCALE_ROW with a null scales%a gives MKX_ERR_NULL_POINTER")
    call MKX_Gemm_allreduce_scaled(A, int(m, c_int64_t), int(kl, c_int64_t), &
        int(m, c_int64_t), B, int(n, c_int64_t), int(kl, c_int64_t), &
        MKX_NO_TRANS, C2, int(m, c_int64_t), MKX_FP8_E4M3, MKX_FP32, &
        MKX_COL_MAJOR, MKX_Scales(7, c_loc(sa), c_loc(sb), c_null_ptr), &
        comm, ierror=ierr)
    call check(ierr == MKX_ERR_INVALID_ARG, &
        "scales%layout = 7 gives MKX_ERR_INVALID_ARG")
    Ad = 1
    Bd = 1
    call MKX_Gemm_allreduce_scaled(Ad, int(m, c_int64_t), int(kl, c_int64_t), &
        int(m, c_int64_t), Bd, int(n, c_int64_t), int(kl, c_int64_t), &
        MKX_NO_TRANS, Cd, int(m, c_int64_t), MKX_FP64, MKX_FP64, &
        MKX_COL_MAJOR, MKX_Scales(MKX_SCALE_TENSOR, c_loc(ta), c_loc(tb), &
        c_null_ptr), comm, ierror=ierr)
    call check(ierr == MKX_ERR_INVALID_ARG, &
        "MKX_SCALE_TENSOR with MKX_FP64 gives MKX_ERR_INVALID_ARG")
    ! real(real64) arrays with an fp8 dtype: refused by the element size
    call MKX_Gemm_allreduce_scaled(Ad, int(m, c_int64_t), int(kl, c_int64_t), &
        int(m, c_int64_t), Bd, int(n, c_int64_t), int(kl, c_int64_t), &
        MKX_NO_TRANS, C2, int(m, c_int64_t), MKX_FP8_E4M3, MKX_FP32, &
        MKX_COL_MAJOR, comm=comm, ierror=ierr)
    call check(ierr == MKX_ERR_INVALID_ARG, &
        "8-byte elements with MKX_FP8_E4M3 give MKX_ERR_INVALID_ARG")
  end subroutine test_gemm_allreduce_scaled

  ! ---- device pointers (only where the communicator has a GPU) ---------------------------
  ! MKX_Alloc_mem gives device memory; data goes in and out with
  ! cudaMemcpy (cudaMemcpyDefault); the operation takes type(c_ptr) buffers.
  subroutine test_device_pointers()
    integer, parameter :: m = 6, n = 5, kl = 3
    integer(c_size_t), parameter :: es = 8
    integer :: i, j, q, dev
    real(real64), target :: A(m, kl), B(kl, n), C(m, n)
    real(real64) :: Cref(m, n), Aq(m, kl), Bq(kl, n)
    type(c_ptr) :: dA, dB, dC
    type(c_funptr) :: f
    procedure(cuda_memcpy_fn), pointer :: cuda_memcpy
    integer(c_int) :: rc
    call MKX_Comm_device(comm, dev)
    if (dev < 0) return
    f = dlsym(c_null_ptr, "cudaMemcpy" // c_null_char)
    call check(c_associated(f), "cudaMemcpy found (communicator has a GPU)")
    if (.not. c_associated(f)) return
    call c_f_procpointer(f, cuda_memcpy)
    Cref = 0
    do q = 0, nranks - 1
      do j = 1, kl
        do i = 1, m
          Aq(i, j) = val(i, q * kl + j, 6)
        end do
        do i = 1, n
          Bq(j, i) = val(q * kl + j, i, 7)
        end do
      end do
      if (q == rank) then
        A = Aq
        B = Bq
      end if
      Cref = Cref + matmul(Aq, Bq)
    end do
    call MKX_Alloc_mem(comm, int(size(A), c_int64_t) * 8, dA, ierr)
    call MKX_Alloc_mem(comm, int(size(B), c_int64_t) * 8, dB)
    call MKX_Alloc_mem(comm, int(size(C), c_int64_t) * 8, dC)
    call check(ierr == MKX_SUCCESS, "MKX_Alloc_mem (device)")
    rc = cuda_memcpy(dA, c_loc(A), size(A) * es, 4_c_int)
    rc = rc + cuda_memcpy(dB, c_loc(B), size(B) * es, 4_c_int)
    call check(rc == 0, "cudaMemcpy to the device")
    call MKX_Gemm_allreduce(dA, int(m, c_int64_t), int(kl, c_int64_t), &
        int(m, c_int64_t), dB, int(n, c_int64_t), int(kl, c_int64_t), &
        MKX_NO_TRANS, dC, int(m, c_int64_t), MKX_FP64, MKX_FP64, &
        MKX_COL_MAJOR, comm, c_null_ptr, ierr)
    call check(ierr == MKX_SUCCESS, "MKX_Gemm_allreduce (device pointers)")
    C = -1
    rc = cuda_memcpy(c_loc(C), dC, size(C) * es, 4_c_int)
    call check(rc == 0 .and. rel_err(reshape(C, [m * n]), &
        reshape(Cref, [m * n])) < 1e-12_real64, &
        "MKX_Gemm_allreduce (device pointers): C")
    call MKX_Free_mem(comm, dC)
    call MKX_Free_mem(comm, dB)
    call MKX_Free_mem(comm, dA, ierr)
    call check(ierr == MKX_SUCCESS, "MKX_Free_mem (device)")
    if (rank == 0) print '(a,i0)', "test_f08_api: device pointers on GPU ", dev
  end subroutine test_device_pointers

  ! ---- ring attention (fp32, rank-4 Q, causal, GQA, LSE) ------------------------------------
  subroutine test_ring_attention()
    integer, parameter :: nb = 2, sl = 3, hq = 4, hkv = 2, hd = 8
    real(real32) :: Q(hd, hq, sl, nb), K(hd, hkv, sl, nb), V(hd, hkv, sl, nb)
    real(real32) :: O(hd, hq, sl, nb), O2(hd, hq, sl, nb), lse(sl, hq, nb)
    real(real64) :: Kg(hd, hkv, sl * nranks, nb), Vg(hd, hkv, sl * nranks, nb)
    real(real64) :: s(sl * nranks), oref(hd), scale, smax, lref
    integer :: b, h, i, j, d, gi, hk, nvis
    real(real64) :: err, lerr
    do b = 1, nb
      do j = 1, sl * nranks
        do h = 1, hkv
          do d = 1, hd
            Kg(d, h, j, b) = 0.5_real64 * val(d, j + 10 * h, 20 + b)
            Vg(d, h, j, b) = val(j, d + 10 * h, 30 + b)
          end do
        end do
      end do
      do i = 1, sl
        do h = 1, hq
          do d = 1, hd
            Q(d, h, i, b) = real(0.5_real64 * val(d, rank * sl + i + 10 * h, &
                40 + b), real32)
          end do
        end do
      end do
    end do
    K = real(Kg(:, :, rank * sl + 1:rank * sl + sl, :), real32)
    V = real(Vg(:, :, rank * sl + 1:rank * sl + sl, :), real32)
    scale = 1.0_real64 / sqrt(real(hd, real64))
    call MKX_Ring_attention(Q, K, V, O, lse, int(nb, c_int64_t), &
        int(sl, c_int64_t), int(hq, c_int64_t), int(hkv, c_int64_t), &
        int(hd, c_int64_t), .true., 0.0_c_double, MKX_FP32, comm, &
        ierror=ierr)
    call check(ierr == MKX_SUCCESS, "MKX_Ring_attention (arrays)")
    err = 0
    lerr = 0
    do b = 1, nb
      do i = 1, sl
        gi = rank * sl + i
        do h = 1, hq
          hk = (h - 1) / (hq / hkv) + 1
          nvis = gi                          ! causal: keys 1 .. gi
          do j = 1, nvis
            s(j) = scale * dot_product(real(Q(:, h, i, b), real64), &
                Kg(:, hk, j, b))
          end do
          smax = maxval(s(1:nvis))
          lref = smax + log(sum(exp(s(1:nvis) - smax)))
          oref = 0
          do j = 1, nvis
            oref = oref + exp(s(j) - lref) * Vg(:, hk, j, b)
          end do
          err = max(err, maxval(abs(O(:, h, i, b) - oref)))
          lerr = max(lerr, abs(lse(i, h, b) - lref))
        end do
      end do
    end do
    call check(err < 1e-4_real64, "MKX_Ring_attention: O")
    call check(lerr < 1e-4_real64, "MKX_Ring_attention: LSE")
    ! without LSE, rank-2 Q (head_dim*heads x seq*batch), scale given
    call MKX_Ring_attention(reshape(Q, [hd * hq, sl * nb]), K, V, O2, &
        batch=int(nb, c_int64_t), seq_local=int(sl, c_int64_t), &
        heads_q=int(hq, c_int64_t), heads_kv=int(hkv, c_int64_t), &
        head_dim=int(hd, c_int64_t), causal=.true., scale=scale, &
        dtype=MKX_FP32, comm=comm, ierror=ierr)
    call check(ierr == MKX_SUCCESS .and. maxval(abs(O2 - O)) < 1e-6, &
        "MKX_Ring_attention without LSE")
  end subroutine test_ring_attention

  ! ---- MoE dispatch + GEMM (fp64 arrays) -----------------------------------------------------
  ! X(hidden, tokens), W(n, hidden, local experts), Y(n, y_rows): the
  ! row-major layouts of mkx.h seen from Fortran.
  subroutine test_moe_dispatch_gemm()
    integer, parameter :: nt = 3, hid = 4, nn = 3, topk = 2
    integer :: ne, epr, yrows, i, e, t, src, slot, row, ge
    real(real64) :: X(hid, nt), Xs(hid), err
    real(real64), allocatable :: W(:,:,:), Y(:,:)
    integer(c_int32_t) :: ids(topk, nt)
    real(c_float) :: wts(topk, nt)
    integer(c_int64_t), allocatable :: erows(:)
    integer(c_int32_t), allocatable :: origin(:,:)
    ne = 2 * nranks
    epr = ne / nranks
    yrows = nt * topk * nranks
    allocate(W(nn, hid, epr), Y(nn, yrows), erows(epr), origin(3, yrows))
    do t = 1, nt
      X(:, t) = [(val(i, t, 50 + rank), i = 1, hid)]
      do slot = 1, topk
        ids(slot, t) = int(modulo(rank + t + slot, ne), c_int32_t)
        wts(slot, t) = real(0.25 * slot + 0.1 * t, c_float)
      end do
    end do
    do e = 1, epr
      call fill_w(W(:, :, e), rank * epr + e - 1)
    end do
    call MKX_Moe_dispatch_gemm(X, int(nt, c_int64_t), int(hid, c_int64_t), &
        ids, wts, int(topk, c_int64_t), int(ne, c_int64_t), W, &
        int(nn, c_int64_t), Y, int(yrows, c_int64_t), erows, origin, &
        MKX_FP64, comm, ierror=ierr)
    call check(ierr == MKX_SUCCESS, "MKX_Moe_dispatch_gemm (arrays)")
    if (ierr /= MKX_SUCCESS) return
    err = 0
    row = 0
    do e = 1, epr
      do i = 1, int(erows(e))
        row = row + 1
        src = origin(1, row)
        t = origin(2, row) + 1
        slot = origin(3, row) + 1
        ! the source rank's token, its expert and gate weight, recomputed
        Xs = [(val(ge, t, 50 + src), ge = 1, hid)]
        ge = int(modulo(src + t + slot, ne))
        call check(ge == rank * epr + e - 1, "MKX_Moe_dispatch_gemm: routing")
        err = max(err, maxval(abs(Y(:, row) - real(real(0.25 * slot + &
            0.1 * t, c_float), real64) * matmul(W(:, :, e), Xs))))
      end do
    end do
    call check(err < 1e-12_real64, "MKX_Moe_dispatch_gemm: Y")
    call MPI_Allreduce(MPI_IN_PLACE, row, 1, MPI_INTEGER, MPI_SUM, &
        MPI_COMM_WORLD)
    call check(row == nt * topk * nranks, "MKX_Moe_dispatch_gemm: row count")
  end subroutine test_moe_dispatch_gemm

  ! E5M2 tokens and weights with tensor scales (powers of two: exact), Y in
  ! fp32; the same routing as above.
  subroutine test_moe_dispatch_gemm_scaled()
    integer, parameter :: nt = 3, hid = 4, nn = 3, topk = 2
    integer :: ne, epr, yrows, i, j, e, t, src, slot, row, ge
    integer(int8), target :: X(hid, nt)
    integer(int8), allocatable, target :: W(:,:,:), Wt(:,:,:)
    real(c_float), target :: sx(1)
    real(c_float), allocatable, target :: sw(:)
    real(c_float), allocatable :: Y(:,:), Y2(:,:)
    real(real64) :: Xs(hid), want, err
    integer(c_int32_t) :: ids(topk, nt)
    real(c_float) :: wts(topk, nt)
    integer(c_int64_t), allocatable :: erows(:)
    integer(c_int32_t), allocatable :: origin(:,:), origin2(:,:)
    ne = 2 * nranks
    epr = ne / nranks
    yrows = nt * topk * nranks
    allocate(W(nn, hid, epr), sw(epr), Y(nn, yrows), erows(epr), &
        origin(3, yrows))
    do t = 1, nt
      X(:, t) = [(fp8(i + t + rank, .true.), i = 1, hid)]
      do slot = 1, topk
        ids(slot, t) = int(modulo(rank + t + slot, ne), c_int32_t)
        wts(slot, t) = real(0.25 * slot, c_float)
      end do
    end do
    sx = 2.0_c_float**modulo(rank, 3)
    do e = 1, epr
      ge = rank * epr + e - 1
      W(:, :, e) = reshape([((fp8(i + 2 * j + ge, .true.), i = 1, nn), &
          j = 1, hid)], [nn, hid])
      sw(e) = 0.5_c_float**modulo(ge, 2)
    end do
    Y = -1
    call MKX_Moe_dispatch_gemm_scaled(X, int(nt, c_int64_t), &
        int(hid, c_int64_t), ids, wts, int(topk, c_int64_t), &
        int(ne, c_int64_t), W, int(nn, c_int64_t), MKX_NO_TRANS, Y, &
        int(yrows, c_int64_t), erows, origin, MKX_FP8_E5M2, MKX_FP32, &
        MKX_Scales(MKX_SCALE_TENSOR, c_loc(sx), c_loc(sw), c_null_ptr), comm, &
        ierror=ierr)
    call check(ierr == MKX_SUCCESS, "MKX_Moe_dispatch_gemm_scaled (arrays)")
    if (ierr /= MKX_SUCCESS) return
    err = 0
    row = 0
    do e = 1, epr
      do i = 1, int(erows(e))
        row = row + 1
        src = origin(1, row)
        t = origin(2, row) + 1
        slot = origin(3, row) + 1
        Xs = [(fp8_val(fp8(j + t + src, .true.), .true.), j = 1, hid)]
        do j = 1, nn
          want = 0.25_real64 * slot * 2.0_real64**modulo(src, 3) * sw(e) * &
              sum(fp8_val(W(j, :, e), .true.) * Xs)
          err = max(err, abs(Y(j, row) - want))
        end do
      end do
    end do
    call check(err == 0, "MKX_Moe_dispatch_gemm_scaled: Y (exact)")
    call MPI_Allreduce(MPI_IN_PLACE, row, 1, MPI_INTEGER, MPI_SUM, &
        MPI_COMM_WORLD)
    call check(row == nt * topk * nranks, &
        "MKX_Moe_dispatch_gemm_scaled: row count")
    ! Each expert's weight stored n x hidden (MKX_TRANS): the same bits.
    allocate(Wt(hid, nn, epr), Y2(nn, yrows), origin2(3, yrows))
    do e = 1, epr
      Wt(:, :, e) = transpose(W(:, :, e))
    end do
    Y2 = -1
    call MKX_Moe_dispatch_gemm_scaled(X, int(nt, c_int64_t), &
        int(hid, c_int64_t), ids, wts, int(topk, c_int64_t), &
        int(ne, c_int64_t), Wt, int(nn, c_int64_t), MKX_TRANS, Y2, &
        int(yrows, c_int64_t), erows, origin2, MKX_FP8_E5M2, MKX_FP32, &
        MKX_Scales(MKX_SCALE_TENSOR, c_loc(sx), c_loc(sw), c_null_ptr), comm, &
        ierror=ierr)
    call check(ierr == MKX_SUCCESS .and. all(Y2 == Y) .and. &
        all(origin2(:, :sum(erows)) == origin(:, :sum(erows))), &
        "MKX_Moe_dispatch_gemm_scaled: MKX_TRANS gives the MKX_NO_TRANS bits")
  end subroutine test_moe_dispatch_gemm_scaled

  subroutine fill_w(W, e)
    real(real64), intent(out) :: W(:,:)
    integer, intent(in) :: e
    integer :: i, j
    do j = 1, size(W, 2)
      do i = 1, size(W, 1)
        W(i, j) = 0.3_real64 * val(i, j, 60 + e)
      end do
    end do
  end subroutine fill_w

  ! ---- MoE layer (fp64 arrays) ------------------------------------------------------------------
  subroutine test_moe_layer()
    integer, parameter :: nt = 4, hid = 6, ffn = 5, topk = 2
    integer :: ne, epr, t, slot, e, i
    real(real64) :: X(hid, nt), out(hid, nt), ref(hid, nt), g(2 * ffn), &
        a(ffn), err
    real(real64), allocatable :: W1(:,:,:), W2(:,:,:), W1g(:,:), W2g(:,:)
    integer(c_int32_t) :: ids(topk, nt)
    real(c_float) :: wts(topk, nt)
    ne = nranks
    if (ne < 2) ne = 2
    ne = ne - modulo(ne, nranks)
    epr = ne / nranks
    allocate(W1(2 * ffn, hid, epr), W2(hid, ffn, epr), W1g(2 * ffn, hid), &
        W2g(hid, ffn))
    do e = 1, epr
      call fill_w(W1(:, :, e), 100 + rank * epr + e - 1)
      call fill_w(W2(:, :, e), 200 + rank * epr + e - 1)
    end do
    ref = 0
    do t = 1, nt
      X(:, t) = [(val(i, t, 70 + rank), i = 1, hid)]
      do slot = 1, topk
        ids(slot, t) = int(modulo(rank + t + slot, ne), c_int32_t)
        wts(slot, t) = real(0.5 / slot, c_float)
        e = int(ids(slot, t))
        call fill_w(W1g, 100 + e)
        call fill_w(W2g, 200 + e)
        g = matmul(W1g, X(:, t))
        a = g(1:ffn) / (1 + exp(-g(1:ffn))) * g(ffn + 1:)
        ref(:, t) = ref(:, t) + real(wts(slot, t), real64) * matmul(W2g, a)
      end do
    end do
    call MKX_Moe_layer(X, int(nt, c_int64_t), int(hid, c_int64_t), ids, wts, &
        int(topk, c_int64_t), int(ne, c_int64_t), W1, W2, &
        int(ffn, c_int64_t), out, MKX_FP64, comm, ierror=ierr)
    call check(ierr == MKX_SUCCESS, "MKX_Moe_layer (arrays)")
    err = rel_err(reshape(out, [hid * nt]), reshape(ref, [hid * nt]))
    call check(err < 1e-10_real64, "MKX_Moe_layer: out")
  end subroutine test_moe_layer

  ! E4M3 tokens, W1 and W2 with scales (tensor for X and W1, per column of
  ! W2), out in fp32; the same routing as above.  W(e) for expert e is the
  ! fp8 bits of small values; the reference in fp64.
  subroutine test_moe_layer_scaled()
    integer, parameter :: nt = 3, hid = 4, ffn = 3, topk = 2
    integer :: ne, epr, t, slot, e, i, j
    integer(int8), target :: X(hid, nt)
    integer(int8), allocatable, target :: W1(:,:,:), W2(:,:,:), W1t(:,:,:), &
        W2t(:,:,:)
    real(c_float), target :: sx(1)
    real(c_float), allocatable, target :: s1(:), s2(:,:)
    real(c_float) :: out(hid, nt), out2(hid, nt), wts(topk, nt)
    real(real64) :: ref(hid, nt), xv(hid), g(2 * ffn), a(ffn), w1v(2 * ffn, hid), &
        w2v(hid, ffn), err
    integer(c_int32_t) :: ids(topk, nt)
    ne = nranks
    if (ne < 2) ne = 2
    ne = ne - modulo(ne, nranks)
    epr = ne / nranks
    allocate(W1(2 * ffn, hid, epr), W2(hid, ffn, epr), s1(epr), s2(hid, epr))
    sx = 0.5_c_float
    do e = 1, epr
      call layer_w(rank * epr + e - 1, W1(:, :, e), W2(:, :, e), s1(e), &
          s2(:, e))
    end do
    ref = 0
    do t = 1, nt
      X(:, t) = [(fp8(i + 2 * t + rank, .false.), i = 1, hid)]
      xv = 0.5_real64 * fp8_val(X(:, t), .false.)
      do slot = 1, topk
        ids(slot, t) = int(modulo(rank + t + slot, ne), c_int32_t)
        wts(slot, t) = real(0.5 / slot, c_float)
        block
          integer(int8) :: b1(2 * ffn, hid), b2(hid, ffn)
          real(c_float) :: t1, t2(hid)
          call layer_w(int(ids(slot, t)), b1, b2, t1, t2)
          w1v = t1 * fp8_val(b1, .false.)
          do j = 1, ffn
            w2v(:, j) = real(t2, real64) * fp8_val(b2(:, j), .false.)
          end do
        end block
        g = matmul(w1v, xv)
        a = g(1:ffn) / (1 + exp(-g(1:ffn))) * g(ffn + 1:)
        ref(:, t) = ref(:, t) + real(wts(slot, t), real64) * matmul(w2v, a)
      end do
    end do
    out = -1
    call MKX_Moe_layer_scaled(X, int(nt, c_int64_t), int(hid, c_int64_t), &
        ids, wts, int(topk, c_int64_t), int(ne, c_int64_t), W1, W2, &
        int(ffn, c_int64_t), MKX_NO_TRANS, out, MKX_FP8_E4M3, MKX_FP32, &
        MKX_Scales(MKX_SCALE_TENSOR, c_loc(sx), c_loc(s1), c_null_ptr), &
        MKX_Scales(MKX_SCALE_ROW, c_null_ptr, c_loc(s2), c_null_ptr), comm, &
        ierror=ierr)
    call check(ierr == MKX_SUCCESS, "MKX_Moe_layer_scaled (arrays)")
    err = rel_err(real(reshape(out, [hid * nt]), real64), &
        reshape(ref, [hid * nt]))
    call check(err < 1e-5_real64, "MKX_Moe_layer_scaled: out")
    ! W1 stored 2 ffn x hidden and W2 hidden x ffn (MKX_TRANS): the same
    ! bits.
    allocate(W1t(hid, 2 * ffn, epr), W2t(ffn, hid, epr))
    do e = 1, epr
      W1t(:, :, e) = transpose(W1(:, :, e))
      W2t(:, :, e) = transpose(W2(:, :, e))
    end do
    out2 = -1
    call MKX_Moe_layer_scaled(X, int(nt, c_int64_t), int(hid, c_int64_t), &
        ids, wts, int(topk, c_int64_t), int(ne, c_int64_t), W1t, W2t, &
        int(ffn, c_int64_t), MKX_TRANS, out2, MKX_FP8_E4M3, MKX_FP32, &
        MKX_Scales(MKX_SCALE_TENSOR, c_loc(sx), c_loc(s1), c_null_ptr), &
        MKX_Scales(MKX_SCALE_ROW, c_null_ptr, c_loc(s2), c_null_ptr), comm, &
        ierror=ierr)
    call check(ierr == MKX_SUCCESS .and. all(out2 == out), &
        "MKX_Moe_layer_scaled: MKX_TRANS gives the MKX_NO_TRANS bits")
  end subroutine test_moe_layer_scaled

  ! Expert e's fp8 W1 (2 ffn x hid, as Fortran sees [hid][2 ffn]) and W2,
  ! W1's tensor scale and W2's column scales (powers of two).
  subroutine layer_w(e, W1, W2, s1, s2)
    integer, intent(in) :: e
    integer(int8), intent(out) :: W1(:,:), W2(:,:)
    real(c_float), intent(out) :: s1, s2(:)
    integer :: i, j
    do j = 1, size(W1, 2)
      do i = 1, size(W1, 1)
        W1(i, j) = fp8(i + 3 * j + e, .false.)
      end do
    end do
    do j = 1, size(W2, 2)
      do i = 1, size(W2, 1)
        W2(i, j) = fp8(2 * i + j + e, .false.)
      end do
    end do
    s1 = 2.0_c_float**modulo(e, 2)
    s2 = [(0.5_c_float**modulo(i + e, 3), i = 1, size(s2))]
  end subroutine layer_w

  ! ---- persistent requests ------------------------------------------------------------------------
  subroutine test_persistent()
    integer, parameter :: m = 4, k = 3, n = 2
    real(real64), target :: A(m, k), B(k, n), C(m * nranks, n), Aout(m * nranks, k)
    real(real64), target :: Crs(m, n), Car(m, n), Car2(m, n)
    real(real64) :: Afull(m * nranks, k), Bsum(k, n), ref(m * nranks, n)
    type(MKX_Request) :: r1, r2, r3, r4
    integer :: q, i, j, it, ctas
    integer(c_int64_t) :: first, count
    character(len=:), allocatable :: path
    logical :: capturable
    do it = 1, 2                      ! A changes between starts
      do q = 0, nranks - 1
        do j = 1, k
          do i = 1, m
            Afull(q * m + i, j) = val(q * m + i, j, 80 + it)
          end do
        end do
      end do
      if (it == 1) then
        do j = 1, n
          do i = 1, k
            B(i, j) = val(i, j, 90)
          end do
        end do
        call MKX_Allgather_gemm_init(A, int(m, c_int64_t), int(k, c_int64_t), &
            int(m, c_int64_t), B, int(n, c_int64_t), int(k, c_int64_t), &
            MKX_NO_TRANS, C, int(m * nranks, c_int64_t), Aout, &
            int(m * nranks, c_int64_t), MKX_FP64, MKX_FP64, MKX_COL_MAJOR, &
            comm, MPI_INFO_NULL, r1, ierr)
        call check(ierr == MKX_SUCCESS .and. r1 /= MKX_REQUEST_NULL, &
            "MKX_Allgather_gemm_init")
        call MKX_Gemm_reduce_scatter_init(A, int(m * nranks, c_int64_t) / &
            nranks, int(k, c_int64_t), int(m, c_int64_t), B, &
            int(n, c_int64_t), int(k, c_int64_t), MKX_NO_TRANS, Crs, &
            int(m, c_int64_t), MKX_FP64, MKX_FP64, MKX_COL_MAJOR, comm, &
            MPI_INFO_NULL, r2, ierr)
        call check(ierr == MKX_SUCCESS, "MKX_Gemm_reduce_scatter_init")
        call MKX_Gemm_allreduce_init(A, int(m, c_int64_t), int(k, c_int64_t), &
            int(m, c_int64_t), B, int(n, c_int64_t), int(k, c_int64_t), &
            MKX_NO_TRANS, Car, int(m, c_int64_t), MKX_FP64, MKX_FP64, &
            MKX_COL_MAJOR, comm, MPI_INFO_NULL, r3, ierr)
        call check(ierr == MKX_SUCCESS, "MKX_Gemm_allreduce_init (arrays)")
        call MKX_Gemm_allreduce_init(c_loc(A), int(m, c_int64_t), &
            int(k, c_int64_t), int(m, c_int64_t), c_loc(B), &
            int(n, c_int64_t), int(k, c_int64_t), MKX_NO_TRANS, c_loc(Car2), &
            int(m, c_int64_t), MKX_FP64, MKX_FP64, MKX_COL_MAJOR, comm, &
            MPI_INFO_NULL, r4, ierr)
        call check(ierr == MKX_SUCCESS, "MKX_Gemm_allreduce_init (c_ptr)")
      end if
      A = Afull(rank * m + 1:rank * m + m, :)
      call MKX_Start(r1, ierror=ierr)
      call check(ierr == MKX_SUCCESS, "MKX_Start (allgather)")
      ref = matmul(Afull, B)
      call check(rel_err(reshape(C, [size(C)]), reshape(ref, [size(ref)])) &
          < 1e-12_real64 .and. all(Aout == Afull), "persistent allgather")
      call MKX_Start(r2, c_null_ptr, ierr)
      call MKX_Start(r3, ierror=ierr)
      call MKX_Start(r4)
      ! every rank holds its own A with the same B: sum over ranks
      Bsum = B
      ref = 0
      do q = 0, nranks - 1
        ref(1:m, :) = ref(1:m, :) + matmul(Afull(q * m + 1:q * m + m, :), Bsum)
      end do
      call check(rel_err(reshape(Car, [m * n]), reshape(ref(1:m, :), &
          [m * n])) < 1e-12_real64 .and. all(Car2 == Car), &
          "persistent allreduce")
      call MKX_Block_range(int(m, c_int64_t), nranks, rank, first, count)
      if (count > 0) call check(rel_err(reshape(Crs(1:count, :), &
          [count * n]), reshape(ref(first + 1:first + count, :), &
          [count * n])) < 1e-12_real64, "persistent reduce_scatter")
    end do
    ! host arrays: the host path, which a CUDA graph cannot capture
    call MKX_Request_get_path(r3, path, capturable, ctas, ierr)
    call check(ierr == MKX_SUCCESS .and. path == "host" .and. &
        .not. capturable .and. ctas == 0, "MKX_Request_get_path")
    call MKX_Comm_get_last_path(comm, path, capturable, ctas, ierr)
    call check(ierr == MKX_SUCCESS .and. path == "host", &
        "MKX_Comm_get_last_path")
    call MKX_Request_free(r1, ierr)
    call check(ierr == MKX_SUCCESS .and. r1 == MKX_REQUEST_NULL, &
        "MKX_Request_free")
    call MKX_Request_free(r2)
    call MKX_Request_free(r3)
    call MKX_Request_free(r4)
    call MKX_Start(r1, ierror=ierr)
    call check(ierr == MKX_ERR_INVALID_REQUEST, &
        "MKX_Start(freed request) gives MKX_ERR_INVALID_REQUEST")
  end subroutine test_persistent

  ! ---- errors -----------------------------------------------------------------------------------------
  subroutine test_errors()
    real(real64), target :: A(4, 2), B(2, 3), C(4, 3)
    real(real32) :: As(4, 2), Bs(2, 3), Cs(4, 3)
    character(len=:), allocatable :: msg
    type(c_ptr) :: p
    integer :: r
    A = 1
    B = 1
    ! n = 0: MKX_ERR_BAD_SIZE in ierror, a message naming the argument
    call MKX_Gemm_allreduce(A, 4_c_int64_t, 2_c_int64_t, 4_c_int64_t, B, &
        0_c_int64_t, 2_c_int64_t, MKX_NO_TRANS, C, 4_c_int64_t, MKX_FP64, &
        MKX_FP64, MKX_COL_MAJOR, comm, ierror=ierr)
    call check(ierr == MKX_ERR_BAD_SIZE, "n = 0 gives MKX_ERR_BAD_SIZE")
    call MKX_Get_last_error(msg)
    call check(len(msg) > 0 .and. index(msg, "n") > 0, &
        "MKX_Get_last_error after n = 0")
    ! the same without ierror: returns, the program goes on
    call MKX_Gemm_allreduce(A, 4_c_int64_t, 2_c_int64_t, 4_c_int64_t, B, &
        0_c_int64_t, 2_c_int64_t, MKX_NO_TRANS, C, 4_c_int64_t, MKX_FP64, &
        MKX_FP64, MKX_COL_MAJOR, comm)
    call MKX_Get_last_error(msg)
    call check(len(msg) > 0, "ierror absent: call returns, message set")
    ! a successful call clears the message
    call MKX_Comm_rank(comm, r)
    call MKX_Get_last_error(msg)
    call check(len(msg) == 0, "MKX_Get_last_error empty after success")
    ! lda too small
    call MKX_Gemm_allreduce(A, 4_c_int64_t, 2_c_int64_t, 3_c_int64_t, B, &
        3_c_int64_t, 2_c_int64_t, MKX_NO_TRANS, C, 4_c_int64_t, MKX_FP64, &
        MKX_FP64, MKX_COL_MAJOR, comm, ierror=ierr)
    call check(ierr == MKX_ERR_BAD_LD, "lda = 3 < M gives MKX_ERR_BAD_LD")
    ! real(real32) arrays with MKX_FP64 on rank 0 only: rank 0 gets
    ! MKX_ERR_INVALID_ARG, the others MKX_ERR_PEER (no rank hangs)
    As = 1
    Bs = 1
    if (rank == 0) then
      call MKX_Gemm_allreduce(As, 4_c_int64_t, 2_c_int64_t, 4_c_int64_t, Bs, &
          3_c_int64_t, 2_c_int64_t, MKX_NO_TRANS, Cs, 4_c_int64_t, MKX_FP64, &
          MKX_FP64, MKX_COL_MAJOR, comm, ierror=ierr)
      call check(ierr == MKX_ERR_INVALID_ARG, &
          "element size /= datatype gives MKX_ERR_INVALID_ARG")
      call MKX_Get_last_error(msg)
      call check(index(msg, "bytes") > 0, "message names the element size")
    else
      call MKX_Gemm_allreduce(A, 4_c_int64_t, 2_c_int64_t, 4_c_int64_t, B, &
          3_c_int64_t, 2_c_int64_t, MKX_NO_TRANS, C, 4_c_int64_t, MKX_FP64, &
          MKX_FP64, MKX_COL_MAJOR, comm, ierror=ierr)
      call check(ierr == MKX_ERR_PEER, "peer of a shim error gets MKX_ERR_PEER")
    end if
    ! a section not contiguous in its first dimension
    call MKX_Gemm_allreduce(A(1:4:2, :), 2_c_int64_t, 2_c_int64_t, &
        2_c_int64_t, B, 3_c_int64_t, 2_c_int64_t, MKX_NO_TRANS, C, &
        4_c_int64_t, MKX_FP64, MKX_FP64, MKX_COL_MAJOR, comm, ierror=ierr)
    call check(ierr == MKX_ERR_INVALID_ARG, "strided section refused")
    ! a type(c_ptr) among arrays
    p = c_loc(C)
    call MKX_Allgather_gemm(A, 4_c_int64_t, 2_c_int64_t, 4_c_int64_t, B, &
        3_c_int64_t, 2_c_int64_t, MKX_NO_TRANS, C, 4_c_int64_t * nranks, &
        p, 4_c_int64_t * nranks, MKX_FP64, MKX_FP64, MKX_COL_MAJOR, comm, &
        ierror=ierr)
    call check(ierr == MKX_ERR_INVALID_ARG, "type(c_ptr) among arrays refused")
    ! null handles
    call MKX_Comm_rank(MKX_COMM_NULL, r, ierr)
    call check(ierr == MKX_ERR_INVALID_COMM, &
        "MKX_Comm_rank(MKX_COMM_NULL) gives MKX_ERR_INVALID_COMM")
    call MKX_Get_last_error(msg)
    call check(len(msg) > 0, "MKX_Get_last_error after MKX_ERR_INVALID_COMM")
  end subroutine test_errors

  subroutine test_info_print()
    if (rank /= 0) return
    call MKX_Info_print(comm, ierror=ierr)
    call check(ierr == MKX_SUCCESS, "MKX_Info_print(comm)")
    call MKX_Info_print()
  end subroutine test_info_print

end program test_f08_api
