// Backward engine "direct": each thread loads its slices of the next row into registers while
// it computes on the current one (two rows in flight per thread). It starts at once, so it is
// the engine of short chunks: small and mid token counts.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdint>

#include "cake/args.cuh"
#include "cake/backward_rows.cuh"
#include "cake/layout.cuh"
#include "cake/reduce.cuh"
#include "cake/rows.cuh"
#include "cake/vec.cuh"

namespace cake {

// A CTA takes dw chunks grid-stride (chunk -> CTA is free; chunk -> rows is fixed by (T, H) and
// the chunk order, ChunkWalk). Within a chunk its row groups walk the rows, each thread
// accumulating g*x*rstd for its fixed columns in FP64 registers; finish_chunk combines the
// groups and writes the partial.
// CUT: the CTA holds fewer row groups than bwd_rows_per_cta (blockDim.x / row threads; the launcher
// cuts them to a chunk's rows): groups past a chunk's rows would only add zeros (+0.0 leaves every
// sum as it is), so the cut changes no bit. Uncut, the group count stays a compile-time constant.
// L1LOADS: the rows' reads allocate in L1 (RowLoads).
template <int HC, typename WT, bool RES, bool CUT, bool L1LOADS = false>
__global__ void __launch_bounds__(kMaxCtaThreads, 1) backward_direct_kernel(const BackwardArgs a) {
  using Geom = RowGeom<false>;
  Geom G = Geom::make<HC>(a.hidden);
  if constexpr (CUT) G.rpc = static_cast<int>(blockDim.x) / G.threads;
  constexpr int VMAX = Geom::vmax<HC>();
  constexpr int N = BackwardSources<RES>::N;
  constexpr bool kWRegs = HC > 0;
  const WT* wp = static_cast<const WT*>(a.w);
  __shared__ float slots[2][kMaxCtaThreads / 32];
  extern __shared__ double group_acc[];  // [(rpc - 1) * hidden]: row groups 1.. of the CTA

  const BackwardSources<RES> in(a);
  WeightSlice<WT> w[Geom::wregs<HC>()];
  G.template load_weights<kWRegs>(wp, w);

  int parity = 0;
  for (int64_t chunk = blockIdx.x; chunk < a.chunks; chunk += gridDim.x) {
    double acc[VMAX][kVec];
    zero_acc(acc);
    const ChunkWalk wk = ChunkWalk::make(a, chunk, G.rpc, G.group, a.order);
    int64_t row = wk.first;
    RowData<VMAX, N> next;
    next.template load<false, L1LOADS>(G, in.src, in.views, row, row < wk.end);
    float rnext = row < wk.end ? a.rstd[row] : 0.f;
    // The loop count is the same for every thread of the CTA (barriers inside the reduction).
    for (int64_t s = 0; s < wk.steps; ++s, row += wk.step) {
      const bool live = row < wk.end;
      const RowData<VMAX, N> cur = next;
      const float r = rnext;
      const int64_t rn = row + wk.step;
      const bool ahead = s + 1 < wk.steps && rn < wk.end;
      next.template load<false, L1LOADS>(G, in.src, in.views, rn, ahead);
      rnext = ahead ? a.rstd[rn] : 0.f;
      float dot = live ? slice_dot<kWRegs>(G, cur.v[0], cur.v[1], w, wp) : 0.f;
      dot = row_allsum(dot, G.warps, &slots[parity][G.group * G.warps]);
      parity ^= 1;
      if (live) slice_dx_dw<kWRegs, RES>(G, a, row, cur.v[0], cur.v[1], cur.v[N - 1], r, dot, w, wp, acc);
    }
    finish_chunk(G, a, chunk, acc, group_acc);
  }
  single_form_tail(a);
}

}  // namespace cake
