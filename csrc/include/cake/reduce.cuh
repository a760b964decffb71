// Canonical in-row reductions and the fixed-order dw combine.
#pragma once
#include <cuda_runtime.h>

namespace cake {

// Butterfly over the 32 lanes: a fixed pairwise tree whose result is bitwise the same on every lane.
// It is a tree over the lanes in index order, adjacent ones first (each pair's sum is the same
// either way round). LANES < 32 runs only its first levels (offsets 1 .. LANES/2): the sum of each
// aligned group of LANES lanes, whose groups a caller then adds in the tree's order.
template <typename T, int LANES = 32>
__device__ __forceinline__ T warp_allsum(T v) {
  static_assert(LANES >= 1 && LANES <= 32 && (LANES & (LANES - 1)) == 0, "a butterfly over 2^k lanes");
#pragma unroll
  for (int o = 1; o < LANES; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum of one value per thread over the `warps` warps of a row, in two halves around one CTA
// barrier: each warp posts its butterfly sum to the row's `slots` (one entry per warp), and after
// the barrier every thread adds the row's warp sums in warp order 0, 1, 2, ... Callers that hold
// their own barrier between the halves (the backward refills its ring there) call them apart.
template <typename T>
__device__ __forceinline__ void post_warp_sum(T v, T* slots, int warps) {
  if ((threadIdx.x & 31) == 0) slots[(threadIdx.x >> 5) % warps] = v;
}

template <typename T>
__device__ __forceinline__ T sum_warp_sums(const T* slots, int warps) {
  T s = slots[0];
  for (int i = 1; i < warps; ++i) s += slots[i];
  return s;
}

// Both halves with the barrier between. `slots` is this row's shared array; the caller
// alternates two arrays between calls so that one barrier suffices. Every thread of the CTA must
// call it (it holds a CTA barrier when a row spans several warps).
template <typename T>
__device__ __forceinline__ T row_allsum(T v, int warps, T* slots) {
  v = warp_allsum(v);
  if (warps == 1) return v;
  post_warp_sum(v, slots, warps);
  __syncthreads();
  return sum_warp_sums(slots, warps);
}

// Neumaier's compensated sum: s + c carries the exact sum far better than s alone.
struct Compensated {
  double s = 0.0, c = 0.0;
  __device__ __forceinline__ void add(double v) {
    const double t = s + v;
    c += (fabs(s) >= fabs(v)) ? ((s - t) + v) : ((v - t) + s);
    s = t;
  }
  __device__ __forceinline__ double value() const { return s + c; }
};

}  // namespace cake
