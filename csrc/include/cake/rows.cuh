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
// backward) in registers: the row a thread is working on.
template <int VMAX, int N>
struct RowData {
  Pack8 v[N][VMAX];
};

// S row slots in shared memory, filled by cp.async. Each thread copies, and later reads back,
// only its own 16-byte slices (and its own copy of the row's scalar, the backward's rstd), so
// the ring needs no barrier: a thread keeps S - 1 rows in flight while it works on one, and the
// registers hold only the row in use. Slot layout [S][N][vpt][CTA threads] of Pack8: a warp's
// accesses are 512 consecutive bytes.
template <int VMAX, int N, int S, bool kScalar>
struct RowRing {
  static_assert(S >= 1, "a ring has at least one slot");
  Pack8* data;
  float* scalar;  // [S][CTA threads], kScalar only
  int vpt, cta;

  __host__ __device__ static constexpr size_t bytes(int cta_threads, int vpt) {
    return size_t(S) * size_t(cta_threads) * (size_t(N * vpt) * sizeof(Pack8) + (kScalar ? sizeof(float) : 0));
  }
  __device__ __forceinline__ RowRing(unsigned char* smem, int vpt_, int cta_)
      : data(reinterpret_cast<Pack8*>(smem)),
        scalar(reinterpret_cast<float*>(smem + size_t(S) * cta_ * N * vpt_ * sizeof(Pack8))),
        vpt(vpt_),
        cta(cta_) {}

  __device__ __forceinline__ Pack8* slot(int s, int i, int k) const {
    return data + ((s * N + i) * vpt + k) * cta + threadIdx.x;
  }

  // Start copying `row` into slot s (nothing when !live) and close the group: one group per row
  // keeps every thread's group count in step, so wait<S - 1> always means "slot s is here".
  template <class Geom>
  __device__ __forceinline__ void fill(int s, const Geom& g, const __nv_bfloat16* const* p,
                                       const RowView* view, const float* scalars, int64_t row,
                                       bool live) const {
    if (live) {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const int64_t o = view[i].offset(row);
#pragma unroll
        for (int k = 0; k < VMAX; ++k)
          if (g.owns(k)) copy_async16(slot(s, i, k), p[i] + o + g.col(k));
      }
      if constexpr (kScalar) copy_async4(scalar + s * cta + threadIdx.x, scalars + row);
    }
    copy_async_commit();
  }

  // Wait for the oldest row in flight (slot s) and move it to registers.
  template <class Geom>
  __device__ __forceinline__ void take(int s, const Geom& g, RowData<VMAX, N>& d, float& sc) const {
    copy_async_wait<S - 1>();
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
      for (int k = 0; k < VMAX; ++k)
        if (g.owns(k)) d.v[i][k] = *slot(s, i, k);
    if constexpr (kScalar) sc = scalar[s * cta + threadIdx.x];
  }
};

}  // namespace cake
