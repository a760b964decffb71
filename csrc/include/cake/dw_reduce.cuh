// The fixed-order combine of dw chunk partials. Canonical order for C chunks: level 1 sums blocks
// of B consecutive chunks (compensated, in chunk order; dw_block_len), level 2 sums the <= 32 block
// results (compensated, in block order) and rounds once to FP32. It depends on the partition alone
// (C, and whether its chunks hold one row), so the ways of running it below (a CTA per tile of
// columns, or one CTA sweeping every column) and the fused form's tiles give the same bits: that is
// what lets the forms agree.
#pragma once
#include <cuda_runtime.h>
#include <cstdint>

#include "cake/program.cuh"
#include "cake/reduce.cuh"

namespace cake {

constexpr int kReduceTile = 32;     // columns per tile at most (one per lane)
constexpr int kMaxBlocks = 32;      // level-1 blocks per column
// Chunks of several rows: a level-1 block holds at least this many (all of them below it). Level 1
// has a block's first 8 loads out at once (dw_block_sum), so up to 8 chunks a block cost it one
// round trip, while level 2 walks a compensated step per block; at 128 chunks, 16 blocks of 8 in
// place of 32 of 4: [1024,1536] 10.46 -> 9.38 us, [1024,2048] 11.49 -> 10.62 (H200, bench/variants.py,
// docs/bench/2026-12-05-h200-r27-reduce-variants.json); with the tiles below, against the previous
// programs, [1024,5120] 20.29 -> 18.48, [4096,6144] 53.15 -> 51.14 (-r27-reduce-final-vs-head.json).
// One-row chunks keep ceil(C / 32): the fused form's tile CTAs walk them as rows, a warp a block,
// and lost 9-35% with half the blocks.
constexpr int kMinBlockChunks = 8;

// Chunks per level-1 block: ceil(C / 32), and at least min(C, kMinBlockChunks) for chunks of
// several rows.
__host__ __device__ __forceinline__ int64_t dw_block_len(int64_t chunks, bool one_row) {
  const int64_t len = (chunks + kMaxBlocks - 1) / kMaxBlocks;
  if (one_row) return len;
  const int64_t least = chunks < kMinBlockChunks ? chunks : kMinBlockChunks;
  return len > least ? len : least;
}

// Level-1 blocks of C chunks (<= kMaxBlocks).
__host__ __device__ __forceinline__ int64_t dw_blocks(int64_t chunks, bool one_row) {
  return (chunks + dw_block_len(chunks, one_row) - 1) / dw_block_len(chunks, one_row);
}

// Level 1: block b of column `col`. Partials were written by other CTAs: read through L2.
__device__ __forceinline__ Compensated dw_block_sum(const double* partials, int64_t hidden,
                                                    int64_t chunks, bool one_row, int64_t b, int64_t col) {
  const int64_t len = dw_block_len(chunks, one_row);
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

// Pair form: one CTA per tile of TILE columns (32, 16 or 8). A warp's lanes take TILE columns of
// 32 / TILE level-1 blocks at once (each load instruction reads 32 / TILE runs of TILE doubles).
template <int TILE>
__global__ void __launch_bounds__(1024) dw_reduce_kernel(const double* partials, float* dw, int64_t hidden,
                                                         int64_t chunks, bool one_row) {
  static_assert(TILE >= 8 && TILE <= kReduceTile && kReduceTile % TILE == 0, "a tile is a run of a warp's lanes");
  constexpr int kSub = 32 / TILE;  // blocks a warp takes at once
  __shared__ double2 blocks[kMaxBlocks][TILE];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int tl = lane % TILE;
  const int64_t col = int64_t(blockIdx.x) * TILE + tl;
  const int64_t nb = dw_blocks(chunks, one_row);
  for (int64_t b = int64_t(warp) * kSub + lane / TILE; b < nb; b += int64_t(warps) * kSub) {
    Compensated s;
    if (col < hidden) s = dw_block_sum(partials, hidden, chunks, one_row, b, col);
    blocks[b][tl] = make_double2(s.s, s.c);
  }
  __syncthreads();
  if (warp == 0 && lane < TILE && col < hidden) dw[col] = dw_final_of(&blocks[0][tl], nb, TILE);
}

// Single form: the last CTA of the main kernel sweeps every column itself.
__device__ __forceinline__ void dw_reduce_cta(const double* partials, float* dw, int64_t hidden,
                                              int64_t chunks, bool one_row) {
  const int64_t nb = dw_blocks(chunks, one_row);
  for (int64_t col = threadIdx.x; col < hidden; col += blockDim.x) {
    DwFinal f;
    for (int64_t b = 0; b < nb; ++b) f.add(dw_block_sum(partials, hidden, chunks, one_row, b, col));
    dw[col] = f.value();
  }
}

// The narrowest tile (8 or 16 columns) whose tiles still fit one CTA an SM, else 32: few columns
// spread over more SMs read the partials sooner (same bits: which CTA or lane sums a column never
// changes them). H200, bench/variants.py against 32-column tiles: [1024,256] 7.66 -> 7.20 us (8),
// [1024,512] 8.82 -> 8.32 (8), [2048,512] 9.70 -> 9.22 (8), [1024,1536] 10.43 -> 10.22 (16),
// [1024,2048] 11.46 -> 11.26 (16); at H 4096 (32 already fits) 8 / 16 tied or lost up to 1.5%
// (docs/bench/2026-12-05-h200-r27-reduce-variants.json).
inline int dw_reduce_tile(int64_t hidden, int64_t sms) {
  for (int tile = 8; tile < kReduceTile; tile *= 2)
    if ((hidden + tile - 1) / tile <= sms) return tile;
  return kReduceTile;
}

// One warp per 32 / TILE level-1 blocks (up to 32 blocks), unless the tiles would then not all fit
// the device at once (at 1024 threads a CTA holds an SM alone, so 32-column tiles of H > 32 * SMs
// would run a second wave: H 5120 and 6144 on 132 SMs; narrower tiles are only chosen where they
// fit): then fewer warps, each taking several blocks. Which warp sums a block never changes its bits.
template <int TILE>
cudaError_t launch_dw_reduce_tiles(const double* partials, float* dw, int64_t hidden, int64_t chunks,
                                   bool one_row, cudaStream_t stream) {
  const int64_t tiles = (hidden + TILE - 1) / TILE;
  const int64_t nb = dw_blocks(chunks, one_row);  // <= kMaxBlocks
  constexpr int kSub = kReduceTile / TILE;
  int warps = static_cast<int>((nb + kSub - 1) / kSub);
  if (warps < 1) warps = 1;
  cudaError_t e = cudaSuccess;
  while (warps > 8 && resident_ctas(reinterpret_cast<const void*>(dw_reduce_kernel<TILE>), warps * 32, 0, &e) < tiles) {
    if (e != cudaSuccess) return e;
    warps = (warps + 1) / 2;
  }
  dw_reduce_kernel<TILE><<<static_cast<unsigned>(tiles), warps * 32, 0, stream>>>(partials, dw, hidden, chunks, one_row);
  return cudaGetLastError();
}

inline cudaError_t launch_dw_reduce(const double* partials, float* dw, int64_t hidden,
                                    int64_t chunks, bool one_row, cudaStream_t stream) {
  switch (dw_reduce_tile(hidden, device_sms())) {
    case 8: return launch_dw_reduce_tiles<8>(partials, dw, hidden, chunks, one_row, stream);
    case 16: return launch_dw_reduce_tiles<16>(partials, dw, hidden, chunks, one_row, stream);
    default: return launch_dw_reduce_tiles<kReduceTile>(partials, dw, hidden, chunks, one_row, stream);
  }
}

}  // namespace cake
