// What both backward engines share: the per-row arithmetic on a thread's slices, the end of a
// dw chunk, and the single form's last-CTA reduction. Sharing them is what makes the engines'
// bits identical: they differ only in how rows reach the registers.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdint>

#include "cake/args.cuh"
#include "cake/dw_reduce.cuh"
#include "cake/rows.cuh"
#include "cake/vec.cuh"

namespace cake {

// The backward's input rows in RowData order, g, x [, g_residual], with their views.
template <bool RES>
struct BackwardSources {
  static constexpr int N = RES ? 3 : 2;
  const __nv_bfloat16* src[N];
  RowView views[N];
  __device__ __forceinline__ explicit BackwardSources(const BackwardArgs& a) {
    src[0] = a.g;
    views[0] = a.gv;
    src[1] = a.x;
    views[1] = a.xv;
    if constexpr (RES) {
      src[N - 1] = a.g_residual;
      views[N - 1] = a.grv;
    }
  }
};

// The rows a row group of a CTA walks in one dw chunk (ChunkOrder): the first, the step between
// its rows, how many steps (the same for every group of the CTA: barriers inside the walk) and the
// end past which a row is not there. b: the CTA's row groups; order: a.order, or the kernel's
// compile-time order (the ring's, so that a contiguous walk keeps its step a constant).
struct ChunkWalk {
  int64_t first, step, steps, end;
  __device__ __forceinline__ static ChunkWalk make(const BackwardArgs& a, int64_t chunk, int b, int group,
                                                   int order) {
    ChunkWalk w;
    if (order == kStrided) {
      w.first = chunk * b + group;
      w.step = a.chunks * b;
      w.steps = (a.chunk_rows + b - 1) / b;
      w.end = a.rows;
    } else {
      const int64_t r0 = chunk * a.chunk_rows;
      w.first = r0 + group;
      w.step = b;
      w.end = r0 + a.chunk_rows < a.rows ? r0 + a.chunk_rows : a.rows;
      w.steps = (w.end - r0 + b - 1) / b;
    }
    return w;
  }
};

// One element's g*x*rstd added to a dw sum: g*x of two BF16 values is exact in FP32, and times
// rstd exact in FP64. Every way of forming dw (the engines' chunk sums, the fused form's tiles)
// goes through it, which is what keeps their bits equal.
__device__ __forceinline__ double dw_term(float g, float x, double rd, double acc) {
  return fma(double(g * x), rd, acc);
}

// This thread's part of sum_j g*w*x over its slices of one row, in the canonical order.
template <bool WREGS, int VMAX, class Geom, typename WT, int VW>
__device__ __forceinline__ float slice_dot(const Geom& G, const Pack8 (&g)[VMAX], const Pack8 (&x)[VMAX],
                                           const WeightSlice<WT> (&w)[VW], const WT* wp) {
  float dot = 0.f;
#pragma unroll
  for (int k = 0; k < VMAX; ++k) {
    if (G.owns(k)) {
      float gf[kVec], xf[kVec], wk[kVec];
      unpack(g[k], gf);
      unpack(x[k], xf);
      G.template weight<WREGS>(w, wp, k, wk);
#pragma unroll
      for (int e = 0; e < kVec; ++e) dot += (gf[e] * wk[e]) * xf[e];
    }
  }
  return dot;
}

// dx (+ g_residual) of one row from its slices, rstd r and the row's dot; and (DW) the row's
// exact g*x*rstd added to the thread's FP64 column sums.
template <bool WREGS, bool RES, bool DW = true, int VMAX, class Geom, typename WT, int VW>
__device__ __forceinline__ void slice_dx_dw(const Geom& G, const BackwardArgs& a, int64_t row,
                                            const Pack8 (&g)[VMAX], const Pack8 (&x)[VMAX],
                                            const Pack8 (&gr)[VMAX], float r, float dot,
                                            const WeightSlice<WT> (&w)[VW], const WT* wp,
                                            double (&acc)[VMAX][kVec]) {
  const float c = (dot * r) / float(G.hidden);  // mean of g*w*xhat
  const double rd = double(r);
#pragma unroll
  for (int k = 0; k < VMAX; ++k) {
    if (G.owns(k)) {
      float gf[kVec], xf[kVec], wk[kVec], out[kVec];
      unpack(g[k], gf);
      unpack(x[k], xf);
      G.template weight<WREGS>(w, wp, k, wk);
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        out[e] = r * (gf[e] * wk[e] - (xf[e] * r) * c);
        if constexpr (DW) acc[k][e] = dw_term(gf[e], xf[e], rd, acc[k][e]);
      }
      if constexpr (RES) {
        float rf[kVec];
        unpack(gr[k], rf);
#pragma unroll
        for (int e = 0; e < kVec; ++e) out[e] += rf[e];
      }
      store_pack(a.dx + row * G.hidden + G.col(k), pack(out));
    }
  }
}

template <int VMAX>
__device__ __forceinline__ void zero_acc(double (&acc)[VMAX][kVec]) {
#pragma unroll
  for (int k = 0; k < VMAX; ++k)
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[k][e] = 0.0;
}

// End of a chunk: the CTA's row groups are combined in group order through `group_acc`
// ([(rpc - 1) * hidden] doubles of shared memory) and the chunk's partial row is written. Every
// thread of the CTA calls it (CTA barriers inside).
template <int VMAX, class Geom>
__device__ __forceinline__ void finish_chunk(const Geom& G, const BackwardArgs& a, int64_t chunk,
                                             const double (&acc)[VMAX][kVec], double* group_acc) {
  if (G.rpc > 1) {
    __syncthreads();
    if (G.group > 0) {
#pragma unroll
      for (int k = 0; k < VMAX; ++k)
        if (G.owns(k))
#pragma unroll
          for (int e = 0; e < kVec; ++e) group_acc[(G.group - 1) * G.hidden + G.col(k) + e] = acc[k][e];
    }
    __syncthreads();
  }
  if (G.group != 0) return;
#pragma unroll
  for (int k = 0; k < VMAX; ++k) {
    if (!G.owns(k)) continue;
    double out[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      double s = acc[k][e];
      for (int gi = 1; gi < G.rpc; ++gi) s += group_acc[(gi - 1) * G.hidden + G.col(k) + e];
      out[e] = s;
    }
    double* dst = a.partials + chunk * a.hidden + G.col(k);
#pragma unroll
    for (int e = 0; e < kVec; e += 2) *reinterpret_cast<double2*>(dst + e) = make_double2(out[e], out[e + 1]);
  }
}

// Single form: the CTA that arrives last reduces the partials; nobody waits. It leaves the
// ticket at zero. Every thread of the CTA calls it.
__device__ __forceinline__ void single_form_tail(const BackwardArgs& a) {
  if (a.form != kSingle) return;
  __shared__ unsigned ticket;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) ticket = atomicAdd(a.counter, 1u);
  __syncthreads();
  if (ticket == gridDim.x - 1) {
    __threadfence();
    dw_reduce_cta(a.partials, a.dw, a.hidden, a.chunks, a.chunk_rows == 1);
    if (threadIdx.x == 0) *a.counter = 0u;
  }
}

}  // namespace cake
