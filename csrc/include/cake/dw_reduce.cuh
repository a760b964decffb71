// The fixed-order combine of dw chunk partials. Canonical order for C chunks: level 1 sums blocks
// of B = ceil(C/32) consecutive chunks (compensated, in chunk order); level 2 sums the <= 32 block
// results (compensated, in block order) and rounds once to FP32. It depends on C alone, so the two
// ways of running it below (a CTA per 32-column tile, or one CTA sweeping every column) give the
// same bits: that is what lets the pair and single forms agree.
#pragma once
#include <cuda_runtime.h>
#include <cstdint>

#include "cake/program.cuh"
#include "cake/reduce.cuh"

namespace cake {

constexpr int kReduceTile = 32;     // columns per tile (one per lane)
constexpr int kMaxBlocks = 32;      // level-1 blocks per column

__host__ __device__ __forceinline__ int64_t dw_block_len(int64_t chunks) {
  return (chunks + kMaxBlocks - 1) / kMaxBlocks;
}

// Level-1 blocks of C chunks (<= kMaxBlocks).
__host__ __device__ __forceinline__ int64_t dw_blocks(int64_t chunks) {
  return (chunks + dw_block_len(chunks) - 1) / dw_block_len(chunks);
}

// Level 1: block b of column `col`. Partials were written by other CTAs: read through L2.
__device__ __forceinline__ Compensated dw_block_sum(const double* partials, int64_t hidden,
                                                    int64_t chunks, int64_t b, int64_t col) {
  const int64_t len = dw_block_len(chunks);
  const int64_t c0 = b * len;
  const int64_t c1 = c0 + len < chunks ? c0 + len : chunks;
  Compensated acc;
#pragma unroll 8
  for (int64_t c = c0; c < c1; ++c) acc.add(__ldcg(partials + c * hidden + col));
  return acc;
}

// Level 2 over the block results, in block order.
struct DwFinal {
  Compensated total;
  double comp = 0.0;
  __device__ __forceinline__ void add(const Compensated& block) {
    total.add(block.s);
    comp += block.c;
  }
  __device__ __forceinline__ float value() const { return float(total.s + (total.c + comp)); }
};

// Level 2 over `nb` block results kept in shared memory as (s, c) pairs, `stride` apart.
__device__ __forceinline__ float dw_final_of(const double2* blocks, int64_t nb, int64_t stride) {
  DwFinal f;
  for (int64_t b = 0; b < nb; ++b) {
    Compensated s;
    s.s = blocks[b * stride].x;
    s.c = blocks[b * stride].y;
    f.add(s);
  }
  return f.value();
}

// Pair form: one CTA per 32-column tile, warps spread over the blocks.
__global__ void __launch_bounds__(1024) dw_reduce_kernel(const double* partials, float* dw,
                                                         int64_t hidden, int64_t chunks) {
  __shared__ double2 blocks[kMaxBlocks][kReduceTile];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t col = int64_t(blockIdx.x) * kReduceTile + lane;
  const int64_t nb = dw_blocks(chunks);
  for (int64_t b = warp; b < nb; b += warps) {
    Compensated s;
    if (col < hidden) s = dw_block_sum(partials, hidden, chunks, b, col);
    blocks[b][lane] = make_double2(s.s, s.c);
  }
  __syncthreads();
  if (warp == 0 && col < hidden) dw[col] = dw_final_of(&blocks[0][lane], nb, kReduceTile);
}

// Single form: the last CTA of the main kernel sweeps every column itself.
__device__ __forceinline__ void dw_reduce_cta(const double* partials, float* dw, int64_t hidden,
                                              int64_t chunks) {
  const int64_t nb = dw_blocks(chunks);
  for (int64_t col = threadIdx.x; col < hidden; col += blockDim.x) {
    DwFinal f;
    for (int64_t b = 0; b < nb; ++b) f.add(dw_block_sum(partials, hidden, chunks, b, col));
    dw[col] = f.value();
  }
}

// One warp per level-1 block, up to 32, unless the tiles would then not all fit the device at
// once (at 1024 threads a CTA holds an SM alone, so H > 32 * SMs would run a second wave: H 5120
// and 6144 on 132 SMs): then fewer warps, each taking several blocks (b += warps). Which warp sums
// a block never changes its bits.
inline cudaError_t launch_dw_reduce(const double* partials, float* dw, int64_t hidden,
                                    int64_t chunks, cudaStream_t stream) {
  const int64_t tiles = (hidden + kReduceTile - 1) / kReduceTile;
  const int64_t nb = dw_blocks(chunks);
  int warps = static_cast<int>(nb < 1 ? 1 : nb);  // nb <= kMaxBlocks
  cudaError_t e = cudaSuccess;
  while (warps > 8 && resident_ctas(reinterpret_cast<const void*>(dw_reduce_kernel), warps * 32, 0, &e) < tiles) {
    if (e != cudaSuccess) return e;
    warps = (warps + 1) / 2;
  }
  dw_reduce_kernel<<<static_cast<unsigned>(tiles), warps * 32, 0, stream>>>(partials, dw, hidden, chunks);
  return cudaGetLastError();
}

}  // namespace cake
