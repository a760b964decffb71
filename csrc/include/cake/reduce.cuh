// Canonical in-row reductions and the fixed-order dw combine.
#pragma once
#include <cuda_runtime.h>

namespace cake {

// Butterfly over the 32 lanes: a fixed pairwise tree whose result is bitwise the same on every lane.
template <typename T>
__device__ __forceinline__ T warp_allsum(T v) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum of one value per thread over the `warps` warps of a row: lane sums by the butterfly, then
// the warp sums in warp order 0, 1, 2, ... by every thread. `slots` is this row's shared array
// (one entry per warp); the caller alternates two arrays between calls so that one barrier suffices.
// Every thread of the CTA must call it (it holds a CTA barrier when a row spans several warps).
template <typename T>
__device__ __forceinline__ T row_allsum(T v, int warps, T* slots) {
  v = warp_allsum(v);
  if (warps == 1) return v;
  if ((threadIdx.x & 31) == 0) slots[(threadIdx.x >> 5) % warps] = v;
  __syncthreads();
  T s = slots[0];
  for (int i = 1; i < warps; ++i) s += slots[i];
  return s;
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
