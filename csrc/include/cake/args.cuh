// The launch arguments of the two passes: the one interface between a program's binding and its kernels.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdint>

#include "cake/layout.cuh"

namespace cake {

// Field order is latency: a kernel reads its parameters through the constant cache, and at few rows
// every 64-byte line of them it touches is a miss on the launch's critical path (the parameters
// start 16 bytes into a line, at c[0][0x210] on sm_90a). So the fields that address a row's first
// loads come first, within one line; the outputs and eps in the next; host-only fields last.
struct ForwardArgs {
  const __nv_bfloat16* x;
  const void* w;                  // BF16 or FP32 [H]
  RowView xv;
  int64_t rows;                   // --- the first line: the row addresses and loads (48 bytes)
  __nv_bfloat16* y;               // [rows, H] contiguous
  float* rstd;                    // [rows]
  double eps;
  int64_t hidden;                 // --- the second line ends inside rv
  const __nv_bfloat16* residual;  // null when the plain form runs
  __nv_bfloat16* h_out;           // [rows, H] contiguous, residual form only
  RowView rv;
  bool weight_fp32;
  int engine;                     // kWeightRegs or kWeightL1 (fixed widths; generic re-reads L1)
  int cta_rows;                   // rows side by side in a CTA, 1..rows_per_cta (0: rows_per_cta)
  int wide;                       // kNarrowRows, kWideRows (one slice per thread) or kAutoRows
  int pack;                       // canonical threads per thread: 1, or kFwdPack (packed rows)
  int loads;                      // kStreamLoads or kL1Loads (narrow canonical rows only)
  int max_ctas;                   // 0: no cap (the cap exists for tests)
  cudaStream_t stream;
};

// Forward engines: weight slices loaded into registers before the first row, or re-read from L1
// after each row's reduction.
enum ForwardEngine : int { kWeightRegs = 0, kWeightL1 = 1 };

// Forward rows: narrow (the canonical threads, up to four slices each), wide (one slice per
// thread: a row on threads * vpt threads; the same bits), or the launcher's choice between them.
enum ForwardRows : int { kNarrowRows = 0, kWideRows = 1, kAutoRows = 2 };

// Packed forward rows (forward.cuh, has_pack): the canonical threads a thread of them holds, and
// the most slices that makes. Measured (H200, bench/fwd_launch.py --packs 2,4): two canonical
// threads of one slice each win at many rows of H 256; four, or pairs of two-slice threads (H 512),
// won nowhere by more than the noise, so they are not built.
constexpr int kFwdPack = 2;
constexpr int kFwdMaxPackSlices = 2;

// How rows are read: streaming past L1, or allocating in it (vec.cuh load_cached). The route's
// choice by width and row count, measured (cake_windows.MEASURED_L1_LOADS): the forward's narrow
// canonical rows (x and the residual) and the backward's direct engine (g, x and g_residual); the
// forward's packed and wide rows, the ring's bulk copies and the fused form always stream. Same
// bits either way.
enum RowLoads : int { kStreamLoads = 0, kL1Loads = 1 };

// Backward engines: rows into registers a row ahead (direct), or through a shared-memory ring of
// bulk copies (ring).
enum BackwardEngine : int { kDirect = 0, kRing = 1 };

// Which rows a dw chunk holds (both fixed by (T, H), so no bit depends on the grid). contiguous:
// chunk c is rows [c * chunk_rows, (c + 1) * chunk_rows). strided: the chunks take row blocks in
// turn, block j of chunk c being the b rows from (j * chunks + c) * b (b = the direct engine's row
// groups a CTA, ceil(chunk_rows / b) blocks a chunk), so that the CTAs walk one dense band of rows
// together instead of as many bands apart. Both engines walk either order (the ring stages a
// strided item block by block). One-row chunks are the same either way.
enum ChunkOrder : int { kContiguous = 0, kStrided = 1 };

// pair: main + reduce kernel; single: the last CTA reduces; fused: one-row chunks, one launch of
// row CTAs (dx) beside column-tile CTAs (dw from g, x and rstd).
enum BackwardForm : int { kPair = 0, kSingle = 1, kFused = 2 };

// The most CTAs of a fused dw tile's cluster: the portable cluster size.
constexpr int kMaxTileCluster = 8;

// The same order rule as ForwardArgs: what the first loads need, then the outputs (two lines
// between them: the one-row and fused kernels read nothing past them), then the chunked forms'
// partition and workspace, then host-only fields.
struct BackwardArgs {
  const __nv_bfloat16* g;
  const __nv_bfloat16* x;
  const void* w;                   // BF16 or FP32 [H]
  const float* rstd;               // [rows]
  int64_t rows;
  RowView gv, xv;                  // (the first line ends inside gv)
  __nv_bfloat16* dx;               // [rows, H] contiguous
  float* dw;                       // [H]
  int64_t hidden;                  // --- the second line ends here, at 112 bytes
  int64_t chunk_rows, chunks;
  double* partials;                // workspace: [chunks, H]
  unsigned* counter;               // workspace: arrival ticket, zero between calls
  const __nv_bfloat16* g_residual; // null when absent
  RowView grv;
  bool weight_fp32;
  int form;
  int engine;                      // kDirect or kRing
  int stages;                      // ring slots per CTA (set by the launcher)
  int max_ctas;                    // 0: no cap (the cap exists for tests)
  int tile_cluster;                // fused form: CTAs per dw tile (0: the launcher's rule)
  int loads;                       // kStreamLoads or kL1Loads (the direct engine's rows)
  int order;                       // kContiguous or kStrided (ChunkOrder)
  cudaStream_t stream;
};

}  // namespace cake
