// A thread's place in the canonical row layout, and the row data it keeps in registers.
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

#include "cake/layout.cuh"
#include "cake/vec.cuh"

namespace cake {

// PACK > 1 (packed forward rows): the thread holds PACK canonical threads of one row (pack()).
template <bool kForward, int PACK = 1>
struct RowGeom {
  int hidden, vecs, threads, vpt, rpc, warps, group, t;
  int k0;  // the first of the canonical thread's slices this thread holds (0 but in wide forward rows)

  // Compile-time width HC (> 0) folds the layout into constants; HC = 0 reads it at run time.
  template <int HC>
  __device__ __forceinline__ static RowGeom make(int64_t hidden_rt) {
    const int hidden = HC > 0 ? HC : static_cast<int>(hidden_rt);
    const RowLayout L = pass_layout<kForward>(hidden);
    RowGeom g;
    g.hidden = hidden;
    g.vecs = hidden / kVec;
    g.threads = L.threads;
    g.vpt = L.vpt;
    g.rpc = kForward ? rows_per_cta(L.threads) : bwd_rows_per_cta(L.threads);
    g.warps = L.threads / 32;
    g.group = threadIdx.x / L.threads;
    g.t = threadIdx.x % L.threads;
    g.k0 = 0;
    return g;
  }
  template <int HC>
  __host__ __device__ static constexpr int vmax() {
    return HC > 0 ? pass_layout<kForward>(HC).vpt : (kForward ? kFwdMaxVecPerThread : kMaxVecPerThread);
  }
  // Where the weight slices live: fixed-width programs load them into registers once, before the
  // first row, so that they travel with the first row's loads; generic programs (and a program
  // built with REGS = false) re-read them where they are used, from L1.
  template <int HC, bool REGS = (HC > 0)>
  __host__ __device__ static constexpr int wregs() { return REGS ? pass_layout<kForward>(HC > 0 ? HC : 8).vpt : 1; }

  // Wide forward rows: the row spread over threads * vpt threads, thread (t, k0) holding slice k0
  // of canonical thread t (the same vectors and, summed in the canonical order, the same bits).
  __device__ __forceinline__ void widen() {
    const int span = threads * vpt;
    group = threadIdx.x / span;
    t = threadIdx.x % span % threads;
    k0 = threadIdx.x % span / threads;
    rpc = static_cast<int>(blockDim.x) / span;
  }

  // Packed forward rows (a row whose canonical threads are one warp, tiled exactly): a row on
  // span = threads / PACK threads, thread t holding canonical threads t, t + span, t + 2 span, ...
  // (so that each load instruction of a row's threads still reads consecutive 16-byte vectors).
  __device__ __forceinline__ void pack() {
    const int span = threads / PACK;
    group = threadIdx.x / span;
    t = threadIdx.x % span;
    rpc = static_cast<int>(blockDim.x) / span;
  }

  // Slice index i of this thread's registers is the canonical thread's slice k = k0 + i; packed,
  // slice i % vpt of canonical thread t + (i / vpt) * span (every slice held: the tiling is exact).
  __device__ __forceinline__ int vec(int k) const { return t + k * threads; }
  __device__ __forceinline__ bool owns(int k) const { return k < vpt && vec(k) < vecs; }
  __device__ __forceinline__ int64_t col(int k) const { return int64_t(vec(k)) * kVec; }
  __device__ __forceinline__ bool holds(int i) const { return PACK > 1 || owns(k0 + i); }
  __device__ __forceinline__ int64_t col_of(int i) const {
    return PACK > 1 ? int64_t(t + i / vpt * (threads / PACK) + i % vpt * threads) * kVec : col(k0 + i);
  }

  template <bool REGS, typename WT, int VW>
  __device__ __forceinline__ void load_weights(const WT* w, WeightSlice<WT> (&wr)[VW]) const {
    if constexpr (REGS) {
#pragma unroll
      for (int i = 0; i < VW; ++i)
        if (holds(i)) wr[i].load(w, col_of(i));
    }
  }
  template <bool REGS, typename WT, int VW>
  __device__ __forceinline__ void weight(const WeightSlice<WT> (&wr)[VW], const WT* w, int i,
                                         float (&out)[kVec]) const {
    if constexpr (REGS) {
      wr[i].get(out);
    } else {
      load_weight8(w, col_of(i), out);
    }
  }
};

// One row's slices of N input tensors (x [, residual] in forward; g, x [, g_residual] in
// backward) in registers. Loading the next row into a second RowData while the current one is
// reduced keeps two rows of loads in flight per thread. kFlat: the views are one-level
// (RowView::flat_offset). kL1: the reads allocate in L1 (load_cached) instead of streaming past it.
template <int VMAX, int N>
struct RowData {
  Pack8 v[N][VMAX];
  template <bool kFlat = false, bool kL1 = false, class Geom>
  __device__ __forceinline__ void load(const Geom& g, const __nv_bfloat16* const* p,
                                       const RowView* view, int64_t row, bool live) {
    if (!live) return;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int64_t o = kFlat ? view[i].flat_offset(row) : view[i].offset(row);
#pragma unroll
      for (int k = 0; k < VMAX; ++k)
        if (g.holds(k)) v[i][k] = kL1 ? load_cached(p[i] + o + g.col_of(k)) : load_stream(p[i] + o + g.col_of(k));
    }
  }
};

}  // namespace cake
