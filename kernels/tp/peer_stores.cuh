/* Tensor maps of every node rank's C, and an extra store hook
 * (tma_store_subtile's Extra, kernels/gemm/gemm_engine.cuh) that writes
 * each staged chunk into every peer's C as well: the allreduce's rows
 * reach all ranks with the GEMM's own stores. */
#pragma once

#include <cuda.h>
#include "gemm/gemm_engine.cuh"
#include "tp/tp.h"

namespace mkx {
namespace tp {

/* Every rank's C (this rank's entry unused). */
struct PeerMaps {
  CUtensorMap c[MKX_FUSED_MAX];
};

/* A staged chunk of C into every peer's C. */
struct PeerStores {
  const PeerMaps *maps;
  int size, rank;
  __device__ __forceinline__ void operator()(const void *src, int col, int row) const {
    for (int q = 0; q < size; ++q)
      if (q != rank) mkx::ptx::tma_store_2d(&maps->c[q], src, col, row);
  }
};

}  // namespace tp
}  // namespace mkx
