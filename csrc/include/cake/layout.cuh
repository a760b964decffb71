// The canonical row layout: how many threads share one row and which 16-byte vectors each owns.
// It is a function of H alone, and every program of a width uses it, so the in-row reductions
// (sum of squares, the g*w*xhat dot) add the same numbers in the same order whatever the
// program, grid or token count: that is what makes rows batch-invariant.
#pragma once
#include <cstdint>

namespace cake {

constexpr int kMaxVecPerThread = 2;   // H <= 16384 = 1024 threads x 2 vectors x 8 elements
constexpr int kMaxRowThreads = 1024;
constexpr int kMaxCtaThreads = 1024;
constexpr int kCtaThreads = 512;       // narrow rows are packed side by side up to this many threads

struct RowLayout {
  int threads;  // threads per row, a multiple of 32
  int vpt;      // 16-byte vectors per thread; thread t owns vectors t + k*threads, k < vpt
};

// Prefer exact tilings (every thread owns the same number of vectors) with one vector per thread
// where a row fits in 1024 threads: each vector costs 8 FP64 dw accumulators and two prefetched
// 16-byte slices per input, and the kernels must stay within 64 registers. Otherwise 1024
// threads with the tail threads partly idle.
__host__ __device__ constexpr RowLayout row_layout(int hidden) {
  const int vecs = (hidden + 7) / 8;
  for (int vpt = 1; vpt <= kMaxVecPerThread; ++vpt) {
    if (vecs % vpt == 0 && (vecs / vpt) % 32 == 0 && vecs / vpt <= kMaxRowThreads) {
      return RowLayout{vecs / vpt, vpt};
    }
  }
  const int threads = vecs < 32 ? 32 : (vecs >= kMaxRowThreads ? kMaxRowThreads : (vecs + 31) / 32 * 32);
  return RowLayout{threads, (vecs + threads - 1) / threads};
}

// The forward's layout: its reduction (the sum of squares) carries no per-column accumulators,
// so each thread takes up to four vectors (64 bytes per input in flight) and rows stay within
// 512 threads. Same rule shape: the largest vpt <= 4 that tiles H exactly in whole warps.
constexpr int kFwdMaxVecPerThread = 4;
constexpr int kFwdMaxRowThreads = 512;

__host__ __device__ constexpr RowLayout fwd_row_layout(int hidden) {
  const int vecs = (hidden + 7) / 8;
  for (int vpt = kFwdMaxVecPerThread; vpt >= 1; --vpt) {
    if (vecs % vpt == 0 && (vecs / vpt) % 32 == 0 && vecs / vpt <= kFwdMaxRowThreads) {
      return RowLayout{vecs / vpt, vpt};
    }
  }
  const int threads = vecs < 32 ? 32 : (vecs >= 4 * kFwdMaxRowThreads ? kFwdMaxRowThreads
                                        : ((vecs + 3) / 4 + 31) / 32 * 32);
  return RowLayout{threads, (vecs + threads - 1) / threads};
}

template <bool kForward>
__host__ __device__ constexpr RowLayout pass_layout(int hidden) {
  return kForward ? fwd_row_layout(hidden) : row_layout(hidden);
}

// Rows handled side by side in one CTA: fill about 512 threads.
__host__ __device__ constexpr int rows_per_cta(int row_threads) {
  return row_threads >= kCtaThreads ? 1 : kCtaThreads / row_threads;
}

// The backward's rows side by side in a CTA of its chunked forms (the direct and ring engines):
// rows_per_cta, but two rows of 512 threads (H 4096) to a 1024-thread CTA, one CTA an SM, so that
// one dw chunk a resident CTA is 132 chunks, not 264 (cake_jit.dw_partition): half the FP64
// partials to write and reduce. H100, bench/variants.py (docs/performance.md, round 39): 0.90-0.93x
// at [2304,4096], 0.95-0.97x at 4096 rows, a tie from 16384; the same CTAs at H 2048 (four rows)
// lost 2-16% at 256-2048 rows, and at H 256 / 512 (round 37) 3-32% at 1024-4096. The row groups
// walk a chunk's rows in turn, so this count is part of dw's bits (the fused form's row CTAs, which
// write no partials, follow the row count instead: fused_rows_per_cta).
__host__ __device__ constexpr int bwd_rows_per_cta(int row_threads) {
  return row_threads == kCtaThreads ? kMaxCtaThreads / kCtaThreads : rows_per_cta(row_threads);
}

// Threads of a full backward CTA of width `hidden` (0: the generic program, any width).
__host__ __device__ constexpr int bwd_cta_threads(int hidden) {
  return hidden > 0 ? bwd_rows_per_cta(row_layout(hidden).threads) * row_layout(hidden).threads : kMaxCtaThreads;
}

// Rows of a row CTA of the fused backward form at `rows` rows: rows_per_cta, but from
// kFusedPairMinRows rows bwd_rows_per_cta (two rows of 512 threads, H 4096, in a 1024-thread CTA).
// Its row CTAs write dx alone, whose bits are the row's, so this count moves no bit. H100,
// bench/variants.py against one-row CTAs (docs/performance.md, round 40): 0.985-0.997x at 384
// rows, 0.947-0.989x at 448, 0.905-0.958x at 512-640 on BF16 and FP32 weights and the residual;
// 1.03-1.09x at 256 (round 39), so not below 384. They took H 4096's fused edge to 896 rows.
constexpr int64_t kFusedPairMinRows = 384;
__host__ __device__ constexpr int fused_rows_per_cta(int row_threads, int64_t rows) {
  return rows >= kFusedPairMinRows ? bwd_rows_per_cta(row_threads) : rows_per_cta(row_threads);
}

// Rows a row group of the fused backward form's row CTAs takes at once at `rows` rows: from
// kFusedGroupMinRows rows (its loads out together, the weights loaded once), else one; 0: the
// generic program, one. Its rows' sums are each row's own, so this count moves no bit. H100,
// bench/variants.py against one row a group (docs/performance.md, rounds 41 and 42): four rows at
// H 1536 0.877-0.950x at 320-384 rows on BF16 / FP32 weights and the residual (round 40:
// 1.01-1.12x at 256, so not below 320); two at H 5120 0.898-0.974x at 320-512 rows on BF16 and
// FP32 weights, where the residual's rows lost up to 5% (round 40); more rows a group lost at
// H 2048 / 4096 and tied at H 256 / 512. Only with the deep tiles (past kMaxBlocks x 4 rows:
// backward_fused.cuh).
constexpr int64_t kFusedGroupMinRows = 320;
__host__ __device__ constexpr int fused_group_rows(int hidden, bool residual, int64_t rows) {
  return rows < kFusedGroupMinRows ? 1 : hidden == 1536 ? 4 : (hidden == 5120 && !residual) ? 2 : 1;
}

// Threads of a full row CTA of the fused backward form of width `hidden` at `rows` rows (its dx
// rows only; 0: the generic program, any width).
__host__ __device__ constexpr int fused_cta_threads(int hidden, int64_t rows) {
  return hidden > 0 ? fused_rows_per_cta(row_layout(hidden).threads, rows) * row_layout(hidden).threads
                    : kMaxCtaThreads;
}

// Offsets of a row in a [d0, d1, H] view with element strides (s0, s1, 1). 64-bit throughout.
struct RowView {
  int64_t d1, s0, s1;
  __device__ __forceinline__ int64_t offset(int64_t row) const {
    return d1 == 1 ? row * s0 : (row / d1) * s0 + (row % d1) * s1;
  }
  // A one-level view's (d1 == 1) offset, with no division path in the kernel's code: the fused
  // backward form takes only these (H200, bench/variants.py: [256,2048] 7.18 -> 6.21 us, [1,256]
  // 1.75 -> 1.58 against offset(); the pair form, whose bits are the same, runs two-level views).
  __device__ __forceinline__ int64_t flat_offset(int64_t row) const { return row * s0; }
  __host__ __device__ __forceinline__ bool flat() const { return d1 == 1; }
};

}  // namespace cake
