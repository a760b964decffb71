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

// Phase marks for bench/phases.cu, which defines CAKE_FWD_PHASE before including this header to
// stamp or stop the kernel at each mark (k: 0 entry, 1 squares summed, so the row's loads landed,
// 2 row sum known, 3 rstd known, 4 stores issued; v: a value computed by then). A no-op here: the
// programs' PTX is the same with or without the marks.
#ifndef CAKE_FWD_PHASE
#define CAKE_FWD_PHASE(k, v) ((void)0)
#endif

namespace cake {

// HC: compile-time width (0 = read from args). A CTA holds up to RPC rows side by side (the
// launch picks how many: blockDim.x / row threads), each thread up to four 16-byte slices of its
// row, all loaded before the first use. One pass: each CTA takes its rows once and exits (the
// hardware backfills), with no grid-stride loop: the loop, though it ran once, cost the few-row
// calls up to a fifth of their time ([1,1536] 2.16 -> 1.76 us, [256,6144] 4.74 -> 3.98; H200,
// bench/variants.py, docs/performance.md). A grid larger than one launch takes, or capped (tests),
// is split into successive launches over whole row groups (launch_forward_rows).
// WREGS: weight slices loaded into registers before the first row (they travel with the first
// row's loads: the engine of few rows), else re-read from L1 after each row's reduction (fewer
// registers, more CTAs per SM: the engine of many rows at some widths).
// WIDE: each canonical thread's vpt slices are held by vpt threads, one each (a row takes
// threads * vpt threads): at few rows per SM a thread's chain of dependent instructions, not
// bandwidth, sets the time, and a wide row's is about vpt times shorter. The canonical thread's
// sum is rebuilt in shared memory in slice order, so the bits are the narrow rows'.
// A row is reduced in the same canonical order whatever the CTA size, width of row or grid: no
// bit depends on them.
// The minimum CTAs of 512 threads per SM the kernel is compiled for (0: none, the compiler's own
// choice). H >= 5120's narrow rows with weights from L1 took 46-48 registers, so at 1024 rows only
// five of their 192-thread CTAs fit an SM and the grid ran in 1.55 waves; held to 40 registers
// (three CTAs of 512 threads, no spills without the residual) all rows fit at once: [1024,6144]
// 10.05 -> 8.29 us (H200, bench/variants.py, docs/bench/2026-12-03-h200-r15-fwd-variants.json).
// Elsewhere a minimum changed the compiler's scheduling for the worse ([4096,1536] 1.25x slower
// at the same 32 registers), so every other kernel keeps none.
template <int HC, bool RES, bool WREGS, bool WIDE>
constexpr int fwd_min_ctas() {
  return HC >= 5120 && !RES && !WREGS && !WIDE ? 3 : 0;
}

// PACK > 1: packed rows, a thread holding PACK canonical threads of a row that the canonical
// layout puts in one warp (RowGeom::pack): the row takes 32 / PACK threads, each thread PACK times
// the loads in flight, and the row's rsqrt and address are shared by PACK times the elements.
// The bits are the canonical row's: each held canonical thread's sum runs the butterfly's levels
// below the span with its own group of lanes, and the thread adds the groups in the tree's order.
template <int HC>
__host__ __device__ constexpr bool has_pack() {
  constexpr RowLayout L = fwd_row_layout(HC > 0 ? HC : 8);
  return HC > 0 && L.threads == 32 && L.threads * L.vpt * kVec == HC && kFwdPack * L.vpt <= kFwdMaxPackSlices;
}

// L1LOADS: the rows' reads allocate in L1 (RowLoads; narrow canonical rows only). FLAT: every view
// is one-level (RowView::flat_offset): no test of d1 and no division path before a row's first
// load (H100, bench/variants.py: [1,256] 1.76 -> 1.70 us, [1024,4096] 7.87 -> 7.57, elsewhere
// 0.98-1.00x; docs/performance.md). Two-level views (the strided head views) keep offset().
template <int HC, typename WT, bool RES, bool WREGS, bool WIDE, int PACK = 1, bool L1LOADS = false, bool FLAT = false>
__global__ void __launch_bounds__(WIDE ? kMaxCtaThreads : kCtaThreads, (fwd_min_ctas<HC, RES, WREGS, WIDE>()))
    forward_kernel(const ForwardArgs a) {
  static_assert(PACK == 1 || (PACK == kFwdPack && has_pack<HC>() && !WIDE), "packed rows: one-warp rows of an exact tiling");
  static_assert(!L1LOADS || (PACK == 1 && !WIDE), "L1 loads: narrow canonical rows");
  CAKE_FWD_PHASE(0, 0.0);
  using Geom = RowGeom<true, PACK>;
  Geom G = Geom::template make<HC>(a.hidden);
  G.rpc = static_cast<int>(blockDim.x) / G.threads;
  if constexpr (WIDE) G.widen();
  if constexpr (PACK > 1) G.pack();
  constexpr int SL = WIDE ? 1 : Geom::template vmax<HC>();  // slices per canonical thread held
  constexpr int VMAX = SL * PACK;                             // slices per thread
  constexpr int N = RES ? 2 : 1;
  const WT* wp = static_cast<const WT*>(a.w);
  __shared__ double slots[kCtaThreads / 32];
  __shared__ double slices[WIDE ? kMaxCtaThreads : 1];  // wide rows: each thread's slice sum
  const __nv_bfloat16* src[N];
  RowView views[N];
  src[0] = a.x;
  views[0] = a.xv;
  if constexpr (RES) {
    src[N - 1] = a.residual;
    views[N - 1] = a.rv;
  }
  WeightSlice<WT> w[WIDE ? 1 : PACK * Geom::template wregs<HC, WREGS>()];
  G.template load_weights<WREGS>(wp, w);

  const double inv_hidden = 1.0 / double(G.hidden);
  // Every thread of the CTA runs the reduction (its barriers); rows past the end only add zeros.
  const int64_t row = int64_t(blockIdx.x) * G.rpc + G.group;
  const bool live = row < a.rows;
  RowData<VMAX, N> cur;
  cur.template load<FLAT, L1LOADS>(G, src, views, row, live);
  // Each canonical thread's slices' sums of squares (each a short chain of its own) added in slice
  // order, one per canonical thread held.
  double lane[PACK];
#pragma unroll
  for (int p = 0; p < PACK; ++p) lane[p] = 0.0;
#pragma unroll
  for (int i = 0; i < VMAX; ++i) {
    if (live && G.holds(i)) {
      if constexpr (RES) {
        float xf[kVec], rf[kVec];
        unpack(cur.v[0][i], xf);
        unpack(cur.v[N - 1][i], rf);
#pragma unroll
        for (int e = 0; e < kVec; ++e) xf[e] += rf[e];
        cur.v[0][i] = pack(xf);  // normalize the BF16 h that is returned, not the FP32 sum
        store_pack(a.h_out + row * G.hidden + G.col_of(i), cur.v[0][i]);
      }
      lane[i / SL] += pack_squares(cur.v[0][i]);
    }
  }
  CAKE_FWD_PHASE(1, lane[0]);
  double ss = lane[0];
  if constexpr (PACK > 1) {
    // The butterfly's levels of offsets below the span, over each held canonical thread's group of
    // span lanes; then its last levels (groups p and p + 1, then pairs of those, ...) are the
    // thread's own adds. No barrier: a packed row is within one warp.
#pragma unroll
    for (int p = 0; p < PACK; ++p) lane[p] = warp_allsum<double, 32 / PACK>(lane[p]);
#pragma unroll
    for (int s = 1; s < PACK; s <<= 1) {
#pragma unroll
      for (int p = 0; p < PACK; p += 2 * s) lane[p] += lane[p + s];
    }
    ss = lane[0];
  } else if constexpr (WIDE) {
    // Slice 0's thread adds the other slices' sums in slice order (each is 0.0 + its pack's
    // sum, as in the narrow thread), then only the canonical threads' warps post.
    slices[threadIdx.x] = ss;
    __syncthreads();
    if (G.k0 == 0) {
      for (int k = 1; k < G.vpt; ++k)
        if (live && G.owns(k)) ss += slices[threadIdx.x + k * G.threads];
    }
    ss = warp_allsum(ss);
    if (G.k0 == 0) post_warp_sum(ss, &slots[G.group * G.warps], G.warps);
    __syncthreads();
    ss = sum_warp_sums(&slots[G.group * G.warps], G.warps);
  } else {
    ss = row_allsum(ss, G.warps, &slots[G.group * G.warps]);
  }
  CAKE_FWD_PHASE(2, ss);
  if (!live) return;
  // rsqrt (FP64, within an ulp of 1/sqrt) of mean + eps: the FP32 rstd is within one FP32 ulp
  // of the FP64 formula's, without FP64 division and square root on every row's critical path.
  const float r = float(rsqrt(fma(ss, inv_hidden, a.eps)));
  CAKE_FWD_PHASE(3, r);
  if (G.t == 0 && G.k0 == 0) a.rstd[row] = r;
#pragma unroll
  for (int i = 0; i < VMAX; ++i) {
    if (G.holds(i)) {
      float xf[kVec], wk[kVec], out[kVec];
      unpack(cur.v[0][i], xf);
      G.template weight<WREGS>(w, wp, i, wk);
#pragma unroll
      for (int e = 0; e < kVec; ++e) out[e] = (xf[e] * r) * wk[e];
      store_pack(a.y + row * G.hidden + G.col_of(i), pack(out));
    }
  }
  CAKE_FWD_PHASE(4, 0.0);
}

// Wide rows are built where they can differ from narrow ones (fixed widths of more than one
// slice per thread, a row within one CTA) and only with weights in registers: the few-rows engine.
template <int HC>
constexpr bool has_wide() {
  return HC > 0 && fwd_row_layout(HC).vpt > 1 && fwd_row_layout(HC).threads * fwd_row_layout(HC).vpt <= kMaxCtaThreads;
}

// The automatic choice runs rows wide, one per CTA, while every row is resident at once and an SM
// holds at most kWideRowsPerSm of them; beyond that the narrow rows' fewer threads do the same
// work with fewer barriers (H200, bench/fwd_launch.py: wide/narrow 0.72-0.89 at T <= 132, 0.87 at
// [528,4096] and 0.90 at [1024,2048] where all rows fit, 1.07-1.24 at [1024,4096] and [4096,512]).
constexpr int kWideRowsPerSm = 8;

// The kernel of a launch's rows: wide, packed, narrow read through L1, or narrow streaming; each
// for one-level views (FLAT: x, and the residual, one-level) or two-level ones.
template <int HC, typename WT, bool RES, bool WREGS, bool FLAT>
auto forward_kernel_for(bool wide, bool packed, bool l1) -> void (*)(ForwardArgs) {
  if constexpr (has_wide<HC>() && WREGS) {
    if (wide) return forward_kernel<HC, WT, RES, true, true, 1, false, FLAT>;
  }
  if constexpr (has_pack<HC>()) {
    if (packed) return forward_kernel<HC, WT, RES, WREGS, false, kFwdPack, false, FLAT>;
  }
  return l1 ? forward_kernel<HC, WT, RES, WREGS, false, 1, true, FLAT> : forward_kernel<HC, WT, RES, WREGS, false, 1, false, FLAT>;
}

template <int HC, typename WT, bool RES, bool WREGS>
auto forward_kernel_of(const ForwardArgs& a, bool wide, bool packed, bool l1) -> void (*)(ForwardArgs) {
  return a.xv.flat() && (!RES || a.rv.flat()) ? forward_kernel_for<HC, WT, RES, WREGS, true>(wide, packed, l1)
                                              : forward_kernel_for<HC, WT, RES, WREGS, false>(wide, packed, l1);
}

// Asks about the wide kernel that would run (one-level views' wide kernels hold fewer registers).
template <int HC, typename WT, bool RES>
bool wide_fits(const ForwardArgs& a) {
  constexpr RowLayout L = fwd_row_layout(HC > 0 ? HC : 8);
  cudaError_t e;
  const int64_t resident = resident_ctas(reinterpret_cast<const void*>(forward_kernel_of<HC, WT, RES, true>(a, true, false, false)),
                                         L.threads * L.vpt, 0, &e);
  return e == cudaSuccess && a.rows <= resident && a.rows <= int64_t(kWideRowsPerSm) * device_sms();
}

// `kernel` over a.rows rows, cta_rows per CTA of `threads`: one launch, or, past the largest grid
// (2^31 - 1 CTAs) or a CTA cap (tests), successive launches over consecutive rows. Each launch
// starts on a whole group of a two-level view (d1 rows of one d0 index), so that its rows'
// addresses are the view's own shifted by whole d0 steps; a capped launch covers at least one
// group. The rows are independent: no bit depends on the split.
inline cudaError_t launch_forward_rows(void (*kernel)(ForwardArgs), const ForwardArgs& a, int cta_rows,
                                       int threads) {
  const int64_t cap = launch_cta_limit(a.max_ctas);
  const int64_t d1 = a.xv.d1;  // the residual's view shares it (the binding passes one d1)
  int64_t per = cap * cta_rows;
  if (d1 > 1) per = per >= d1 ? per / d1 * d1 : d1;
  for (int64_t row0 = 0; row0 < a.rows; row0 += per) {
    const int64_t n = a.rows - row0 < per ? a.rows - row0 : per, group0 = row0 / d1;
    ForwardArgs b = a;
    b.rows = n;
    b.x = a.x + group0 * a.xv.s0;
    if (a.residual) b.residual = a.residual + group0 * a.rv.s0;
    b.y = a.y + row0 * a.hidden;
    if (a.h_out) b.h_out = a.h_out + row0 * a.hidden;
    b.rstd = a.rstd + row0;
    kernel<<<static_cast<unsigned>((n + cta_rows - 1) / cta_rows), threads, 0, a.stream>>>(b);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

// The CTA size comes from the caller (cake_jit.fwd_cta_rows: small token counts spread their rows
// over more, smaller CTAs); 0 means rows_per_cta rows. a.wide: narrow, wide (the CTA size is
// then of wide rows) or the automatic choice above (wide rows one per CTA, or the narrow launch).
// a.pack: kFwdPack for packed rows (narrow, chosen by the caller: cake_jit.fwd_pack; the CTA size
// is then of packed rows), else 1. a.loads: kL1Loads for narrow canonical rows read through L1
// (cake_jit.row_loads); the automatic wide rows (few rows, below every measured L1 edge) stream.
template <int HC, typename WT, bool RES, bool WREGS>
cudaError_t launch_forward_variant(const ForwardArgs& a) {
  const bool packed = a.pack != 1;
  if (packed && (a.pack != kFwdPack || !has_pack<HC>() || a.wide == kWideRows)) return cudaErrorInvalidValue;
  if constexpr (has_wide<HC>()) {
    if (!packed && a.wide == kAutoRows && wide_fits<HC, WT, RES>(a)) {
      ForwardArgs w = a;
      w.wide = kWideRows;
      w.cta_rows = 1;
      w.loads = kStreamLoads;
      return launch_forward_variant<HC, WT, RES, true>(w);
    }
  }
  const bool wide = a.wide == kWideRows;
  if (wide && !(has_wide<HC>() && WREGS)) return cudaErrorInvalidValue;
  const bool l1 = a.loads == kL1Loads;
  if (l1 && (packed || wide)) return cudaErrorInvalidValue;
  const RowLayout L = fwd_row_layout(static_cast<int>(a.hidden));
  const int span = wide ? L.threads * L.vpt : L.threads / a.pack;  // threads per row
  const int rpc = rows_per_cta(span);
  if (a.cta_rows < 0 || a.cta_rows > rpc) return cudaErrorInvalidValue;
  const int cta_rows = a.cta_rows > 0 ? a.cta_rows : rpc;
  return launch_forward_rows(forward_kernel_of<HC, WT, RES, WREGS>(a, wide, packed, l1), a, cta_rows, cta_rows * span);
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

// Fixed widths build both weight engines (the route picks per token window; the automatic wide
// rows hold their weights in registers whatever the window's engine); the generic program
// re-reads its weights from L1 whatever the engine.
template <int HC>
cudaError_t launch_forward_width(const ForwardArgs& a) {
  if (a.engine != kWeightRegs && a.engine != kWeightL1) return cudaErrorInvalidValue;
  if (a.wide != kNarrowRows && a.wide != kWideRows && a.wide != kAutoRows) return cudaErrorInvalidValue;
  if (a.loads != kStreamLoads && a.loads != kL1Loads) return cudaErrorInvalidValue;
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
