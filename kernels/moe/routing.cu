/*
 * MKX MoE routing on the GPU (C interface in moe_engine.h): the rows of
 * token slots on the owners of their experts (a stable counting sort in
 * three kernels), the gather of token rows into them, the weighted
 * combine back in slot order, and the per-expert counts.
 *
 * Sort, over chunks of CHUNK slots (one block each):
 *   count  per chunk, how many of its slots go to each local expert
 *          (shared-memory atomics: counts, so the order of atomics does not
 *          matter), and the first bad slot (atomicMin: the least index);
 *   scan   one block: for each expert the chunks' counts become the rows
 *          before each chunk, and the experts' totals the group offsets;
 *   rows   per chunk, a slot's row is its expert's offset, plus the rows of
 *          earlier chunks, plus the earlier slots of its chunk with the same
 *          expert.
 * Workspace: [chunks][local_experts] counts (then bases), then
 * local_experts totals.
 */
#include "gemm/gemm_engine.h"
#include "moe/moe_engine.h"
#include "moe/scan.cuh"
#include "fused/flags.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "common/modules.cuh"

namespace {

constexpr int CHUNK = 1024;  // slots per block of count and rows
constexpr int SCAN = 1024;   // threads of the scan
constexpr int MAX_LOCAL = 8192;

struct Route {
  const int32_t *ids;
  int64_t slots;
  int topk, experts, first, local;
  int *work, *offsets, *row_of_slot, *status;
  __host__ __device__ int64_t chunks() const { return (slots + CHUNK - 1) / CHUNK; }
};

/* Local expert of slot i; -1: another rank's; -2: bad (out of range, or a
 * repeat within its token). */
__device__ __forceinline__ int slot_expert(const Route &r, int64_t i) {
  const int e = r.ids[i];
  if (e < 0 || e >= r.experts) return -2;
  for (int64_t q = i - i % r.topk; q < i; ++q)
    if (r.ids[q] == e) return -2;
  const int le = e - r.first;
  return le >= 0 && le < r.local ? le : -1;
}

__global__ void route_count(Route r) {
  extern __shared__ int hist[];
  for (int le = threadIdx.x; le < r.local; le += blockDim.x) hist[le] = 0;
  __syncthreads();
  const int64_t i = (int64_t)blockIdx.x * CHUNK + threadIdx.x;
  if (i < r.slots) {
    const int le = slot_expert(r, i);
    if (le == -2)
      atomicMin(&r.status[0], (int)i);
    else if (le >= 0)
      atomicAdd(&hist[le], 1);
  }
  __syncthreads();
  int *row = r.work + (int64_t)blockIdx.x * r.local;
  for (int le = threadIdx.x; le < r.local; le += blockDim.x) row[le] = hist[le];
}

__global__ void route_scan(Route r) {
  const int64_t nc = r.chunks();
  const int per = (r.local + SCAN - 1) / SCAN;
  const int e0 = min(r.local, (int)threadIdx.x * per), e1 = min(r.local, e0 + per);
  int *totals = r.work + nc * r.local;
  int sum = 0;
  for (int le = e0; le < e1; ++le) {
    int run = 0;
    for (int64_t c = 0; c < nc; ++c) {
      int *w = r.work + c * r.local + le;
      const int v = *w;
      *w = run;
      run += v;
    }
    totals[le] = run;
    sum += run;
  }
  int total;
  int off = mkx::moe::block_exclusive_scan<SCAN>(sum, total);
  for (int le = e0; le < e1; ++le) {
    r.offsets[le] = off;
    off += totals[le];
  }
  if (threadIdx.x == 0) {
    r.offsets[r.local] = total;
    r.status[1] = total;
  }
}

__global__ void route_rows(Route r) {
  __shared__ int sle[CHUNK];
  const int64_t i = (int64_t)blockIdx.x * CHUNK + threadIdx.x;
  const int le = i < r.slots ? slot_expert(r, i) : -1;
  sle[threadIdx.x] = le;
  __syncthreads();
  if (i >= r.slots) return;
  if (le < 0) {
    r.row_of_slot[i] = -1;
    return;
  }
  int before = 0;
  for (int q = 0; q < (int)threadIdx.x; ++q) before += sle[q] == le;
  r.row_of_slot[i] = r.offsets[le] + r.work[(int64_t)blockIdx.x * r.local + le] + before;
}

/* The entry of mkx_moe_rows_at / mkx_moe_outs_at that slot i's row is
 * in (moe_engine.h, mkx_moe_place). */
__device__ __forceinline__ int entry_of(const mkx_moe_place &pl, int64_t i) {
  if (!pl.base) return 0;
  const int q = pl.ids[i] / pl.experts_per_rank;
  return pl.target ? pl.target[q] : q;
}

/* Where slot i's row goes: its entry and row there. */
__device__ __forceinline__ int place_of(const mkx_moe_place &pl, int64_t i, int row, int &rank) {
  rank = entry_of(pl, i);
  if (!pl.base) return row;
  const int e = pl.ids[i];
  return pl.base[e] + row - pl.own_offsets[e];
}

/* One warp per slot: the token's row into its owner's A (16-byte pieces
 * where sizes and addresses allow, else element by element), zeros up to
 * lda. */
/* mkx_moe_release: the w-th row of this rank's walk (every owner's local
 * expert 0, then 1, ...) is row own_offsets[e] + w - order[j] of expert
 * e = q ep + le, j = le ranks + q the last entry with order[j] <= w. */
__device__ __forceinline__ int64_t walk_slot(const mkx_moe_release &rel, const mkx_moe_place &pl, int64_t w) {
  const int n = pl.experts_per_rank * rel.ranks;
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (rel.order[mid] <= w)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int le = lo / rel.ranks, q = lo - le * rel.ranks, e = q * pl.experts_per_rank + le;
  return rel.slot_at[pl.own_offsets[e] + (w - rel.order[lo])];
}

/* Owner q's flag of its local expert le for this rank's rows. */
__device__ __forceinline__ int *ready_flag(const mkx_moe_release &rel, const mkx_moe_place &pl, int e) {
  const int q = e / pl.experts_per_rank, le = e - q * pl.experts_per_rank;
  return rel.ready[q] + le * rel.ranks + rel.rank;
}

/* After a warp's row of slot i is written: counted, and the last row of
 * its expert releases the owner's flag.  Each lane's stores are fenced at
 * GPU scope only: the counter orders them before the last warp's system
 * fence, whose release then covers them too (causality is transitive), so
 * the owner that sees the flag sees every row of it. */
__device__ __forceinline__ void release_row(const mkx_moe_release &rel, const mkx_moe_place &pl, int64_t i, int lane) {
  __threadfence();
  __syncwarp();
  if (lane != 0) return;
  const int e = pl.ids[i];
  const int n = pl.own_offsets[e + 1] - pl.own_offsets[e];
  if (atomicAdd(rel.done + e, 1) != n - 1) return;
  __threadfence_system();
  mkx::sys::st_release(ready_flag(rel, pl, e), *(volatile const int *)rel.epoch);
}

__global__ void gather_rows(const uint8_t *x, int64_t slots, int topk, int64_t hidden, int elem, const int *rows,
                            const float *weight, int origin_rank, const mkx_moe_place pl, mkx_moe_rows_at at,
                            int *dest_row, const mkx_moe_release rel) {
  const int64_t w = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (w >= slots || (pl.gate && *pl.gate)) return;
  /* with release: only the slots with a row, in walk order */
  if (rel.done && w >= pl.own_offsets[pl.experts_per_rank * rel.ranks]) return;
  const int64_t i = rel.done ? walk_slot(rel, pl, w) : w;
  int rank;
  const int row = rows[i] < 0 ? -1 : place_of(pl, i, rows[i], rank);
  if (lane == 0 && dest_row) dest_row[i] = row;
  if (row < 0) return;
  const int64_t t = i / topk;
  uint8_t *a = (uint8_t *)at.a[rank];
  const uint8_t *src = x + t * hidden * elem;
  uint8_t *dst = a + (int64_t)row * at.lda * elem;
  const int64_t bytes = hidden * elem, padded = at.lda * elem;
  const bool vec = bytes % 16 == 0 && padded % 16 == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)a & 15) == 0;
  if (vec) {
    for (int64_t b = 16 * lane; b < bytes; b += 16 * 32)
      *reinterpret_cast<uint4 *>(dst + b) = *reinterpret_cast<const uint4 *>(src + b);
  } else if (elem == 1) {
    for (int64_t h = lane; h < hidden; h += 32) dst[h] = src[h];
  } else if (elem == 2) {
    for (int64_t h = lane; h < hidden; h += 32)
      reinterpret_cast<uint16_t *>(dst)[h] = reinterpret_cast<const uint16_t *>(src)[h];
  } else {
    for (int64_t h = lane; h < hidden; h += 32)
      reinterpret_cast<uint32_t *>(dst)[h] = reinterpret_cast<const uint32_t *>(src)[h];
  }
  for (int64_t b = bytes + lane; b < padded; b += 32) dst[b] = 0;
  if (lane == 0) {
    if (at.scale[rank]) at.scale[rank][row] = weight ? weight[i] : 1.f;
    if (at.origin[rank]) {
      int32_t *o = at.origin[rank] + 3 * (int64_t)row;
      o[0] = origin_rank;
      o[1] = (int32_t)t;
      o[2] = (int32_t)(i - t * topk);
    }
  }
  if (rel.done) release_row(rel, pl, i, lane);
}

/* mkx_moe_release_prepare_run, one block: counters zeroed, the walk's
 * prefix over (le, q) entries, experts without rows released. */
__global__ void release_prepare(const mkx_moe_release rel, const mkx_moe_place pl) {
  const int ep = pl.experts_per_rank, n = ep * rel.ranks;
  const int per = (n + SCAN - 1) / SCAN;
  const int j0 = min(n, (int)threadIdx.x * per), j1 = min(n, j0 + per);
  const bool stop = pl.gate && *pl.gate;
  const int epoch = *(volatile const int *)rel.epoch;
  int sum = 0;
  for (int j = j0; j < j1; ++j) {
    const int le = j / rel.ranks, q = j - le * rel.ranks, e = q * ep + le;
    const int k = pl.own_offsets[e + 1] - pl.own_offsets[e];
    rel.done[e] = 0;
    sum += k;
    if (k == 0 && !stop) mkx::sys::st_release(ready_flag(rel, pl, e), epoch);
  }
  int total;
  int run = mkx::moe::block_exclusive_scan<SCAN>(sum, total);
  for (int j = j0; j < j1; ++j) {
    const int le = j / rel.ranks, q = j - le * rel.ranks, e = q * ep + le;
    rel.order[j] = run;
    run += pl.own_offsets[e + 1] - pl.own_offsets[e];
  }
  if (threadIdx.x == 0) rel.order[n] = total;
}

__global__ void slot_of_rows(const int *row_of_slot, int64_t slots, int *slot_at) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < slots; i += (int64_t)gridDim.x * blockDim.x)
    if (row_of_slot[i] >= 0) slot_at[row_of_slot[i]] = (int)i;
}

template <typename OutT>
__device__ __forceinline__ OutT round_to(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 round_to<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half round_to<__half>(float v) {
  return __float2half_rn(v);
}

/* One block per token: the weighted sum of its slots' rows in slot order
 * (each from its owner's Y). */
template <typename OutT>
__global__ void combine_rows(const mkx_moe_place pl, mkx_moe_outs_at y, const int *rows, const float *weight, int topk,
                             int64_t hidden, OutT *out) {
  const int64_t t = blockIdx.x;
  if (pl.gate && *pl.gate) return;
  for (int64_t h = threadIdx.x; h < hidden; h += blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j < topk; ++j) {
      const int64_t i = t * topk + j;
      const int row = rows[i];
      if (row < 0) continue;
      acc = fmaf(weight[i], y.y[entry_of(pl, i)][(int64_t)row * y.ldy + h], acc);
    }
    out[t * hidden + h] = round_to<OutT>(acc);
  }
}

__global__ void expert_counts(const int *offsets, int local, int64_t *expert_rows, const int *gate) {
  if (gate && *gate == MKX_MOE_GATE_BAD) return;
  for (int le = threadIdx.x; le < local; le += blockDim.x) expert_rows[le] = offsets[le + 1] - offsets[le];
}

/* The first bad input of a run into the host-mapped input record (fused/fused.h),
 * unless one is there. */
__device__ void record_input(int *err, int code, int a, int b, int c, int d, int e) {
  if (mkx::fused::claim_error(err)) mkx::fused::publish_error(err, code, {a, b, c, d, e});
}

__device__ void record_bad_id(int *err, int rank, int slot, int id, int topk, int experts) {
  record_input(err, MKX_MOE_ERR_ID, rank, slot / topk, slot % topk, id, id >= 0 && id < experts);
}

__device__ int clamp_rows(int64_t v) { return v < 0 ? -1 : (int)min(v, (int64_t)0x7FFFFFFF); }

/* The first bad scale the scan found: its array a, index i and value's
 * bits; false if none (the least index of an array's blocks).  By a whole
 * warp, a lane per block, so that an array's results (host-mapped) come in
 * one read; every lane gets the answer. */
static_assert(MKX_FUSED_SCAN_BLOCKS == 32, "a lane per block of the scan");
__device__ bool scan_bad(const mkx_moe_scan &s, int &a, long long &i, int &bits) {
  const int lane = threadIdx.x & 31;
  for (a = 0; a < s.count; ++a) {
    const long long v = ((volatile const long long *)s.first)[a * MKX_FUSED_SCAN_BLOCKS + lane];
    unsigned long long u = v < 0 ? ~0ull : (unsigned long long)v;
#pragma unroll
    for (int o = 16; o; o >>= 1) {
      const unsigned long long w = __shfl_xor_sync(~0u, u, o);
      u = w < u ? w : u;
    }
    if (u != ~0ull) {
      i = (long long)u;
      bits = __float_as_int(s.p[a][i]);
      return true;
    }
  }
  return false;
}

__device__ void record_bad_scale(int *err, int rank, int a, long long i, int bits) {
  record_input(err, MKX_MOE_ERR_SCALE, rank, a, (int)(i >> 32), (int)(unsigned)i, bits);
}

__global__ void verdict_one(const int *status, const int32_t *ids, int topk, int experts, int64_t y_rows, int rank,
                            mkx_moe_scan scan, int *gate, int *err) {
  const int bad = status[0], total = status[1];
  int g = 0, a, bits;
  long long i;
  const bool bad_scale = scan_bad(scan, a, i, bits);  // the whole warp
  if (threadIdx.x) return;
  if (bad_scale) {
    g = MKX_MOE_GATE_BAD;
    record_bad_scale(err, rank, a, i, bits);
  } else if (bad != MKX_MOE_NO_BAD_SLOT) {
    g = MKX_MOE_GATE_BAD;
    record_bad_id(err, rank, bad, ids[bad], topk, experts);
  } else if (y_rows >= 0 && total > y_rows) {
    g = MKX_MOE_GATE_TRUNC;
    record_input(err, MKX_MOE_ERR_TRUNC, rank, total, clamp_rows(y_rows), 0, 0);
  }
  *gate = g;
}

/* This rank's record into slot `rank` of every rank's records area. */
__global__ void send_record(mkx_moe_records r, int ranks, int rank, int experts, const int *own, const int *status,
                            const int32_t *ids, int64_t y_rows, mkx_moe_scan scan) {
  const int64_t stride = MKX_MOE_REC_HEAD + (int64_t)experts;
  const int bad = status[0];
  int a = -1, bits = 0;
  long long i = 0;
  if (threadIdx.x < 32 && !scan_bad(scan, a, i, bits)) a = -1;  // warp 0; thread 0 uses it
  for (int q = 0; q < ranks; ++q) {
    int *d = r.rec[q] + rank * stride;
    if (threadIdx.x == 0) {
      d[0] = bad;
      d[1] = bad != MKX_MOE_NO_BAD_SLOT ? ids[bad] : 0;
      d[2] = clamp_rows(y_rows);
      d[3] = a + 1;
      d[4] = (int)(i >> 32);
      d[5] = (int)(unsigned)i;
      d[6] = bits;
      d[7] = 0;
    }
    for (int e = threadIdx.x; e < experts; e += blockDim.x) d[MKX_MOE_REC_HEAD + e] = own[e + 1] - own[e];
  }
}

/* Every rank's records here (after the meet): see mkx_moe_settle_run.
 * Scratch S[e] = rows of experts before e over all ranks; an owner's
 * experts start at S[d * ep]. */
__global__ void settle_records(int *rec, int ranks, int rank, int experts, int topk, int *offsets, int *base, int *gate,
                               int *err) {
  const int64_t stride = MKX_MOE_REC_HEAD + (int64_t)experts;
  int *S = rec + ranks * stride;
  const int ep = experts / ranks;
  const int per = (experts + SCAN - 1) / SCAN;
  const int e0 = min(experts, (int)threadIdx.x * per), e1 = min(experts, e0 + per);
  int sum = 0;
  for (int e = e0; e < e1; ++e)
    for (int q = 0; q < ranks; ++q) sum += rec[q * stride + MKX_MOE_REC_HEAD + e];
  int total;
  int run = mkx::moe::block_exclusive_scan<SCAN>(sum, total);
  for (int e = e0; e < e1; ++e) {
    S[e] = run;
    for (int q = 0; q < ranks; ++q) run += rec[q * stride + MKX_MOE_REC_HEAD + e];
  }
  if (threadIdx.x == 0) S[experts] = total;
  __syncthreads();
  for (int e = e0; e < e1; ++e) {
    int before = 0; /* rows of expert e from the ranks before this one */
    for (int q = 0; q < rank; ++q) before += rec[q * stride + MKX_MOE_REC_HEAD + e];
    base[e] = S[e] - S[e / ep * ep] + before;
  }
  const int mine = rank * ep;
  for (int le = threadIdx.x; le <= ep; le += blockDim.x) offsets[le] = S[mine + le] - S[mine];
  if (threadIdx.x != 0) return;
  int g = 0;
  for (int q = 0; q < ranks && !g; ++q) {
    const int *h = rec + q * stride;
    if (!h[3]) continue;
    g = MKX_MOE_GATE_BAD;
    record_bad_scale(err, q, h[3] - 1, (long long)h[4] << 32 | (unsigned)h[5], h[6]);
  }
  for (int q = 0; q < ranks && !g; ++q) {
    const int *h = rec + q * stride;
    if (h[0] == MKX_MOE_NO_BAD_SLOT) continue;
    g = MKX_MOE_GATE_BAD;
    record_bad_id(err, q, h[0], h[1], topk, experts);
  }
  for (int d = 0; d < ranks && !g; ++d) {
    const int rows = S[(d + 1) * ep] - S[d * ep], y_rows = rec[d * stride + 2];
    if (y_rows < 0 || rows <= y_rows) continue;
    g = MKX_MOE_GATE_TRUNC;
    record_input(err, MKX_MOE_ERR_TRUNC, d, rows, y_rows, 0, 0);
  }
  *gate = g;
}

__global__ void origin_copy(const int32_t *src, int32_t *dst, const int *offsets, int local, const int *gate) {
  if (gate && *gate) return;
  const int64_t n = 3 * (int64_t)offsets[local];
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

/* One warp per staging row: its segment by binary search, then the row
 * in 16-byte pieces where sizes and addresses allow, else in words. */
__global__ void rows_move(uint8_t *stage, int64_t ld_stage, uint8_t *rows, int64_t ld_rows, int64_t row_bytes,
                          const int *seg_start, const int *seg_row, int nseg, int64_t total, int to_rows) {
  const int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (r >= total) return;
  int lo = 0, hi = nseg - 1; /* the last segment starting at or before r */
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (seg_start[mid] <= r)
      lo = mid;
    else
      hi = mid - 1;
  }
  uint8_t *s = stage + r * ld_stage;
  uint8_t *p = rows + ((int64_t)seg_row[lo] + r - seg_start[lo]) * ld_rows;
  const uint8_t *from = to_rows ? s : p;
  uint8_t *to = to_rows ? p : s;
  if (row_bytes % 16 == 0 && ((uintptr_t)from & 15) == 0 && ((uintptr_t)to & 15) == 0) {
    for (int64_t b = 16 * lane; b < row_bytes; b += 16 * 32)
      *reinterpret_cast<uint4 *>(to + b) = *reinterpret_cast<const uint4 *>(from + b);
  } else {
    for (int64_t b = 4 * lane; b < row_bytes; b += 4 * 32)
      *reinterpret_cast<uint32_t *>(to + b) = *reinterpret_cast<const uint32_t *>(from + b);
  }
}

int launched() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : (int)e;
}

}  // namespace

extern "C" int64_t mkx_moe_route_work_ints(int64_t tokens, int topk, int local_experts) {
  const int64_t chunks = (tokens * topk + CHUNK - 1) / CHUNK;
  return (chunks + 1) * (local_experts > 0 ? local_experts : 1);
}

extern "C" int mkx_moe_route_supported(const mkx_moe_route_desc *d, const char **why) {
  const char *w = nullptr;
  if (!d)
    w = "null descriptor";
  else if (d->tokens < 0 || d->topk < 1 || d->experts < 1 || d->local_experts < 1 || d->first_expert < 0)
    w = "a size is out of range";
  else if (d->local_experts > MAX_LOCAL || d->first_expert + (int64_t)d->local_experts > d->experts)
    w = "more than 8192 local experts, or local experts past the last";
  else if (d->tokens * d->topk >= MKX_MOE_NO_BAD_SLOT)
    w = "tokens x topk is 0x7F7F7F7F or more";
  else if (!d->offsets || !d->status || !d->work || (d->tokens > 0 && (!d->ids || !d->row_of_slot)))
    w = "a null pointer";
  if (why) *why = w ? w : "ok";
  return w ? 0 : 1;
}

extern "C" int mkx_moe_route_run(const mkx_moe_route_desc *d, cudaStream_t s) {
  if (!mkx_moe_route_supported(d, nullptr)) return MKX_GEMM_EINVAL;
  Route r = {d->ids,  d->tokens * d->topk, d->topk,        d->experts, d->first_expert, d->local_experts,
             d->work, d->offsets,          d->row_of_slot, d->status};
  cudaError_t e = cudaMemsetAsync(d->status, 0x7F, sizeof(int), s);
  if (e != cudaSuccess) return (int)e;
  const int64_t nc = r.chunks();
  if (nc > 0) {
    route_count<<<(unsigned)nc, CHUNK, sizeof(int) * (size_t)r.local, s>>>(r);
    if (int rc = launched()) return rc;
  }
  route_scan<<<1, SCAN, 0, s>>>(r);
  if (int rc = launched()) return rc;
  if (nc > 0) route_rows<<<(unsigned)nc, CHUNK, 0, s>>>(r);
  return launched();
}

static bool place_ok(const mkx_moe_place *pl) {
  return pl && pl->slots >= 1 && pl->slots <= MKX_MOE_SLOTS &&
         (!pl->base || (pl->ids && pl->own_offsets && pl->experts_per_rank >= 1)) && (pl->base || pl->slots == 1);
}

static bool release_ok(const mkx_moe_release *rel, const mkx_moe_place *pl) {
  if (!rel) return true;
  if (!pl || !pl->base || pl->target || !rel->done || !rel->order || !rel->slot_at || !rel->epoch || rel->ranks < 1 ||
      rel->ranks > MKX_MOE_MAX_RANKS || rel->rank < 0 || rel->rank >= rel->ranks ||
      (int64_t)pl->experts_per_rank * rel->ranks > MAX_LOCAL)
    return false;
  for (int q = 0; q < rel->ranks; ++q)
    if (!rel->ready[q]) return false;
  return true;
}

extern "C" int mkx_moe_release_prepare_run(const mkx_moe_release *rel, const mkx_moe_place *pl, const int *row_of_slot,
                                           int64_t slots, cudaStream_t s) {
  if (!rel || !release_ok(rel, pl) || !place_ok(pl) || (!row_of_slot && slots > 0)) return MKX_GEMM_EINVAL;
  release_prepare<<<1, SCAN, 0, s>>>(*rel, *pl);
  if (int rc = launched()) return rc;
  const int64_t blocks = (slots + 255) / 256;
  if (slots > 0)
    slot_of_rows<<<(unsigned)(blocks < 1024 ? blocks : 1024), 256, 0, s>>>(row_of_slot, slots, rel->slot_at);
  return launched();
}

extern "C" int mkx_moe_gather_run(const void *x, int64_t tokens, int topk, int64_t hidden, int elem,
                                  const int *row_of_slot, const float *weight, int origin_rank, const mkx_moe_place *pl,
                                  const mkx_moe_rows_at *at, int *dest_row, const mkx_moe_release *rel,
                                  cudaStream_t s) {
  const int64_t slots = tokens * topk;
  if (slots == 0) return 0;
  if ((elem != 1 && elem != 2 && elem != 4) || !at || at->lda < hidden || !x || !row_of_slot || !place_ok(pl) ||
      !release_ok(rel, pl))
    return MKX_GEMM_EINVAL;
  for (int r = 0; r < pl->slots; ++r)
    if (!at->a[r]) return MKX_GEMM_EINVAL;
  const int per_block = 8;  // warps
  const mkx_moe_release none = {};
  gather_rows<<<(unsigned)((slots + per_block - 1) / per_block), 32 * per_block, 0, s>>>(
      (const uint8_t *)x, slots, topk, hidden, elem, row_of_slot, weight, origin_rank, *pl, *at, dest_row,
      rel ? *rel : none);
  return launched();
}

extern "C" int mkx_moe_combine_run(const mkx_moe_place *pl, const mkx_moe_outs_at *y, const int *rows,
                                   const float *weight, int64_t tokens, int topk, int64_t hidden, void *out,
                                   int out_type, cudaStream_t s) {
  if (tokens == 0) return 0;
  if (!y || !rows || !weight || !out || y->ldy < hidden || !place_ok(pl)) return MKX_GEMM_EINVAL;
  for (int r = 0; r < pl->slots; ++r)
    if (!y->y[r]) return MKX_GEMM_EINVAL;
  if (out_type == MKX_GEMM_BF16)
    combine_rows<__nv_bfloat16>
        <<<(unsigned)tokens, 256, 0, s>>>(*pl, *y, rows, weight, topk, hidden, (__nv_bfloat16 *)out);
  else if (out_type == MKX_GEMM_FP16)
    combine_rows<__half><<<(unsigned)tokens, 256, 0, s>>>(*pl, *y, rows, weight, topk, hidden, (__half *)out);
  else
    return MKX_GEMM_EINVAL;
  return launched();
}

extern "C" int mkx_moe_rows_move_run(void *stage, int64_t ld_stage, void *rows, int64_t ld_rows, int64_t row_bytes,
                                     const int *seg_start, const int *seg_row, int nseg, int64_t total, int to_rows,
                                     cudaStream_t s) {
  if (total == 0) return 0;
  if (!stage || !rows || !seg_start || !seg_row || nseg < 1 || total < 0 || row_bytes < 4 || row_bytes % 4 ||
      ld_stage < row_bytes || ld_rows < row_bytes || ld_stage % 4 || ld_rows % 4)
    return MKX_GEMM_EINVAL;
  const int per_block = 8;  // warps
  rows_move<<<(unsigned)((total + per_block - 1) / per_block), 32 * per_block, 0, s>>>(
      (uint8_t *)stage, ld_stage, (uint8_t *)rows, ld_rows, row_bytes, seg_start, seg_row, nseg, total, to_rows);
  return launched();
}

extern "C" int mkx_moe_counts_run(const int *offsets, int local_experts, int64_t *expert_rows, const int *gate,
                                  cudaStream_t s) {
  expert_counts<<<1, 256, 0, s>>>(offsets, local_experts, expert_rows, gate);
  return launched();
}

/* The scan by value, count 0 for none. */
static mkx_moe_scan scan_of(const mkx_moe_scan *scan) {
  mkx_moe_scan s = {};
  if (scan) s = *scan;
  return s;
}

static bool scan_ok(const mkx_moe_scan *scan) {
  if (!scan) return true;
  if (scan->count < 0 || scan->count > MKX_MOE_SCAN_ARRAYS || (scan->count > 0 && !scan->first)) return false;
  return true;  // an array's p is read only at a bad index, which only an array with scales has
}

extern "C" int mkx_moe_verdict_run(const int *status, const int32_t *ids, int topk, int experts, int64_t y_rows,
                                   int rank, const mkx_moe_scan *scan, int *gate, int *err_input, cudaStream_t s) {
  if (!status || !gate || topk < 1 || experts < 1 || !scan_ok(scan)) return MKX_GEMM_EINVAL;
  verdict_one<<<1, 32, 0, s>>>(status, ids, topk, experts, y_rows, rank, scan_of(scan), gate, err_input);
  return launched();
}

extern "C" int64_t mkx_moe_records_ints(int ranks, int experts) {
  return (int64_t)ranks * (MKX_MOE_REC_HEAD + (int64_t)experts) + experts + 1;
}

static bool records_ok(int ranks, int rank, int experts) {
  return ranks >= 1 && ranks <= MKX_MOE_MAX_RANKS && rank >= 0 && rank < ranks && experts >= ranks &&
         experts <= MAX_LOCAL && experts % ranks == 0;
}

extern "C" int mkx_moe_record_run(const mkx_moe_records *r, int ranks, int rank, int experts, const int *own,
                                  const int *status, const int32_t *ids, int64_t y_rows, const mkx_moe_scan *scan,
                                  cudaStream_t s) {
  if (!r || !own || !status || !records_ok(ranks, rank, experts) || !scan_ok(scan)) return MKX_GEMM_EINVAL;
  for (int q = 0; q < ranks; ++q)
    if (!r->rec[q]) return MKX_GEMM_EINVAL;
  send_record<<<1, 1024, 0, s>>>(*r, ranks, rank, experts, own, status, ids, y_rows, scan_of(scan));
  return launched();
}

extern "C" int mkx_moe_settle_run(int *records, int ranks, int rank, int experts, int topk, int *offsets, int *base,
                                  int *gate, int *err_input, cudaStream_t s) {
  if (!records || !offsets || !base || !gate || topk < 1 || !records_ok(ranks, rank, experts)) return MKX_GEMM_EINVAL;
  settle_records<<<1, SCAN, 0, s>>>(records, ranks, rank, experts, topk, offsets, base, gate, err_input);
  return launched();
}

extern "C" int mkx_moe_origin_copy_run(const int32_t *src, int32_t *dst, const int *offsets, int local_experts,
                                       const int *gate, cudaStream_t s) {
  if (!src || !dst || !offsets || local_experts < 1) return MKX_GEMM_EINVAL;
  origin_copy<<<64, 256, 0, s>>>(src, dst, offsets, local_experts, gate);
  return launched();
}
