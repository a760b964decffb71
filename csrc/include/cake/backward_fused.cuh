// Backward form "fused", for partitions of one-row chunks (few rows): the whole backward in one
// launch of two kinds of CTA, neither waiting for the other.
// - Tile CTAs sum dw for 64 columns straight from g, x and rstd: a one-row chunk's partial is its
//   row's g*x*rstd, formed as the engines form it, and the tile runs the reduce kernel's two
//   levels in the reduce kernel's order, so dw has the pair form's bits without partials in memory.
//   Past 128 rows at widths of few tiles a tile runs on a cluster of CTAs (fused_tile_cluster):
//   the same sums in the same order, spread over more SMs.
// - Row CTAs compute dx alone, in straight-line code: no chunk loop, no next-row loads, no FP64
//   accumulators.
// - One row (T = 1) of up to 1536 columns runs neither: one CTA of the row's threads writes dx and
//   dw (backward_row_kernel).
// Few rows are latency, not bandwidth: the pair form's second launch and its partials' round trip
// through L2 are what this form removes.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <cstdint>
#include <utility>

#include "cake/args.cuh"
#include "cake/backward_rows.cuh"
#include "cake/dw_reduce.cuh"
#include "cake/layout.cuh"
#include "cake/program.cuh"
#include "cake/reduce.cuh"
#include "cake/rows.cuh"
#include "cake/vec.cuh"

namespace cake {

// Columns per lane of a tile CTA: 2 (one 4-byte load per input and row), so a width has H / 64
// tiles. Against 4 columns per lane (H / 128 tiles of twice the rows' bytes each) it was faster at
// every width from 16 rows on (H200, bench/partition.py --fused: [16,512] 3.02 -> 2.46 us, [64,256]
// 4.58 -> 3.74, [256,4096] 9.31 -> 8.19, [256,6144] 11.70 -> 10.85) and within 0.16 us either way at
// 1-4 rows (docs/bench/2026-12-03-h200-r16-fused-tiles.json, -r16-fused-edges.json).
constexpr int kTileLaneCols = 2;
constexpr int kTileCols = 32 * kTileLaneCols;  // columns per tile CTA
// Rows a lane loads before it sums them. A level-1 block holds ceil(rows / 32) rows, so up to 128
// rows 4 cover a block in one round of loads; past that 8 halve the rounds ([256,2048] 8.05 ->
// 7.28 us, [384,4096] 11.01 -> 10.50), while at <= 128 rows 8 cost 0.2-0.5 us more than 4. Fewer
// where the row CTAs' threads leave fewer registers: 768 threads at H 6144 (4 throughout), the
// generic program's 1024 (2).
__host__ __device__ constexpr int tile_depth(int hc, bool deep) { return hc == 0 ? 2 : (deep && hc < 6144 ? 8 : 4); }
// The deep rounds once a level-1 block holds more rows than a shallow round loads.
template <int HC>
__host__ __device__ __forceinline__ bool tile_deep(int64_t rows) { return dw_block_len(rows, true) > tile_depth(HC, false); }

// Tile CTAs of a fused launch: one per kTileCols columns, whatever the rows (even one row's dw is
// FP64 work worth spreading over SMs: a row CTA that also summed it ran 1.35x longer at [1,4096]).
__host__ __device__ __forceinline__ int64_t fused_tiles(int64_t hidden) { return (hidden + kTileCols - 1) / kTileCols; }

// Shared memory of a tile CTA: the level-1 results, [blocks][kTileCols] (s, c) pairs; blocks
// = dw_blocks(rows, true) <= kMaxBlocks.
__host__ __device__ __forceinline__ size_t fused_tile_smem(int64_t blocks) {
  return size_t(blocks) * kTileCols * sizeof(double2);
}

// A lane's kTileLaneCols columns of one row (g, x as BF16 pairs) and the row's rstd.
struct TileRow {
  uint32_t g, x;
  float rstd;
  __device__ __forceinline__ static TileRow load(const BackwardArgs& a, int64_t row, int64_t col) {
    TileRow t;
    t.g = load_pair(a.g + a.gv.flat_offset(row) + col);
    t.x = load_pair(a.x + a.xv.flat_offset(row) + col);
    t.rstd = __ldg(a.rstd + row);
    return t;
  }
};

// A tile CTA's warps take the level-1 blocks round-robin: BPW blocks per warp where a CTA of
// `cta_threads` has fewer warps than kMaxBlocks (16 at H 256 / 512 / 2048 / 4096, 12 at 1536, 20-24
// at 5120 / 6144; 32 in H 4096's two-row CTAs), their rows' loads out together (BPW x DEPTH rows in
// flight per lane) so that the warp waits for one round of loads, not BPW.
__host__ __device__ constexpr int tile_blocks_per_warp(int cta_threads) {
  return (kMaxBlocks + cta_threads / 32 - 1) / (cta_threads / 32);
}

// The cluster barrier in its two halves (every thread of every CTA of the cluster calls both).
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
// The wait where a warp's lanes may be apart (a width's last tile, part of its lanes past H).
__device__ __forceinline__ void cluster_wait_diverged() { asm volatile("barrier.cluster.wait.acquire;" ::: "memory"); }

// Level 1 of a lane's kTileLaneCols columns over the blocks first, first + stride, ... (BPW of
// them; none past nb), side by side, their (s, c) pairs posted to `blocks` ([block][kTileCols]):
// DEPTH rows of each block's loads go out before their sums (a warp walks len rows per block),
// each block summed in its own row order, so no bit depends on BPW or on which warp sums it.
template <int DEPTH, int BPW, bool WAIT = false>
__device__ __forceinline__ void tile_level1(const BackwardArgs& a, int64_t col, int lane, int64_t first,
                                            int64_t stride, int64_t len, int64_t nb, double2* blocks) {
  Compensated s[BPW][kTileLaneCols];
  int64_t r0[BPW], r1[BPW];
#pragma unroll
  for (int j = 0; j < BPW; ++j) {
    const int64_t b = first + int64_t(j) * stride;
    r0[j] = b * len;
    r1[j] = b >= nb ? r0[j] : (r0[j] + len < a.rows ? r0[j] + len : a.rows);  // past nb: no rows
  }
  for (int64_t k = 0; k < len; k += DEPTH) {
    TileRow t[BPW][DEPTH];
#pragma unroll
    for (int j = 0; j < BPW; ++j)
#pragma unroll
      for (int i = 0; i < DEPTH; ++i)
        if (r0[j] + k + i < r1[j]) t[j][i] = TileRow::load(a, r0[j] + k + i, col);
#pragma unroll
    for (int j = 0; j < BPW; ++j) {
#pragma unroll
      for (int i = 0; i < DEPTH; ++i) {
        if (r0[j] + k + i < r1[j]) {
          float gf[kTileLaneCols], xf[kTileLaneCols];
          unpack(t[j][i].g, gf);
          unpack(t[j][i].x, xf);
          const double rd = double(t[j][i].rstd);
#pragma unroll
          for (int e = 0; e < kTileLaneCols; ++e) s[j][e].add(dw_term(gf[e], xf[e], rd, 0.0));  // a one-row chunk's partial
        }
      }
    }
  }
  if constexpr (WAIT) cluster_wait_diverged();  // split tiles: `blocks` is the cluster's first CTA's
#pragma unroll
  for (int j = 0; j < BPW; ++j) {
    const int64_t b = first + int64_t(j) * stride;
    if (b < nb) {
#pragma unroll
      for (int e = 0; e < kTileLaneCols; ++e)
        blocks[b * kTileCols + lane * kTileLaneCols + e] = make_double2(s[j][e].s, s[j][e].c);
    }
  }
}

// Level 2 of the tile at column `base`: the blocks in block order, a column per thread.
__device__ __forceinline__ void tile_level2(const BackwardArgs& a, int64_t base, const double2* blocks, int64_t nb) {
  for (int c = threadIdx.x; c < kTileCols && base + c < a.hidden; c += blockDim.x)
    a.dw[base + c] = dw_final_of(blocks + c, nb, kTileCols);
}

// dw of one tile in one CTA: level 1 (blocks of dw_block_len(rows, true) consecutive rows, compensated
// in row order) spread over the CTA's warps, each lane on kTileLaneCols adjacent columns, a
// warp's BPW blocks side by side; level 2 (the blocks in block order) a column per thread. Every
// thread of the CTA calls it (one CTA barrier inside; a CTA sums one tile, so `blocks` is never
// reused).
template <int DEPTH, int BPW>
__device__ __forceinline__ void fused_dw_tile(const BackwardArgs& a, int64_t tile, double2* blocks) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t base = tile * kTileCols;
  const int64_t col = base + int64_t(lane) * kTileLaneCols;
  const int64_t len = dw_block_len(a.rows, true), nb = dw_blocks(a.rows, true);
  if (col < a.hidden) {  // H is a multiple of 8: a lane's columns are all in or all out
    for (int64_t b0 = warp; b0 < nb; b0 += int64_t(warps) * BPW)
      tile_level1<DEPTH, BPW>(a, col, lane, b0, warps, len, nb, blocks);
  }
  __syncthreads();
  tile_level2(a, base, blocks, nb);
}

// dw of one tile split over a cluster of `csize` CTAs (rank `rank`): the cluster's warps take
// the level-1 blocks in turn (warp w of rank r first takes block w * csize + r), each CTA posts
// its blocks' (s, c) pairs into the shared memory of the cluster's first CTA, and that CTA runs
// level 2. The same sums in the same order as fused_dw_tile: a block's rows, and the blocks, never
// change with the split; what it buys is the tile's FP64 work and loads spread over csize SMs.
// The launcher makes csize * warps * BPW >= the blocks, so one pass of level 1 covers them. The
// caller arrived at the cluster barrier (relaxed) on entry, so the wait before the posts (which
// makes sure the first CTA has started) costs nothing by then.
template <int DEPTH, int BPW>
__device__ __forceinline__ void fused_dw_tile_split(const BackwardArgs& a, int64_t tile, double2* blocks,
                                                    int rank, int csize) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t base = tile * kTileCols;
  const int64_t col = base + int64_t(lane) * kTileLaneCols;
  const int64_t len = dw_block_len(a.rows, true), nb = dw_blocks(a.rows, true);
  const int64_t first = int64_t(warp) * csize + rank, stride = int64_t(warps) * csize;
  if (col < a.hidden && first < nb) {  // lanes past H leave a warp of the last tile apart
    tile_level1<DEPTH, BPW, true>(a, col, lane, first, stride, len, nb,
                                  cooperative_groups::this_cluster().map_shared_rank(blocks, 0));
  } else {
    cluster_wait_diverged();
  }
  __syncwarp();  // the aligned barrier below wants the warp's lanes together again
  cluster_arrive();
  cluster_wait();
  if (rank == 0) tile_level2(a, base, blocks, nb);
}

// dw of a one-row call from its row's slices: g*x*rstd rounded once. The tiles form that product
// exactly in FP64 and round it once; g*x of two BF16 values is exact in FP32 and its product with
// rstd is correctly rounded by one FP32 fma, so that is the same value (+ 0.0 turns a -0.0
// product into the +0.0 that the FP64 sum, starting from +0.0, returns). Where g*x or rstd is not
// finite the tiles' compensated sums make NaN of an infinity: those elements take the tiles' own
// FP64 steps, for the same bits.
__device__ __forceinline__ float one_row_dw(float g, float x, float r) {
  const float gx = g * x;
  if (isfinite(gx) && isfinite(r)) return __fmaf_rn(gx, r, 0.0f);
  Compensated s;
  s.add(dw_term(g, x, double(r), 0.0));
  DwFinal f;
  f.add(s);
  return f.value();
}

// The one row's dw = g*x*rstd (exact products, one rounding), each lane's 8 columns a slice as
// two 16-byte stores (dw is 16-byte aligned: the binding checks it), with one finiteness test a
// slice: the FP64 fallback of one_row_dw only where a product or rstd is not finite. Against the
// earlier form (a test a column, the warp's columns staged through shared memory into 4-byte stores
// after dx's): [1,256] 1.76 -> 1.63 us, [1,512] 1.70 -> 1.57, [1,1536] 1.84 -> 1.65, same bits
// (H200, bench/variants.py, docs/bench/2026-12-06-h200-r29-one-row.json).
template <int VMAX, class Geom>
__device__ __forceinline__ void store_row_dw(const Geom& G, float* dw, const Pack8 (&g)[VMAX],
                                             const Pack8 (&x)[VMAX], float r) {
#pragma unroll
  for (int k = 0; k < VMAX; ++k) {
    if (k >= G.vpt) break;
    if (G.owns(k)) {
      float gf[kVec], xf[kVec], o[kVec];
      unpack(g[k], gf);
      unpack(x[k], xf);
#pragma unroll
      for (int e = 0; e < kVec; ++e) o[e] = gf[e] * xf[e];  // g*x, exact
      // One test for the slice's 8 products: the straight-line fma where all are finite.
      bool finite = isfinite(r);
#pragma unroll
      for (int e = 0; e < kVec; ++e) finite &= isfinite(o[e]);
      if (finite) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) o[e] = __fmaf_rn(o[e], r, 0.0f);
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e) o[e] = one_row_dw(gf[e], xf[e], r);
      }
      store_float8(dw + G.col(k), o);
    }
  }
}

// f(RowIndex<k>{}) for k = 0 .. K-1 in order, unrolled at compile time: arrays indexed by it are
// scalars from the start, so one row (K = 1) compiles to the code of a scalar row, which a
// `#pragma unroll` loop over the row indices did not (its SASS moved, and [640,256] / [256,5120]
// ran 1.4-4.5% slower on an H100, bench/variants.py, docs/performance.md round 41).
template <int I>
struct RowIndex {
  __host__ __device__ constexpr operator int() const { return I; }
};
template <class F, int... I>
__device__ __forceinline__ void for_each_row_index(F&& f, std::integer_sequence<int, I...>) {
  (f(RowIndex<I>{}), ...);
}
template <int K, class F>
__device__ __forceinline__ void for_rows(F&& f) {
  for_each_row_index(f, std::make_integer_sequence<int, K>{});
}

// dx of the rows of row CTA `cta`: G.rpc row groups of K rows each (fused_group_rows), group g's
// k-th row at (cta * K + k) * rpc + g, so that K = 1 is one row a group. The K rows' loads go out
// together and the weights are loaded once; each row's sums are its own, so K moves no bit.
// ROW_DW: the call's one row, whose dw the row's threads write too (backward_row_kernel).
template <int HC, typename WT, bool RES, bool ROW_DW = false, int K = 1, class Geom>
__device__ __forceinline__ void fused_dx_rows(const BackwardArgs& a, const Geom& G, int64_t cta, float* slots) {
  static_assert(!ROW_DW || K == 1, "the one-row kernel holds one row");
  constexpr int VMAX = Geom::template vmax<HC>();
  constexpr int N = BackwardSources<RES>::N;
  constexpr bool kWRegs = HC > 0;
  const WT* wp = static_cast<const WT*>(a.w);
  const BackwardSources<RES> in(a);
  int64_t row[K];
  bool live[K];
  for_rows<K>([&](auto k) {
    row[k] = (cta * K + k) * G.rpc + G.group;
    live[k] = row[k] < a.rows;
  });
  // Every load goes out before any loaded value is used: rstd, the rows, the weights last. With the
  // weights first, ptxas put a BF16 weight's unpacking before rstd's load (and g_residual's), and
  // the warp waited out the weight's DRAM round trip before issuing them (bench/load_order.py).
  // H100, bench/variants.py against the weights first, same bits: [1,256] 1.86 -> 1.73 us, [1,512]
  // 1.84 -> 1.63, [1,1536] 1.79 -> 1.76, 16-256 rows 0.99-1.00x (docs/performance.md, round 45).
  float r[K], dot[K];
  for_rows<K>([&](auto k) { r[k] = live[k] ? a.rstd[row[k]] : 0.f; });
  RowData<VMAX, N> d[K];
  for_rows<K>([&](auto k) { d[k].template load<true>(G, in.src, in.views, row[k], live[k]); });
  WeightSlice<WT> w[Geom::template wregs<HC>()];
  G.template load_weights<kWRegs>(wp, w);
  for_rows<K>([&](auto k) { dot[k] = live[k] ? slice_dot<kWRegs>(G, d[k].v[0], d[k].v[1], w, wp) : 0.f; });
  // The one row's dw before the dot's all-reduce: its stores are in flight while the warps reduce.
  if constexpr (ROW_DW) store_row_dw(G, a.dw, d[0].v[0], d[0].v[1], r[0]);
  for_rows<K>([&](auto k) { dot[k] = row_allsum(dot[k], G.warps, &slots[(k * G.rpc + G.group) * G.warps]); });
  for_rows<K>([&](auto k) {
    if (!live[k]) return;
    double unused[VMAX][kVec];  // no dw here: the tiles sum it
    slice_dx_dw<kWRegs, RES, false>(G, a, row[k], d[k].v[0], d[k].v[1], d[k].v[N - 1], r[k], dot[k], w, wp, unused);
  });
}

// Work items: the tiles first (the longer chains), then the row CTAs of blockDim.x / row threads
// rows each. One item per CTA, item0 + blockIdx.x, with no grid-stride loop: the loop, though
// its grid held every item, kept 72-108 registers live across items where one item takes 56-80,
// and cost the few-row calls 5-10% ([1,4096] 2.18 -> 1.95 us, [16,2048] 2.59 -> 2.40, [256,5120]
// 8.67 -> 8.16; H200, bench/variants.py, docs/bench/2026-12-03-h200-r19-fused-one-item.json). A
// grid larger than one launch takes, or capped (tests), is split into successive launches over
// consecutive items: the items are independent, so no bit depends on the split.
// Bounds of a full CTA of the launch (CTA: fused_cta_threads at the launch's rows): the fused grid
// stays within one wave at one CTA per SM, so registers are not worth trading for occupancy here.
// SPLIT: the tiles' items come csize to a tile (a cluster of csize CTAs, fused_dw_tile_split);
// the launch's clusters are of csize CTAs, item0 is a multiple of csize, so a cluster holds one
// tile or row CTAs only. K: rows a row group (fused_group_rows).
template <int HC, typename WT, bool RES, int DEPTH, int CTA, int BPW, bool SPLIT = false, int K = 1>
__global__ void __launch_bounds__(CTA, 1)
    backward_fused_kernel(const BackwardArgs a, const int64_t item0) {
  using Geom = RowGeom<false>;
  Geom G = Geom::make<HC>(a.hidden);
  G.rpc = static_cast<int>(blockDim.x) / G.threads;
  __shared__ float slots[K * kMaxCtaThreads / 32];
  extern __shared__ double2 tile_blocks[];
  const int64_t tiles = fused_tiles(a.hidden);
  const int64_t item = item0 + blockIdx.x;
  if constexpr (SPLIT) {
    const int csize = static_cast<int>(cooperative_groups::this_cluster().num_blocks());
    if (item < tiles * csize) {
      cluster_arrive_relaxed();
      fused_dw_tile_split<DEPTH, BPW>(a, item / csize, tile_blocks,
                                      static_cast<int>(cooperative_groups::this_cluster().block_rank()), csize);
    } else {
      fused_dx_rows<HC, WT, RES, false, K>(a, G, item - tiles * csize, slots);
    }
  } else {
    if (item < tiles) {
      fused_dw_tile<DEPTH, BPW>(a, item, tile_blocks);
    } else {
      fused_dx_rows<HC, WT, RES, false, K>(a, G, item - tiles, slots);
    }
  }
}

// `kernel` over its items in clusters of `csize` CTAs: one launch, or successive launches past a
// CTA cap (tests) of whole clusters each (the caller keeps csize within the cap).
inline cudaError_t launch_fused_items(void (*kernel)(BackwardArgs, int64_t), const BackwardArgs& a, int64_t items,
                                      int threads, size_t smem, int csize = 1) {
  items = (items + csize - 1) / csize * csize;
  const int64_t per = launch_cta_limit(a.max_ctas) / csize * csize;
  for (int64_t i0 = 0; i0 < items; i0 += per) {
    const int64_t n = items - i0 < per ? items - i0 : per;
    cudaLaunchAttribute cluster = {};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim = {static_cast<unsigned>(csize), 1, 1};
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(n));
    cfg.blockDim = dim3(static_cast<unsigned>(threads));
    cfg.dynamicSmemBytes = smem;
    cfg.stream = a.stream;
    cfg.attrs = &cluster;
    cfg.numAttrs = csize > 1 ? 1 : 0;  // one CTA a tile: a plain launch
    cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, a, i0);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

// CTAs per tile where the call does not choose (a.tile_cluster == 0), on the H200 (bench/partition.py
// --fused --tile-clusters 1,2,4,8, docs/bench/2026-12-04-h200-r21-tile-clusters.json): the most, up to
// 8, that leave each CTA >= 32 rows of its tile and the tiles' CTAs <= kSplitTileCtas. Below 128 rows
// (blocks of <= 3 rows) and where the rows are <= 4 per tile, none: the cluster's launch and barrier
// cost more than the chain they cut ([64,256] 3.23 us in one CTA a tile, 3.62-3.84 split; [96,1536]
// 4.03, 4.10 in pairs; [128,2048] 4.13, 4.38 in pairs). Where it splits: [128,256] 4.03 -> 3.78 us
// (4 CTAs a tile), [256,256] 5.57 -> 4.34 (8; 4.22 in 4), [512,512] 8.80 -> 5.50 (8), [256,1536] 6.66
// -> 5.54 (4), [512,2048] 9.74 -> 7.17 (2). From H 4096 the tiles alone fill half the SMs and every
// split was slower ([512,4096] 11.26 us in one CTA a tile, 12.96 in pairs, 17.30 in fours).
// The generic program (unmeasured) splits only when asked.
constexpr int kSplitMinRows = 128;
constexpr int kSplitTileCtas = 96;
inline int fused_tile_cluster(int64_t rows, int64_t tiles) {
  if (rows < kSplitMinRows || rows <= 4 * tiles) return 1;
  int c = 1;
  while (c < kMaxTileCluster && 2 * c * 32 <= rows && 2 * c * tiles <= kSplitTileCtas) c *= 2;
  return c;
}

// CTAs per tile: the test's or measurement's a.tile_cluster, else the rule (fused_tile_cluster;
// 1 in the generic program); 1 where the cap holds fewer CTAs or one pass of level 1 would not
// cover the blocks.
inline int fused_cluster_of(const BackwardArgs& a, bool rule, int warps, int split_bpw) {
  int c = a.tile_cluster > 0 ? a.tile_cluster : (rule ? fused_tile_cluster(a.rows, fused_tiles(a.hidden)) : 1);
  if (c > kMaxTileCluster || (a.max_ctas > 0 && a.max_ctas < c)) c = 1;
  if (c > 1 && int64_t(c) * warps * split_bpw < dw_blocks(a.rows, true)) c = 1;
  return c;
}

// Blocks per warp of the split tiles: the blocks over the warps of the smallest cluster (two CTAs).
__host__ __device__ constexpr int split_blocks_per_warp(int cta_threads) {
  return (kMaxBlocks + 2 * (cta_threads / 32) - 1) / (2 * (cta_threads / 32));
}

// One launch: row CTAs of min(rows, fused_rows_per_cta) rows, so that no row group idles, in CTAs
// of at most CTA threads (the tiles' CTAs too); the tiles' depth by the rows (tile_deep). A tile's
// warps take tile_blocks_per_warp blocks each once the blocks outnumber them (against one block at a time: [64,1536] 4.42 -> 3.74 us, [128,4096] 5.38 ->
// 4.77, [64,5120] 4.48 -> 3.98, [384,6144] 13.02 -> 12.29; H200, bench/variants.py,
// docs/bench/2026-12-03-h200-r19-tile-blocks.json); while they fit (fewer than 32 rows) the
// one-block kernel, whose smaller code was 0.2 us faster at 16 rows. The deep rounds (past 128
// rows: 26-32 blocks, more than a full CTA's warps wherever kBpw > 1) build only the former.
template <int HC, typename WT, bool RES, int DEPTH, int CTA>
cudaError_t launch_backward_fused_depth(const BackwardArgs& a) {
  const RowLayout L = row_layout(static_cast<int>(a.hidden));
  const int rpc = fused_rows_per_cta(L.threads, a.rows);
  const int groups = a.rows < rpc ? static_cast<int>(a.rows) : rpc;
  const int threads = groups * L.threads;
  if (threads > CTA) return cudaErrorInvalidConfiguration;  // the caller's CTA is the rows' bound
  const size_t smem = fused_tile_smem(dw_blocks(a.rows, true));
  constexpr int kBpw = tile_blocks_per_warp(CTA);
  constexpr int kSplitBpw = split_blocks_per_warp(CTA);
  constexpr bool kDeep = DEPTH != tile_depth(HC, false);
  // Several rows a row group only with the deep tiles (fused_group_rows' rows are past them): K is
  // the program's count there, krows whether this launch's rows take it.
  constexpr int K = kDeep ? fused_group_rows(HC, RES, kFusedGroupMinRows) : 1;
  static_assert(K == 1 || kFusedGroupMinRows > int64_t(kMaxBlocks) * tile_depth(HC, false), "K rows past the shallow tiles");
  const bool krows = K > 1 && fused_group_rows(HC, RES, a.rows) == K;
  const int64_t group_rows = static_cast<int64_t>(groups) * (krows ? K : 1);
  const int64_t row_ctas = (a.rows + group_rows - 1) / group_rows;
  const int csize = fused_cluster_of(a, HC > 0, threads / 32, kSplitBpw);
  auto kernel = krows ? backward_fused_kernel<HC, WT, RES, DEPTH, CTA, kDeep ? kBpw : 1, false, K>
                      : backward_fused_kernel<HC, WT, RES, DEPTH, CTA, kDeep ? kBpw : 1>;
  if (csize > 1) {
    kernel = krows ? backward_fused_kernel<HC, WT, RES, DEPTH, CTA, kSplitBpw, true, K>
                   : backward_fused_kernel<HC, WT, RES, DEPTH, CTA, kSplitBpw, true>;
  } else if constexpr (kBpw > 1 && !kDeep) {
    if (dw_blocks(a.rows, true) > threads / 32) kernel = backward_fused_kernel<HC, WT, RES, DEPTH, CTA, kBpw>;
  }
  // Opt the kernel into its largest tile shared memory once (one cached query per kernel, not one
  // per row count; a launch may use less than it is opted into).
  cudaError_t e = cudaSuccess;
  resident_ctas(reinterpret_cast<const void*>(kernel), CTA, fused_tile_smem(kMaxBlocks), &e);
  if (e != cudaSuccess) return e;
  return launch_fused_items(kernel, a, fused_tiles(a.hidden) * csize + row_ctas, threads, smem, csize);
}

// One row of a width up to kOneRowMaxHidden: a single CTA of the row's threads writes dx and dw,
// with no tiles beside it. Against the fused launch at T = 1 (H200, bench/variants.py, this tree
// against the one before it): [1,256] 2.10 -> 1.87 us, [1,512] 1.86 -> 1.79, [1,1536] 2.05 -> 2.02,
// but [1,2048] 2.06 -> 2.11 and [1,4096] 2.21 -> 2.64: past 1536 columns one SM's loads and stores
// take longer than the tiles' spread over many (docs/bench/2026-12-03-h200-r17-one-row.json). With
// store_row_dw's 16-byte stores the reach moved to 2048 still lost there: 1.82 -> 1.86 us (-r29-one-row.json).
constexpr int kOneRowMaxHidden = 1536;

template <int HC, typename WT, bool RES>
__global__ void __launch_bounds__(fused_cta_threads(HC, 1), 1) backward_row_kernel(const BackwardArgs a) {
  using Geom = RowGeom<false>;
  Geom G = Geom::make<HC>(a.hidden);
  G.rpc = 1;
  __shared__ float slots[kMaxCtaThreads / 32];
  fused_dx_rows<HC, WT, RES, true>(a, G, 0, slots);
}

// The fused form: one-row chunks of one-level views (api.backward sends two-level views to the
// pair form).
template <int HC, typename WT, bool RES>
cudaError_t launch_backward_fused(const BackwardArgs& a) {
  if (a.chunk_rows != 1 || a.chunks != a.rows) return cudaErrorInvalidValue;
  if (!a.gv.flat() || !a.xv.flat() || (RES && !a.grv.flat())) return cudaErrorInvalidValue;
  if constexpr (HC <= kOneRowMaxHidden) {  // wider programs never build the one-row kernel
    if (a.rows == 1 && a.hidden <= kOneRowMaxHidden) {
      backward_row_kernel<HC, WT, RES><<<1, row_layout(static_cast<int>(a.hidden)).threads, 0, a.stream>>>(a);
      return cudaGetLastError();
    }
  }
  constexpr int kShallow = tile_depth(HC, false), kDeep = tile_depth(HC, true);
  constexpr int kCta = fused_cta_threads(HC, 1);
  // Two-row CTAs (kFusedPairMinRows rows on) come only with the deep tiles: build them there alone.
  constexpr int kPairCta = fused_cta_threads(HC, kFusedPairMinRows);
  static_assert(kDeep == kShallow || kFusedPairMinRows > int64_t(kMaxBlocks) * kShallow, "two-row CTAs past the shallow tiles");
  if constexpr (kDeep != kShallow) {
    if (tile_deep<HC>(a.rows)) {
      if constexpr (kPairCta != kCta) {
        if (fused_cta_threads(HC, a.rows) == kPairCta) return launch_backward_fused_depth<HC, WT, RES, kDeep, kPairCta>(a);
      }
      return launch_backward_fused_depth<HC, WT, RES, kDeep, kCta>(a);
    }
  }
  return launch_backward_fused_depth<HC, WT, RES, kShallow, kCta>(a);
}

}  // namespace cake
