/*
 * mkx_comm_agree_u64 (src/core/comm_agree.c) on 1-4 ranks: every rank gets
 * the same max / and / or of the ranks' numbers.  The numbers depend on the
 * rank, so a rank that combined only its own, or only some, would differ.
 */
#include <stdint.h>
#include "core/comm.h"
#include "mkx_test.h"

int main(int argc, char **argv) {
  mt_init(&argc, &argv);
  MKX_Comm c = NULL;
  int rc = MKX_Comm_create(MPI_COMM_WORLD, MPI_INFO_NULL, &c);
  CHECK_RC(rc, MKX_SUCCESS, "MKX_Comm_create");
  if (!mt_all(rc == MKX_SUCCESS)) return mt_finish();
  const uint64_t big = (uint64_t)1 << 40; /* more than an int holds */
  uint64_t got = 0;
  rc = mkx_comm_agree_u64(c, big + 7 * (uint64_t)mt.rank, MKX_AGREE_MAX, &got,
                          "max");
  CHECK(rc == MKX_SUCCESS && got == big + 7 * (uint64_t)(mt.size - 1),
        "max of the ranks' numbers: %llu", (unsigned long long)got);
  rc = mkx_comm_agree_u64(c, mt.rank == mt.size - 1 ? 0 : 1, MKX_AGREE_AND,
                          &got, "and");
  CHECK(rc == MKX_SUCCESS && got == 0, "and: the last rank's 0 wins");
  rc = mkx_comm_agree_u64(c, 1, MKX_AGREE_AND, &got, "and");
  CHECK(rc == MKX_SUCCESS && got == 1, "and: every rank 1");
  rc = mkx_comm_agree_u64(c, (uint64_t)1 << mt.rank, MKX_AGREE_OR, &got,
                          "or");
  CHECK(rc == MKX_SUCCESS && got == ((uint64_t)1 << mt.size) - 1,
        "or: every rank's bit (%llx)", (unsigned long long)got);
  rc = mkx_comm_agree_u64(c, mt.rank == 0 ? 2 : 0, MKX_AGREE_OR, &got, "or");
  CHECK(rc == MKX_SUCCESS && got == 2, "or: rank 0's bit alone");
  MKX_Comm_free(&c);
  return mt_finish();
}
