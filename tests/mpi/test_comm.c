/*
 * test_comm.c - communicators and small calls through the public API:
 * MKX_Comm_create/free and the queries (against MPI), the virtual node
 * option, MKX_Comm_device, MKX_Block_range, MKX_Type_size,
 * MKX_Get_version, MKX_Error_string, MKX_Alloc_mem/MKX_Free_mem.
 *
 *   mpirun -np P ./test_comm [--seed N] [--device] [-v]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mkx_test.h"

#ifdef MKX_TEST_CUDA
#include <cuda_runtime.h>
#endif

static int have_gpu_hint(void) {
#ifdef MKX_TEST_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  return n > 0;
#else
  /* without the CUDA runtime: a GPU needs the NVIDIA device nodes */
  return access("/dev/nvidiactl", F_OK) == 0 ||
         access("/dev/nvidia0", F_OK) == 0;
#endif
}

static void queries(MKX_Comm c, const char *what, int vnode) {
  int rank = -1, size = -1, node = -1, nn = -1, lr = -1, ls = -1, dev = -2;
  int rc = 0;
  rc |= MKX_Comm_rank(c, &rank);
  rc |= MKX_Comm_size(c, &size);
  rc |= MKX_Comm_node(c, &node);
  rc |= MKX_Comm_num_nodes(c, &nn);
  rc |= MKX_Comm_local_rank(c, &lr);
  rc |= MKX_Comm_local_size(c, &ls);
  rc |= MKX_Comm_device(c, &dev);
  CHECK(rc == MKX_SUCCESS, "%s: every query returns MKX_SUCCESS", what);
  CHECK(rank == mt.rank && size == mt.size,
        "%s: rank/size %d/%d equal MPI's %d/%d", what, rank, size, mt.rank,
        mt.size);

  /* gather (node, local rank, local size) of every rank */
  int mine[3] = {node, lr, ls};
  int *all = malloc((size_t)mt.size * 3 * sizeof(int));
  MPI_Allgather(mine, 3, MPI_INT, all, 3, MPI_INT, MPI_COMM_WORLD);
  int consistent = node >= 0 && node < nn && lr >= 0 && lr < ls;
  int members = 0;
  for (int q = 0; q < mt.size; q++) {
    if (all[3 * q] == node) {
      members++;
      consistent &= all[3 * q + 2] == ls;
      if (q != mt.rank) consistent &= all[3 * q + 1] != lr; /* distinct */
    }
  }
  consistent &= members == ls;
  /* node indices cover [0, nn) */
  for (int v = 0; v < nn; v++) {
    int found = 0;
    for (int q = 0; q < mt.size; q++) found |= all[3 * q] == v;
    consistent &= found;
  }
  CHECK(consistent,
        "%s: node %d of %d, local rank %d of %d consistent over ranks", what,
        node, nn, lr, ls);

  if (vnode > 0) {
    int want_nodes = (mt.size + vnode - 1) / vnode;
    CHECK(nn == want_nodes, "%s: %d virtual nodes (want ceil(%d/%d) = %d)",
          what, nn, mt.size, vnode, want_nodes);
    CHECK(lr >= 0 && lr < vnode && ls <= vnode,
          "%s: local rank %d < %d, local size %d <= %d", what, lr, vnode, ls,
          vnode);
  } else {
    MPI_Comm shm;
    int slr, sls, leader, nleaders = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                        &shm);
    MPI_Comm_rank(shm, &slr);
    MPI_Comm_size(shm, &sls);
    leader = slr == 0;
    MPI_Allreduce(&leader, &nleaders, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Comm_free(&shm);
    CHECK(lr == slr && ls == sls && nn == nleaders,
          "%s: local rank/size %d/%d, nodes %d match "
          "MPI_COMM_TYPE_SHARED (%d/%d, %d)",
          what, lr, ls, nn, slr, sls, nleaders);
    if (nleaders == 1)
      CHECK(node == 0, "%s: one host -> node index 0 (got %d)", what, node);
  }

  if (mt.device)
    CHECK(dev >= 0, "%s: --device: MKX_Comm_device %d >= 0", what, dev);
  else if (!have_gpu_hint())
    CHECK(dev == -1, "%s: no GPU: MKX_Comm_device is -1 (got %d)", what, dev);
  else
    CHECK(dev >= -1, "%s: MKX_Comm_device %d >= -1", what, dev);
  free(all);
}

static void block_range(void) {
  static const int64_t rows_list[] = {1, 2, 3, 5, 7, 16, 17, 100, 1000003};
  int bad = 0, badrc = 0;
  for (size_t ri = 0; ri < sizeof rows_list / sizeof *rows_list; ri++)
    for (int nb = 1; nb <= 9; nb++) {
      int64_t rows = rows_list[ri], next = 0, mn = rows, mx = 0;
      for (int b = 0; b < nb; b++) {
        int64_t first = -1, count = -1;
        if (MKX_Block_range(rows, nb, b, &first, &count) != MKX_SUCCESS) {
          badrc++;
          continue;
        }
        if (first != next || count < 0) bad++;
        int64_t want = rows / nb + (b < rows % nb);
        if (count != want) bad++;
        next = first + count;
        if (count < mn) mn = count;
        if (count > mx) mx = count;
      }
      if (next != rows || mx - mn > 1) bad++;
    }
  CHECK(badrc == 0, "MKX_Block_range returns MKX_SUCCESS on valid input");
  CHECK(bad == 0,
        "MKX_Block_range: blocks cover [0,rows) exactly in order, sizes "
        "differ by <= 1, first rows%%nblocks blocks larger");
  int64_t f, c;
  CHECK(MKX_Block_range(10, 0, 0, &f, &c) != MKX_SUCCESS,
        "MKX_Block_range(nblocks=0) fails");
  CHECK(MKX_Block_range(10, 3, 3, &f, &c) != MKX_SUCCESS &&
            MKX_Block_range(10, 3, -1, &f, &c) != MKX_SUCCESS,
        "MKX_Block_range(b outside [0,nblocks)) fails");
  CHECK(MKX_Block_range(-1, 3, 0, &f, &c) != MKX_SUCCESS,
        "MKX_Block_range(rows=-1) fails");
  CHECK_RC(MKX_Block_range(10, 3, 0, NULL, &c), MKX_ERR_NULL_POINTER,
           "MKX_Block_range(first=NULL) returns MKX_ERR_NULL_POINTER");
  CHECK_RC(MKX_Block_range(10, 3, 0, &f, NULL), MKX_ERR_NULL_POINTER,
           "MKX_Block_range(count=NULL) returns MKX_ERR_NULL_POINTER");
}

static void small_calls(void) {
  CHECK(MKX_Type_size(MKX_BF16) == 2 && MKX_Type_size(MKX_FP16) == 2 &&
            MKX_Type_size(MKX_FP32) == 4 && MKX_Type_size(MKX_FP64) == 8 &&
            MKX_Type_size(MKX_FP8_E4M3) == 1 &&
            MKX_Type_size(MKX_FP8_E5M2) == 1,
        "MKX_Type_size: 2, 2, 4, 8, 1, 1");
  CHECK(MKX_Type_size((MKX_Datatype)0) == 0 &&
            MKX_Type_size((MKX_Datatype)7) == 0 &&
            MKX_Type_size((MKX_Datatype)-3) == 0,
        "MKX_Type_size of an invalid type is 0");

  int ma = -1, mi = -1, pa = -1;
  int rc = MKX_Get_version(&ma, &mi, &pa);
  CHECK(rc == MKX_SUCCESS && ma == MKX_VERSION_MAJOR &&
            mi == MKX_VERSION_MINOR && pa == MKX_VERSION_PATCH,
        "MKX_Get_version %d.%d.%d matches the header %d.%d.%d", ma, mi, pa,
        MKX_VERSION_MAJOR, MKX_VERSION_MINOR, MKX_VERSION_PATCH);
  CHECK(MKX_VERSION == MKX_VERSION_CODE(ma, mi, pa),
        "MKX_VERSION matches MKX_VERSION_CODE of the linked version");

  int ok = 1, distinct = 1;
  for (int e = 0; e <= MKX_ERR_LASTCODE; e++) {
    const char *s = MKX_Error_string(e);
    if (!s || !*s) {
      ok = 0;
      continue;
    }
    for (int f = 0; f < e; f++) {
      const char *t = MKX_Error_string(f);
      if (t && !strcmp(s, t)) distinct = 0;
    }
  }
  CHECK(ok, "MKX_Error_string non-empty for codes 0..MKX_ERR_LASTCODE");
  CHECK(distinct, "MKX_Error_string distinct for codes 0..MKX_ERR_LASTCODE");
  const char *u1 = MKX_Error_string(MKX_ERR_LASTCODE + 1),
             *u2 = MKX_Error_string(-1);
  CHECK(u1 && *u1 && u2 && *u2,
        "MKX_Error_string of an unknown code non-empty");
  CHECK(MKX_Get_last_error() != NULL, "MKX_Get_last_error never NULL");
}

/* Under srun, MKX's placement must agree with what Slurm says about this
 * task (block distribution on one host: the same local rank). */
static void slurm_placement(MKX_Comm c) {
  const char *lid = getenv("SLURM_LOCALID"), *nn = getenv("SLURM_NNODES");
  int lr = -1, nodes = -1;
  if (lid == NULL) return;
  MKX_Comm_local_rank(c, &lr);
  MKX_Comm_num_nodes(c, &nodes);
  CHECK(lr == atoi(lid), "srun: MKX local rank %d equals SLURM_LOCALID %s", lr,
        lid);
  if (nn)
    CHECK(nodes == atoi(nn), "srun: %d MKX nodes equals SLURM_NNODES %s", nodes,
          nn);
}

static void memory(MKX_Comm c) {
  static const size_t sizes[] = {1, 255, 4096, 1000003};
  int dev = -1;
  MKX_Comm_device(c, &dev);
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    size_t sz = sizes[i];
    void *ptr = NULL;
    int rc = MKX_Alloc_mem(c, sz, &ptr);
    CHECK_RC(rc, MKX_SUCCESS, "MKX_Alloc_mem(%zu)", sz);
    if (!mt_all(rc == MKX_SUCCESS)) continue;
    CHECK(ptr != NULL && ((uintptr_t)ptr % 256) == 0,
          "MKX_Alloc_mem(%zu): non-NULL, 256-byte aligned (%p)", sz, ptr);
    unsigned char *pat = malloc(sz), *back = malloc(sz);
    for (size_t j = 0; j < sz; j++)
      pat[j] = (unsigned char)(j * 131 + mt.rank * 7 + i);
    int same = 1;
    if (dev < 0) {
      memcpy(ptr, pat, sz);
      memcpy(back, ptr, sz);
      same = !memcmp(pat, back, sz);
    } else {
#ifdef MKX_TEST_CUDA
      same = cudaMemcpy(ptr, pat, sz, cudaMemcpyHostToDevice) == cudaSuccess &&
             cudaMemcpy(back, ptr, sz, cudaMemcpyDeviceToHost) == cudaSuccess &&
             !memcmp(pat, back, sz);
#endif
    }
    CHECK(same, "MKX_Alloc_mem(%zu): written and read back (%s)", sz,
          dev < 0 ? "host" : "device");
    free(pat);
    free(back);
    rc = MKX_Free_mem(c, ptr);
    CHECK_RC(rc, MKX_SUCCESS, "MKX_Free_mem(%zu)", sz);
    mt_all(1);
  }
  void *p2 = NULL;
  CHECK(MKX_Alloc_mem(c, 64, NULL) != MKX_SUCCESS,
        "MKX_Alloc_mem(ptr=NULL) fails");
  CHECK(MKX_Alloc_mem(NULL, 64, &p2) == MKX_ERR_INVALID_COMM,
        "MKX_Alloc_mem(comm=NULL) returns MKX_ERR_INVALID_COMM");
  /* ptr NULL on the last rank only: it still joins the size agreement, so
   * every rank fails and the next call pairs up */
  const int bad = mt.size - 1;
  p2 = (void *)&p2;
  int rc = MKX_Alloc_mem(c, 64, mt.rank == bad ? NULL : &p2);
  CHECK_RC(rc,
           mt.rank == bad ? MKX_ERR_NULL_POINTER
           : mt.size > 1  ? MKX_ERR_PEER
                          : MKX_ERR_NULL_POINTER,
           "MKX_Alloc_mem(ptr=NULL on rank %d)", bad);
  CHECK(mt.rank == bad || p2 == NULL, "no memory handed out then");
  rc = MKX_Alloc_mem(c, 64, &p2);
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Alloc_mem(64) afterwards");
  /* freed on another communicator: refused there, and still whole here */
  MKX_Comm other = NULL;
  CHECK_RC(MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL, &other), MKX_SUCCESS,
           "a second communicator");
  if (rc == MKX_SUCCESS && other)
    CHECK_RC(MKX_Free_mem(other, p2), MKX_ERR_INVALID_ARG,
             "MKX_Free_mem on another communicator");
  if (other) MKX_Comm_free(&other);
  if (rc == MKX_SUCCESS)
    CHECK_RC(MKX_Free_mem(c, p2), MKX_SUCCESS, "MKX_Free_mem afterwards");
}

/* An option that decides a collective protocol set differently on the
 * last rank (virtual_node_size would split the ranks into nodes that do
 * not match; tp_overlap would pair different kernels): every rank fails,
 * naming it, without a hang; then a create with the same options works. */
static void options_disagree(const char *key, const char *mine,
                             const char *last) {
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, key, mt.rank == mt.size - 1 ? last : mine);
  MKX_Comm c = NULL;
  int rc = MKX_Comm_create(MPI_COMM_WORLD, info, &c);
  MPI_Info_free(&info);
  CHECK_RC(rc, mt.size > 1 ? MKX_ERR_INVALID_ARG : MKX_SUCCESS,
           "%s differing on the last rank", key);
  if (mt.size > 1)
    CHECK(strstr(MKX_Get_last_error(), key + 4) != NULL,
          "the message "
          "names %s: %s",
          key + 4, MKX_Get_last_error());
  if (rc == MKX_SUCCESS) MKX_Comm_free(&c);
  rc = MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL, &c);
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Comm_create afterwards");
  if (rc == MKX_SUCCESS) MKX_Comm_free(&c);
}

int main(int argc, char **argv) {
  mt_init(&argc, &argv);

  small_calls();
  block_range();
  options_disagree("mkx_virtual_node_size", "1", "2");
  options_disagree("mkx_tp_overlap", "auto", "no");

  MKX_Comm c = NULL;
  int rc = MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL, &c);
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL)");
  if (!mt_all(rc == MKX_SUCCESS)) return mt_finish();
  CHECK(c != NULL, "MKX_Comm_create gives a handle");
  queries(c, "world comm", 0);
  slurm_placement(c);
  memory(c);

  /* a second communicator alive at the same time, virtual nodes of 2 */
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mkx_virtual_node_size", "2");
  MKX_Comm v = NULL;
  rc = MKX_Comm_create(MPI_COMM_WORLD, info, &v);
  MPI_Info_free(&info);
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Comm_create with mkx_virtual_node_size=2");
  if (mt_all(rc == MKX_SUCCESS)) {
    queries(v, "virtual_node_size=2", 2);
    rc = MKX_Comm_free(&v);
    CHECK(rc == MKX_SUCCESS && v == NULL, "MKX_Comm_free(virtual) sets NULL");
  }

  /* a communicator over a sub-communicator (odd world ranks reversed) */
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, mt.rank % 2, -mt.rank, &sub);
  int srank, ssize;
  MPI_Comm_rank(sub, &srank);
  MPI_Comm_size(sub, &ssize);
  MKX_Comm s = NULL;
  rc = MKX_Comm_create(sub, MPI_INFO_NULL, &s);
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Comm_create(split communicator)");
  if (mt_all(rc == MKX_SUCCESS)) {
    int r2 = -1, s2 = -1;
    MKX_Comm_rank(s, &r2);
    MKX_Comm_size(s, &s2);
    CHECK(r2 == srank && s2 == ssize,
          "split comm: rank/size %d/%d equal MPI's %d/%d", r2, s2, srank,
          ssize);
    MKX_Comm_free(&s);
  }
  MPI_Comm_free(&sub);

  /* bad input */
  int x;
  CHECK_RC(MKX_Comm_rank(NULL, &x), MKX_ERR_INVALID_COMM,
           "MKX_Comm_rank(NULL comm) returns MKX_ERR_INVALID_COMM");
  CHECK(*MKX_Get_last_error() != '\0',
        "last error message set after a failure");
  CHECK_RC(MKX_Comm_size(c, NULL), MKX_ERR_NULL_POINTER,
           "MKX_Comm_size(comm, NULL) returns MKX_ERR_NULL_POINTER");
  CHECK_RC(MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL, NULL),
           MKX_ERR_NULL_POINTER,
           "MKX_Comm_create(newcomm=NULL) returns MKX_ERR_NULL_POINTER");
  x = -1;
  CHECK_RC(MKX_Comm_get_async_error(c, &x), MKX_SUCCESS,
           "MKX_Comm_get_async_error");
  CHECK(x == MKX_SUCCESS,
        "no asynchronous error on a fresh communicator "
        "(got %d)",
        x);
  CHECK_RC(MKX_Comm_get_async_error(c, NULL), MKX_ERR_NULL_POINTER,
           "MKX_Comm_get_async_error(comm, NULL)");
  CHECK_RC(MKX_Comm_get_async_error(NULL, &x), MKX_ERR_INVALID_COMM,
           "MKX_Comm_get_async_error(NULL comm)");

  rc = MKX_Comm_free(&c);
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Comm_free");
  CHECK(c == NULL, "MKX_Comm_free sets the handle to NULL");
  CHECK(MKX_Comm_free(&c) == MKX_ERR_INVALID_COMM,
        "MKX_Comm_free of a NULL handle returns MKX_ERR_INVALID_COMM");
  return mt_finish();
}
