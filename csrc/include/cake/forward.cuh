// Forward program template: y = x * rstd * w, optionally after h = x + residual.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdint>

#include "cake/args.cuh"
#include "cake/layout.cuh"
#include "cake/program.cuh"
#include "cake/reduce.cuh"
#include "cake/rows.cuh"
#include "cake/vec.cuh"

namespace cake {

// HC: compile-time width (0 = read from args). A CTA holds up to RPC rows side by side (the
// launch picks how many: blockDim.x / row threads), each thread up to four 16-byte slices of its
// row, all loaded before the first use. The grid covers the rows once (CTAs retire and the
// hardware backfills); with a CTA cap it strides.
// WREGS: weight slices loaded into registers before the first row (they travel with the first
// row's loads: the engine of few rows), else re-read from L1 after each row's reduction (fewer
// registers, more CTAs per SM: the engine of many rows at some widths).
// A row is reduced in the same canonical order whatever the CTA size or grid: no bit depends on them.
template <int HC, typename WT, bool RES, bool WREGS>
__global__ void __launch_bounds__(kCtaThreads) forward_kernel(const ForwardArgs a) {
  using Geom = RowGeom<true>;
  Geom G = Geom::make<HC>(a.hidden);
  G.rpc = static_cast<int>(blockDim.x) / G.threads;
  constexpr int VMAX = Geom::vmax<HC>();
  constexpr int N = RES ? 2 : 1;
  const WT* wp = static_cast<const WT*>(a.w);
  __shared__ double slots[2][kCtaThreads / 32];
  const __nv_bfloat16* src[N];
  RowView views[N];
  src[0] = a.x;
  views[0] = a.xv;
  if constexpr (RES) {
    src[N - 1] = a.residual;
    views[N - 1] = a.rv;
  }
  WeightSlice<WT> w[Geom::wregs<HC, WREGS>()];
  G.template load_weights<WREGS>(wp, w);

  int parity = 0;
  const int64_t stride = int64_t(gridDim.x) * G.rpc;
  // The loop count is the same for every thread of the CTA (barriers inside the reduction).
  for (int64_t base = int64_t(blockIdx.x) * G.rpc; base < a.rows; base += stride) {
    const int64_t row = base + G.group;
    const bool live = row < a.rows;
    RowData<VMAX, N> cur;
    cur.load(G, src, views, row, live);
    double ss = 0.0;
#pragma unroll
    for (int k = 0; k < VMAX; ++k) {
      if (live && G.owns(k)) {
        float xf[kVec];
        unpack(cur.v[0][k], xf);
        if constexpr (RES) {
          float rf[kVec];
          unpack(cur.v[N - 1][k], rf);
#pragma unroll
          for (int e = 0; e < kVec; ++e) xf[e] += rf[e];
          cur.v[0][k] = pack(xf);  // normalize the BF16 h that is returned, not the FP32 sum
          unpack(cur.v[0][k], xf);
          store_pack(a.h_out + row * G.hidden + G.col(k), cur.v[0][k]);
        }
#pragma unroll
        for (int e = 0; e < kVec; ++e) ss += double(xf[e] * xf[e]);  // BF16 square: exact in FP32
      }
    }
    ss = row_allsum(ss, G.warps, &slots[parity][G.group * G.warps]);
    parity ^= 1;
    if (!live) continue;
    const float r = float(1.0 / sqrt(ss / double(G.hidden) + a.eps));
    if (G.t == 0) a.rstd[row] = r;
#pragma unroll
    for (int k = 0; k < VMAX; ++k) {
      if (G.owns(k)) {
        float xf[kVec], wk[kVec], out[kVec];
        unpack(cur.v[0][k], xf);
        G.template weight<WREGS>(w, wp, k, wk);
#pragma unroll
        for (int e = 0; e < kVec; ++e) out[e] = (xf[e] * r) * wk[e];
        store_pack(a.y + row * G.hidden + G.col(k), pack(out));
      }
    }
  }
}

// The CTA size comes from the caller (cake_jit.fwd_cta_rows: small token counts spread their
// rows over more, smaller CTAs); 0 means rows_per_cta rows.
template <int HC, typename WT, bool RES, bool WREGS>
cudaError_t launch_forward_variant(const ForwardArgs& a) {
  const RowLayout L = fwd_row_layout(static_cast<int>(a.hidden));
  const int rpc = rows_per_cta(L.threads);
  if (a.cta_rows < 0 || a.cta_rows > rpc) return cudaErrorInvalidValue;
  const int cta_rows = a.cta_rows > 0 ? a.cta_rows : rpc;
  auto kernel = forward_kernel<HC, WT, RES, WREGS>;
  int64_t blocks = (a.rows + cta_rows - 1) / cta_rows;
  if (blocks > 0x7fffffff) blocks = 0x7fffffff;
  if (a.max_ctas > 0 && blocks > a.max_ctas) blocks = a.max_ctas;
  if (blocks < 1) return cudaSuccess;
  kernel<<<static_cast<unsigned>(blocks), cta_rows * L.threads, 0, a.stream>>>(a);
  return cudaGetLastError();
}

template <int HC, bool WREGS>
cudaError_t launch_forward_dtype(const ForwardArgs& a) {
  if (a.weight_fp32) {
    return a.residual ? launch_forward_variant<HC, float, true, WREGS>(a)
                      : launch_forward_variant<HC, float, false, WREGS>(a);
  }
  return a.residual ? launch_forward_variant<HC, __nv_bfloat16, true, WREGS>(a)
                    : launch_forward_variant<HC, __nv_bfloat16, false, WREGS>(a);
}

// Fixed widths build both weight engines (the route picks per token window); the generic
// program re-reads its weights from L1 whatever the engine.
template <int HC>
cudaError_t launch_forward_width(const ForwardArgs& a) {
  if (a.engine != kWeightRegs && a.engine != kWeightL1) return cudaErrorInvalidValue;
  if constexpr (HC > 0) {
    if (a.engine == kWeightRegs) return launch_forward_dtype<HC, true>(a);
  }
  return launch_forward_dtype<HC, false>(a);
}

}  // namespace cake

// A forward program file is this one line: the width it is specialised for (0 = any width).
#define CAKE_FORWARD_PROGRAM(HC)                                         \
  cudaError_t cake_program_forward(const cake::ForwardArgs& a) {         \
    if (HC > 0 && a.hidden != HC) return cudaErrorInvalidValue;          \
    return cake::launch_forward_width<HC>(a);                            \
  }
