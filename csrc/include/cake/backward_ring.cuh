// Backward engine "ring": rows reach shared memory by bulk copies (the copy engine) into a ring of
// slots that warp 0 keeps filled, several items ahead, so the loads in flight do not depend on
// registers. Its start costs more than the direct engine's (barrier setup, the first copies), so
// it is the engine of long chunks: large token counts of wide rows.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdint>

#include "cake/args.cuh"
#include "cake/backward_rows.cuh"
#include "cake/layout.cuh"
#include "cake/pipeline.cuh"
#include "cake/reduce.cuh"
#include "cake/rows.cuh"
#include "cake/vec.cuh"

namespace cake {

// Rows an item gives each row group (one after another, RPC rows apart). Deeper items let one
// CTA barrier and one refill serve more rows; the depths are the fastest measured per width
// (docs/performance.md): four up to 2048 (where an item stays within 32 rows), two at 4096 (its
// CTA's two rows make items of four, what one-row CTAs held at four; no ring window there); at 5120 three
// (640 threads of 96 registers; four spilled, most with the FP32 weight), but two for the residual
// rows, whose three tensors leave depth three two ring slots where depth two has three; two at 6144
// (768 threads of 80 registers; three spilled); one for the generic program (64 registers, two
// vectors per thread). Depth only changes timing: a row group visits the same rows in the same
// order whatever the depth, so no bit of dx or dw depends on it.
__host__ __device__ constexpr int bwd_row_depth(int hc, bool residual) {
  return hc == 0                                                   ? 1
         : hc >= 6144 || (hc >= 5120 && residual)                  ? 2
         : hc >= 5120                                              ? 3
         : hc >= 4096 || bwd_rows_per_cta(row_layout(hc).threads) * 4 > 32 ? 2
                                                                             : 4;
}

// The CTAs per SM a ring CTA's register budget is set for: two CTAs of up to 512 threads (64
// registers each) at depth 1, else one.
__host__ __device__ constexpr int bwd_ctas_per_sm(int threads, int depth) {
  return threads <= kMaxCtaThreads / 2 && depth == 1 ? 2 : 1;
}

// The shared-memory plan of a backward CTA. A ring of `stages` slots, each holding one item
// (item_rows = RPC x depth rows) of every input tensor, then the item's rstd values; after the
// ring, the FP64 dw sums of row groups 1.. and the ring's barriers.
struct StagePlan {
  int64_t row_bytes, tensor_bytes, rstd_off, stage_bytes, acc_off, bar_off, total;
  int stages;
  __host__ __device__ static StagePlan make(int64_t hidden, int rpc, int item_rows, int tensors, int stages) {
    StagePlan p;
    p.row_bytes = hidden * 2;  // a multiple of 16: H is a multiple of 8
    p.tensor_bytes = item_rows * p.row_bytes;
    p.rstd_off = tensors * p.tensor_bytes;
    p.stage_bytes = p.rstd_off + (item_rows * 4 + 15) / 16 * 16;
    p.stages = stages;
    p.acc_off = stages * p.stage_bytes;
    p.bar_off = p.acc_off + int64_t(rpc - 1) * hidden * 8;
    p.total = p.bar_off + stages * 8;
    return p;
  }
};

constexpr int kMaxStages = 8;
// Each ring slot's barrier expects the 32 lanes of warp 0 (their rstd cp.async; an item has at
// most 32 rows) and lane 0's expected-bytes arrival for the bulk copies.
constexpr unsigned kStageArrivals = 33;

// The CTA's items in order: its chunks grid-stride, each walked as ChunkWalk says, RD of its row
// blocks (b = RPC rows each) an item. Item slot row d*b + g is step s + d of row group g's walk.
// Warp 0 keeps the cursor of the next item to stage in shared memory, so that it holds no
// registers through the consumers' loop.
struct ItemCursor {
  int64_t chunk, step;  // the item is steps [step, step + RD) of `chunk`'s walk
};

// Input tensor I of the backward (g, x, then g_residual), read from the kernel parameters.
template <int I>
__device__ __forceinline__ const __nv_bfloat16* bwd_src(const BackwardArgs& a) {
  return I == 0 ? a.g : (I == 1 ? a.x : a.g_residual);
}
template <int I>
__device__ __forceinline__ const RowView& bwd_view(const BackwardArgs& a) {
  return I == 0 ? a.gv : (I == 1 ? a.xv : a.grv);
}

// One tensor's rows of an item into a slot. Lane l stands for slot row l, the row `row` of its
// block (`lead`: the block's first slot row, of `n` rows there). A one-level view's rows come by
// one bulk copy an item from lane 0 (contiguous chunks: the item's blocks are adjacent, item_n
// rows) or one a block from its lead lane (strided); a two-level view's one a row.
template <int I, int ORDER>
__device__ __forceinline__ void stage_tensor(const BackwardArgs& a, const StagePlan& P, int lane, int64_t row,
                                             bool there, bool lead, int n, int item_n, unsigned char* dst,
                                             uint64_t* bar) {
  const RowView& v = bwd_view<I>(a);
  const __nv_bfloat16* src = bwd_src<I>(a);
  if (v.d1 == 1 && v.s0 == a.hidden) {
    if (ORDER == kContiguous ? lane == 0 && item_n > 0 : lead && n > 0)
      bulk_load(dst + lane * P.row_bytes, src + row * v.s0,
                static_cast<uint32_t>((ORDER == kContiguous ? item_n : n) * P.row_bytes), bar);
  } else if (there) {
    bulk_load(dst + lane * P.row_bytes, src + v.offset(row), static_cast<uint32_t>(P.row_bytes), bar);
  }
}

// Warp 0 stages the cursor's item into a ring slot and advances the cursor: the rstd values by
// 4-byte cp.async, the rows of each tensor by bulk copies, all completing on the slot's barrier.
// Does nothing once the CTA's items are exhausted.
template <int N, int RD, int ORDER>
__device__ __forceinline__ void stage_next(const BackwardArgs& a, const StagePlan& P, int b, ItemCursor* cursor,
                                           unsigned char* slot, uint64_t* bar) {
  const int lane = threadIdx.x & 31;
  ItemCursor it = *cursor;
  if (it.chunk >= a.chunks) return;
  const ChunkWalk w = ChunkWalk::make(a, it.chunk, b, 0, ORDER);
  // lane l: slot row l, row g = l % b of the item's block d = l / b (walk step it.step + d)
  const int64_t s = it.step + lane / b;
  const int64_t first = w.first + s * w.step;  // the block's first row
  const int64_t left = lane < RD * b && s < w.steps ? w.end - first : 0;
  const int n = static_cast<int>(left < 0 ? 0 : (left < b ? left : b));  // the block's rows there
  const bool there = lane % b < n;
  const int item_n = __popc(__ballot_sync(0xffffffffu, there));
  if (there) async_copy4(slot + P.rstd_off + 4 * lane, a.rstd + first + lane % b);
  async_copies_arrive(bar);
  if (lane == 0) mbar_arrive_expect_tx(bar, static_cast<uint32_t>(item_n * N * P.row_bytes));
  __syncwarp();
  const bool lead = lane % b == 0;
  const int64_t row = first + lane % b;
  stage_tensor<0, ORDER>(a, P, lane, row, there, lead, n, item_n, slot, bar);
  stage_tensor<1, ORDER>(a, P, lane, row, there, lead, n, item_n, slot + P.tensor_bytes, bar);
  if constexpr (N == 3)
    stage_tensor<2, ORDER>(a, P, lane, row, there, lead, n, item_n, slot + 2 * P.tensor_bytes, bar);
  it.step += RD;
  if (it.step >= w.steps) it = ItemCursor{it.chunk + gridDim.x, 0};
  __syncwarp();
  if (lane == 0) *cursor = it;
  __syncwarp();
}

// A CTA takes dw chunks grid-stride (chunk -> CTA is free; chunk -> rows is fixed by (T, H) and
// the chunk order, ChunkWalk). Its items stream through a ring of shared-memory slots that warp 0
// refills: an item gives row group g its walk's steps s + d, d < RD (the rows the direct engine's
// group g visits, in the same order). Each thread copies its slices of the current item
// into registers; the CTA barrier that the g*w*xhat dots need anyway is also the point where
// that slot is free to refill. Each thread accumulates g*x*rstd for its fixed columns in FP64
// registers; at the end of a chunk the row groups are combined in group order and the chunk's
// partial row is written.
template <int HC, typename WT, bool RES, int RD, int ORDER>
__global__ void __launch_bounds__(bwd_cta_threads(HC), bwd_ctas_per_sm(bwd_cta_threads(HC), RD))
    backward_ring_kernel(const BackwardArgs a) {
  using Geom = RowGeom<false>;
  const Geom G = Geom::make<HC>(a.hidden);
  constexpr int VMAX = Geom::vmax<HC>();
  constexpr int N = RES ? 3 : 2;
  const WT* wp = static_cast<const WT*>(a.w);
  const int item_rows = G.rpc * RD;
  __shared__ float slots[2][RD][kMaxCtaThreads / 32];
  __shared__ ItemCursor cursor;  // warp 0's: the next item to stage
  extern __shared__ __align__(128) unsigned char smem[];
  const StagePlan P = StagePlan::make(G.hidden, G.rpc, item_rows, N, a.stages);
  double* group_acc = reinterpret_cast<double*>(smem + P.acc_off);  // [(rpc - 1) * hidden]
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + P.bar_off);
  const bool producer = threadIdx.x < 32;

  if (threadIdx.x == 0) {
    for (int s = 0; s < P.stages; ++s) mbar_init(&full[s], kStageArrivals);
    fence_mbar_init();
    cursor = ItemCursor{blockIdx.x, 0};
  }
  __syncthreads();
  if (producer)
    for (int s = 0; s < P.stages; ++s)
      stage_next<N, RD, ORDER>(a, P, G.rpc, &cursor, smem + s * P.stage_bytes, &full[s]);
  constexpr bool kWRegs = HC > 0;
  WeightSlice<WT> w[Geom::wregs<HC>()];
  G.template load_weights<kWRegs>(wp, w);

  int parity = 0, slot = 0;
  uint32_t phase = 0;
  for (int64_t chunk = blockIdx.x; chunk < a.chunks; chunk += gridDim.x) {
    double acc[VMAX][kVec];
    zero_acc(acc);
    const ChunkWalk wk = ChunkWalk::make(a, chunk, G.rpc, G.group, ORDER);
    // The loop count is the same for every thread of the CTA (barriers inside). A step past the
    // walk's is past its end too (chunks x chunk_rows >= rows), so the row alone says what is there.
    int64_t row0 = wk.first;
    const int64_t item_step = RD * wk.step;
    for (int64_t items = (wk.steps + RD - 1) / RD; items > 0; --items, row0 += item_step) {
      const unsigned char* st = smem + slot * P.stage_bytes;
      mbar_wait(&full[slot], phase);
      Pack8 cur[RD][N][VMAX];
      float r[RD], dot[RD];
#pragma unroll
      for (int d = 0; d < RD; ++d) {
        const int j = d * G.rpc + G.group;  // this group's row in the item
        const bool live = row0 + d * wk.step < wk.end;
        r[d] = 0.f;
        dot[d] = 0.f;  // this thread's part of sum_j g*w*x, in the canonical order
        if (!live) continue;
#pragma unroll
        for (int i = 0; i < N; ++i)
#pragma unroll
          for (int k = 0; k < VMAX; ++k)
            if (G.owns(k))
              cur[d][i][k] = *reinterpret_cast<const Pack8*>(st + i * P.tensor_bytes + j * P.row_bytes + G.col(k) * 2);
        r[d] = reinterpret_cast<const float*>(st + P.rstd_off)[j];
        dot[d] = slice_dot<kWRegs>(G, cur[d][0], cur[d][1], w, wp);
      }
#pragma unroll
      for (int d = 0; d < RD; ++d) {
        dot[d] = warp_allsum(dot[d]);
        if (G.warps > 1) post_warp_sum(dot[d], &slots[parity][d][G.group * G.warps], G.warps);
      }
      // Every thread has its slices of this slot in registers: warp 0 refills it.
      __syncthreads();
      if (producer) stage_next<N, RD, ORDER>(a, P, G.rpc, &cursor, smem + slot * P.stage_bytes, &full[slot]);
#pragma unroll
      for (int d = 0; d < RD; ++d)
        if (G.warps > 1) dot[d] = sum_warp_sums(&slots[parity][d][G.group * G.warps], G.warps);
      parity ^= 1;
      if (++slot == P.stages) {
        slot = 0;
        phase ^= 1u;
      }
#pragma unroll
      for (int d = 0; d < RD; ++d) {
        const int64_t row = row0 + d * wk.step;
        if (row >= wk.end) continue;
        slice_dx_dw<kWRegs, RES>(G, a, row, cur[d][0], cur[d][1], cur[d][N - 1], r[d], dot[d], w, wp, acc);
      }
    }
    finish_chunk(G, a, chunk, acc, group_acc);
  }
  single_form_tail(a);
}

// Ring depth: as many slots as the shared memory of the CTAs that share an SM allows, up to
// kMaxStages; 0 when not even two slots fit one CTA (the caller then runs the direct engine,
// which computes the same bits).
inline int ring_stages(const StagePlan& one, int ctas_per_sm) {
  int device = 0, per_sm = 0, per_block = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  int64_t budget = int64_t(per_sm) / ctas_per_sm - 2048;  // the per-CTA reservation, static shared data
  if (budget > per_block - 1024) budget = per_block - 1024;
  const int64_t fixed = one.total - one.stage_bytes - 8;
  int64_t s = (budget - fixed) / (one.stage_bytes + 8);
  if (s > kMaxStages) s = kMaxStages;
  return s < 2 ? 0 : static_cast<int>(s);
}

}  // namespace cake
