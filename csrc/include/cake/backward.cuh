// Backward program template: dx (+ g_residual) and the FP64-exact, chunk-partitioned dw.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdint>

#include "cake/args.cuh"
#include "cake/dw_reduce.cuh"
#include "cake/layout.cuh"
#include "cake/program.cuh"
#include "cake/reduce.cuh"
#include "cake/rows.cuh"
#include "cake/vec.cuh"

namespace cake {

// A CTA takes dw chunks grid-stride (chunk -> CTA is free; chunk -> rows is fixed by (T, H)).
// Within a chunk its RPC row groups walk the rows, each thread accumulating g*x*rstd for its
// fixed columns in FP64 registers; the groups are combined in group order and the chunk's
// partial row is written (or, in the small form, dw itself).
template <int HC, typename WT, bool RES>
__global__ void __launch_bounds__(kMaxCtaThreads, 1) backward_kernel(const BackwardArgs a) {
  using Geom = RowGeom<false>;
  const Geom G = Geom::make<HC>(a.hidden);
  constexpr int VMAX = Geom::vmax<HC>();
  constexpr int N = RES ? 3 : 2;
  const WT* wp = static_cast<const WT*>(a.w);
  __shared__ float slots[2][kMaxCtaThreads / 32];
  extern __shared__ double group_acc[];  // [(rpc - 1) * hidden]: row groups 1.. of the CTA

  const __nv_bfloat16* src[N];
  RowView views[N];
  src[0] = a.g;
  views[0] = a.gv;
  src[1] = a.x;
  views[1] = a.xv;
  if constexpr (RES) {
    src[N - 1] = a.g_residual;
    views[N - 1] = a.grv;
  }
  float w[Geom::wregs<HC>()][kVec];
  G.template load_weights<HC>(wp, w);

  int parity = 0;
  for (int64_t chunk = blockIdx.x; chunk < a.chunks; chunk += gridDim.x) {
    double acc[VMAX][kVec];
#pragma unroll
    for (int k = 0; k < VMAX; ++k)
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[k][e] = 0.0;

    const int64_t r0 = chunk * a.chunk_rows;
    const int64_t r1 = r0 + a.chunk_rows < a.rows ? r0 + a.chunk_rows : a.rows;
    int64_t row = r0 + G.group;
    RowData<VMAX, N> next;
    next.load(G, src, views, row, row < r1);
    float rnext = row < r1 ? a.rstd[row] : 0.f;
    // The loop count is the same for every thread of the CTA (barriers inside the reduction).
    for (int64_t base = r0; base < r1; base += G.rpc, row += G.rpc) {
      const bool live = row < r1;
      const RowData<VMAX, N> cur = next;
      const float r = rnext;
      next.load(G, src, views, row + G.rpc, row + G.rpc < r1);
      rnext = row + G.rpc < r1 ? a.rstd[row + G.rpc] : 0.f;

      float dot = 0.f;  // this thread's part of sum_j g*w*x, in the canonical order
#pragma unroll
      for (int k = 0; k < VMAX; ++k) {
        if (live && G.owns(k)) {
          float gf[kVec], xf[kVec], wk[kVec];
          unpack(cur.v[0][k], gf);
          unpack(cur.v[1][k], xf);
          G.template weight<HC>(w, wp, k, wk);
#pragma unroll
          for (int e = 0; e < kVec; ++e) dot += (gf[e] * wk[e]) * xf[e];
        }
      }
      dot = row_allsum(dot, G.warps, &slots[parity][G.group * G.warps]);
      parity ^= 1;
      if (!live) continue;
      const float c = (dot * r) / float(G.hidden);  // mean of g*w*xhat
      const double rd = double(r);
#pragma unroll
      for (int k = 0; k < VMAX; ++k) {
        if (G.owns(k)) {
          float gf[kVec], xf[kVec], wk[kVec], out[kVec];
          unpack(cur.v[0][k], gf);
          unpack(cur.v[1][k], xf);
          G.template weight<HC>(w, wp, k, wk);
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            out[e] = r * (gf[e] * wk[e] - (xf[e] * r) * c);
            // g*x of two BF16 values is exact in FP32, and times rstd exact in FP64.
            acc[k][e] = fma(double(gf[e] * xf[e]), rd, acc[k][e]);
          }
          if constexpr (RES) {
            float rf[kVec];
            unpack(cur.v[N - 1][k], rf);
#pragma unroll
            for (int e = 0; e < kVec; ++e) out[e] += rf[e];
          }
          store_pack(a.dx + row * G.hidden + G.col(k), pack(out));
        }
      }
    }

    // Combine the CTA's row groups in group order, then write this chunk's partial row.
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
    if (G.group == 0) {
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
        if (a.form == kSmall) {
          // One chunk: its sum is already the canonical total (s + (0 + 0) rounds the same).
          float f[kVec];
#pragma unroll
          for (int e = 0; e < kVec; ++e) f[e] = float(out[e]);
          *reinterpret_cast<float4*>(a.dw + G.col(k)) = make_float4(f[0], f[1], f[2], f[3]);
          *reinterpret_cast<float4*>(a.dw + G.col(k) + 4) = make_float4(f[4], f[5], f[6], f[7]);
        } else {
          double* dst = a.partials + chunk * a.hidden + G.col(k);
#pragma unroll
          for (int e = 0; e < kVec; e += 2) *reinterpret_cast<double2*>(dst + e) = make_double2(out[e], out[e + 1]);
        }
      }
    }
  }

  if (a.form == kSingle) {
    // The CTA that arrives last reduces; nobody waits. It leaves the ticket at zero.
    __shared__ unsigned ticket;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) ticket = atomicAdd(a.counter, 1u);
    __syncthreads();
    if (ticket == gridDim.x - 1) {
      __threadfence();
      dw_reduce_cta(a.partials, a.dw, a.hidden, a.chunks);
      if (threadIdx.x == 0) *a.counter = 0u;
    }
  }
}

template <int HC, typename WT, bool RES>
cudaError_t launch_backward_variant(const BackwardArgs& a) {
  const RowLayout L = row_layout(static_cast<int>(a.hidden));
  const int rpc = rows_per_cta(L.threads);
  const int threads = rpc * L.threads;
  const size_t smem = size_t(rpc - 1) * size_t(a.hidden) * sizeof(double);
  auto kernel = backward_kernel<HC, WT, RES>;
  cudaError_t e = cudaSuccess;
  const int64_t resident = resident_ctas(reinterpret_cast<const void*>(kernel), threads, smem, &e);
  if (e != cudaSuccess) return e;
  int64_t blocks = a.chunks;
  if (blocks > resident) blocks = resident;
  if (a.max_ctas > 0 && blocks > a.max_ctas) blocks = a.max_ctas;
  if (blocks < 1) return cudaSuccess;
  kernel<<<static_cast<unsigned>(blocks), threads, smem, a.stream>>>(a);
  e = cudaGetLastError();
  if (e != cudaSuccess || a.form != kPair) return e;
  return launch_dw_reduce(a.partials, a.dw, a.hidden, a.chunks, a.stream);
}

template <int HC>
cudaError_t launch_backward_width(const BackwardArgs& a) {
  if (a.weight_fp32) {
    return a.g_residual ? launch_backward_variant<HC, float, true>(a)
                        : launch_backward_variant<HC, float, false>(a);
  }
  return a.g_residual ? launch_backward_variant<HC, __nv_bfloat16, true>(a)
                      : launch_backward_variant<HC, __nv_bfloat16, false>(a);
}

}  // namespace cake

// A backward program file is this one line: the width it is specialised for (0 = any width).
#define CAKE_BACKWARD_PROGRAM(HC)                                        \
  cudaError_t cake_program_backward(const cake::BackwardArgs& a) {       \
    if (HC > 0 && a.hidden != HC) return cudaErrorInvalidValue;          \
    return cake::launch_backward_width<HC>(a);                           \
  }
