// Backward program template: dx (+ g_residual) and the FP64-exact, chunk-partitioned dw, by one
// of two engines (backward_direct.cuh, backward_ring.cuh) that the route picks per token window;
// both compute the same bits. The pair form adds the reduce kernel of dw_reduce.cuh; the fused
// form (backward_fused.cuh, one-row chunks) does all of it in one launch, with the same bits.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdint>

#include "cake/args.cuh"
#include "cake/backward_direct.cuh"
#include "cake/backward_fused.cuh"
#include "cake/backward_ring.cuh"
#include "cake/dw_reduce.cuh"
#include "cake/layout.cuh"
#include "cake/program.cuh"

namespace cake {

// Launches `kernel` over min(chunks, resident CTAs, cap) CTAs, then the reduce kernel in the pair form.
inline cudaError_t launch_backward_grid(const void* kernel, void (*entry)(BackwardArgs), const BackwardArgs& a,
                                        int threads, size_t smem) {
  cudaError_t e = cudaSuccess;
  const int64_t resident = resident_ctas(kernel, threads, smem, &e);
  if (e != cudaSuccess) return e;
  int64_t blocks = a.chunks;
  if (blocks > resident) blocks = resident;
  if (blocks > launch_cta_limit(a.max_ctas)) blocks = launch_cta_limit(a.max_ctas);
  if (blocks < 1) return cudaSuccess;
  entry<<<static_cast<unsigned>(blocks), threads, smem, a.stream>>>(a);
  e = cudaGetLastError();
  if (e != cudaSuccess || a.form != kPair) return e;
  return launch_dw_reduce(a.partials, a.dw, a.hidden, a.chunks, a.chunk_rows == 1, a.stream);
}

// The direct engine's kernel, its row groups cut (CUT) or not, its rows read into L1 or streamed.
template <int HC, typename WT, bool RES, bool CUT>
cudaError_t launch_backward_direct(const BackwardArgs& a, int threads, size_t smem) {
  auto kernel = a.loads == kL1Loads ? backward_direct_kernel<HC, WT, RES, CUT, true>
                                    : backward_direct_kernel<HC, WT, RES, CUT, false>;
  return launch_backward_grid(reinterpret_cast<const void*>(kernel), kernel, a, threads, smem);
}

template <int HC, typename WT, bool RES, int RD>
cudaError_t launch_backward_variant(const BackwardArgs& in) {
  constexpr int N = RES ? 3 : 2;
  if (in.form == kFused) return launch_backward_fused<HC, WT, RES>(in);
  BackwardArgs a = in;
  const RowLayout L = row_layout(static_cast<int>(a.hidden));
  const int rpc = bwd_rows_per_cta(L.threads);
  const int threads = rpc * L.threads;
  a.stages = a.engine == kRing
                 ? ring_stages(StagePlan::make(a.hidden, rpc, rpc * RD, N, 1), bwd_ctas_per_sm(threads, RD))
                 : 0;
  if (a.stages == 0) {  // the direct engine: asked for, or a ring that does not fit
    // No idle row groups, except in the single form: its last CTA sweeps the columns blockDim.x at
    // a time, and fewer threads would make that sweep longer than the groups saved.
    const int groups = a.chunk_rows < rpc && a.form != kSingle ? static_cast<int>(a.chunk_rows) : rpc;
    const size_t smem = size_t(groups - 1) * size_t(a.hidden) * sizeof(double);
    // widths of one row group per CTA never cut; the generic program reads its groups at run time
    constexpr bool kCuts = HC == 0 || bwd_rows_per_cta(row_layout(HC > 0 ? HC : 8).threads) > 1;
    if constexpr (kCuts) {
      if (HC == 0 || groups < rpc) return launch_backward_direct<HC, WT, RES, true>(a, groups * L.threads, smem);
    }
    if constexpr (HC > 0) return launch_backward_direct<HC, WT, RES, false>(a, threads, smem);
    return cudaErrorInvalidValue;  // not reached: the generic program always takes the branch above
  }
  const size_t smem = static_cast<size_t>(StagePlan::make(a.hidden, rpc, rpc * RD, N, a.stages).total);
  // the chunk order as a template argument: a contiguous walk's step stays a constant (registers)
  auto kernel = a.order == kStrided ? backward_ring_kernel<HC, WT, RES, RD, kStrided>
                                    : backward_ring_kernel<HC, WT, RES, RD, kContiguous>;
  return launch_backward_grid(reinterpret_cast<const void*>(kernel), kernel, a, threads, smem);
}

// RD: the ring engine's row depth for both the plain and the residual rows, a template argument so
// that a measurement can build another depth from the same source; 0 (the programs): bwd_row_depth
// of each. An item holds at most 32 rows (one rstd lane each).
template <int HC, int RD = 0>
cudaError_t launch_backward_width(const BackwardArgs& a) {
  constexpr int kPlain = RD > 0 ? RD : bwd_row_depth(HC, false);
  constexpr int kResidual = RD > 0 ? RD : bwd_row_depth(HC, true);
  const int depth = a.g_residual ? kResidual : kPlain;
  if (a.engine != kDirect && a.engine != kRing) return cudaErrorInvalidValue;
  if (a.loads != kStreamLoads && a.loads != kL1Loads) return cudaErrorInvalidValue;
  if (a.engine == kRing && bwd_rows_per_cta(row_layout(static_cast<int>(a.hidden)).threads) * depth > 32)
    return cudaErrorInvalidValue;
  if (a.weight_fp32) {
    return a.g_residual ? launch_backward_variant<HC, float, true, kResidual>(a)
                        : launch_backward_variant<HC, float, false, kPlain>(a);
  }
  return a.g_residual ? launch_backward_variant<HC, __nv_bfloat16, true, kResidual>(a)
                      : launch_backward_variant<HC, __nv_bfloat16, false, kPlain>(a);
}

}  // namespace cake

// A backward program file is this one line: the width it is specialised for (0 = any width).
#define CAKE_BACKWARD_PROGRAM(HC)                                        \
  cudaError_t cake_program_backward(const cake::BackwardArgs& a) {       \
    if (HC > 0 && a.hidden != HC) return cudaErrorInvalidValue;          \
    return cake::launch_backward_width<HC>(a);                           \
  }
