// A thread's place in the canonical row layout, and the row data it keeps in registers.
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

#include "cake/layout.cuh"
#include "cake/vec.cuh"

namespace cake {

template <bool kForward>
struct RowGeom {
  int hidden, vecs, threads, vpt, rpc, warps, group, t;

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
    g.rpc = rows_per_cta(L.threads);
    g.warps = L.threads / 32;
    g.group = threadIdx.x / L.threads;
    g.t = threadIdx.x % L.threads;
    return g;
  }
  template <int HC>
  __host__ __device__ static constexpr int vmax() {
    return HC > 0 ? pass_layout<kForward>(HC).vpt : (kForward ? kFwdMaxVecPerThread : kMaxVecPerThread);
  }
  // Backward keeps fixed-width weights in registers; forward and generic programs re-read them
  // (L1-resident) to leave registers for loads in flight.
  template <int HC>
  __host__ __device__ static constexpr int wregs() { return HC > 0 && !kForward ? pass_layout<kForward>(HC).vpt : 1; }
  template <int HC>
  __host__ __device__ static constexpr bool weights_in_registers() { return HC > 0 && !kForward; }

  __device__ __forceinline__ int vec(int k) const { return t + k * threads; }
  __device__ __forceinline__ bool owns(int k) const { return k < vpt && vec(k) < vecs; }
  __device__ __forceinline__ int64_t col(int k) const { return int64_t(vec(k)) * kVec; }

  template <int HC, typename WT, int VW>
  __device__ __forceinline__ void load_weights(const WT* w, float (&wr)[VW][kVec]) const {
    if constexpr (weights_in_registers<HC>()) {
#pragma unroll
      for (int k = 0; k < VW; ++k)
        if (owns(k)) load_weight8(w, col(k), wr[k]);
    }
  }
  template <int HC, typename WT, int VW>
  __device__ __forceinline__ void weight(const float (&wr)[VW][kVec], const WT* w, int k,
                                         float (&out)[kVec]) const {
    if constexpr (weights_in_registers<HC>()) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) out[e] = wr[k][e];
    } else {
      load_weight8(w, col(k), out);
    }
  }
};

// One row's slices of N input tensors (x [, residual] in forward; g, x [, g_residual] in
// backward) in registers. Loading the next row into a second RowData while the current one is
// reduced keeps two rows of loads in flight per thread.
template <int VMAX, int N>
struct RowData {
  Pack8 v[N][VMAX];
  template <class Geom>
  __device__ __forceinline__ void load(const Geom& g, const __nv_bfloat16* const* p,
                                       const RowView* view, int64_t row, bool live) {
    if (!live) return;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int64_t o = view[i].offset(row);
#pragma unroll
      for (int k = 0; k < VMAX; ++k)
        if (g.owns(k)) v[i][k] = load_stream(p[i] + o + g.col(k));
    }
  }
};

}  // namespace cake
