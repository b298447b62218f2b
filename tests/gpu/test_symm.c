/* Symmetric memory on the GPU (skips without one): MKX_Alloc_mem buffers
 * and registered cudaMalloc buffers (at an interior offset) are readable
 * and writable from every rank of the node through the peer mappings; a
 * freed and reallocated buffer is mapped anew, not served stale. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include "core/comm.h"
#include "mem/symm.h"
#include "mkx.h"
#include "../common/check.h"
#include "../common/cuda_check.h"

static int rank;

#define CUDA(call) MT_CUDA_AT(rank, call)
#define MKX(call) MT_MKX_AT(rank, call)

enum { WORDS = 1 << 18 };

static void fill(void *dev, int owner, int salt) {
  static unsigned w[WORDS];
  for (int i = 0; i < WORDS; i++)
    w[i] = (unsigned)(owner * 7919 + salt * 104729 + i);
  CUDA(cudaMemcpy(dev, w, sizeof w, cudaMemcpyHostToDevice));
}

/* The first of the WORDS words that is not what `owner` filled with
 * `salt`, or -1. */
static int first_wrong(const unsigned *w, int owner, int salt) {
  for (int i = 0; i < WORDS; i++)
    if (w[i] != (unsigned)(owner * 7919 + salt * 104729 + i)) return i;
  return -1;
}

/* Every node peer's buffer, read through this rank's mapping. */
static void check_peers(const mkx_symm_buf *b, MKX_Comm c, int salt,
                        const char *what) {
  static unsigned w[WORDS];
  for (int q = 0; q < c->size; q++) {
    if (c->place.node_of_rank[q] != c->place.node) continue;
    int lr = c->place.local_rank_of[q];
    if (!CHECK(b->peer[lr] != NULL, "%s: a mapping of rank %d", what, q))
      continue;
    CUDA(cudaMemcpy(w, b->peer[lr], sizeof w, cudaMemcpyDefault));
    const int i = first_wrong(w, q, salt);
    CHECK(i < 0, "%s: rank %d word %d = %u", what, q, i, i < 0 ? 0 : w[i]);
  }
}

/* Free `old` (if any), allocate a buffer, fill it past a 4 KB offset with
 * `salt`, register that interior pointer and check every peer's copy. */
static char *register_raw(MKX_Comm c, char *old, int salt, const char *what) {
  char *raw;
  mkx_symm_buf b;
  if (old) CUDA(cudaFree(old));
  CUDA(cudaMalloc((void **)&raw, sizeof(unsigned) * WORDS + 4096));
  fill(raw + 4096, rank, salt);
  MPI_Barrier(MPI_COMM_WORLD);
  MKX(mkx_symm_register(c, raw + 4096, sizeof(unsigned) * WORDS, &b));
  check_peers(&b, c, salt, what);
  mkx_symm_buf_free(&b);
  MPI_Barrier(MPI_COMM_WORLD);
  return raw;
}

int main(int argc, char **argv) {
  int ndev = 0, size;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    MPI_Finalize();
    return CHECK_SKIP;
  }
  check_set_rank(rank, size);
  MKX_Comm c;
  MKX(MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL, &c));
  mkx_symm_buf b;

  /* MKX_Alloc_mem, read through the peers' mappings. */
  void *sym;
  MKX(MKX_Alloc_mem(c, sizeof(unsigned) * WORDS, &sym));
  fill(sym, rank, 1);
  MPI_Barrier(MPI_COMM_WORLD);
  MKX(mkx_symm_register(c, sym, sizeof(unsigned) * WORDS, &b));
  check_peers(&b, c, 1, "MKX_Alloc_mem");
  MPI_Barrier(MPI_COMM_WORLD);
  /* Write into the next node peer's buffer, then it checks. */
  int next = (c->place.local_rank + 1) % c->place.local_size;
  int prev_rank = -1;
  for (int q = 0; q < size; q++)
    if (c->place.node_of_rank[q] == c->place.node &&
        c->place.local_rank_of[q] ==
            (c->place.local_rank + c->place.local_size - 1) %
                c->place.local_size)
      prev_rank = q;
  fill(b.peer[next], rank, 2);
  CUDA(cudaDeviceSynchronize());
  MPI_Barrier(MPI_COMM_WORLD);
  {
    static unsigned w[WORDS];
    CUDA(cudaMemcpy(w, sym, sizeof w, cudaMemcpyDeviceToHost));
    const int i = first_wrong(w, prev_rank, 2);
    CHECK(i < 0, "peer store from rank %d: word %d = %u", prev_rank, i,
          i < 0 ? 0 : w[i]);
  }
  mkx_symm_buf_free(&b);
  MPI_Barrier(MPI_COMM_WORLD);

  /* A plain cudaMalloc buffer, registered at an interior offset; then
   * freed and allocated again (often at the same address): the new
   * contents must be seen, not a stale mapping. */
  char *raw = register_raw(c, NULL, 3, "registered cudaMalloc");
  raw = register_raw(c, raw, 4, "re-registered after cudaFree");
  /* Many small buffers, each freed before the next (the driver carves
   * them out of the same 2 MiB blocks): each must map, through the stale
   * mappings of the freed ones, and the cache of unused ones stays small. */
  for (int i = 0; i < 40; i++)
    raw = register_raw(c, raw, 5 + i, "fresh small buffer");
  /* The same on a second communicator: the first one's idle mapping of
   * the freed buffer must not block the second's mapping of new memory. */
  MKX_Comm c2;
  MKX(MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL, &c2));
  for (int i = 0; i < 4; i++)
    raw = register_raw(i % 2 ? c : c2, raw, 60 + i, "other communicator");
  MKX(MKX_Comm_free(&c2));
  int cached = mkx_symm_cached(), bound = 16 + c->place.local_size;
  CHECK(cached <= bound,
        "%d cached mappings of users' buffers after 40 "
        "fresh ones (at most %d expected)",
        cached, bound);

  MKX(MKX_Free_mem(c, sym));
  MKX(MKX_Free_mem(c, NULL));
  MKX(MKX_Comm_free(&c));
  CUDA(cudaFree(raw));
  int failed = check_failed(), total = 0;
  MPI_Allreduce(&failed, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    printf("%s test_symm: %d ranks, %d failures\n", total ? "FAIL" : "PASS",
           size, total);
  MPI_Finalize();
  return total ? 1 : 0;
}
