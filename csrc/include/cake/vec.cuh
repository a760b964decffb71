// 16-byte vector I/O for BF16 rows and the weight vector.
// Every row access of the package goes through these, so the widths and cache hints live in one place.
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

namespace cake {

constexpr int kVec = 8;  // BF16 elements in one 16-byte access

// A row slice of 8 BF16 values as one 16-byte register quad.
struct alignas(16) Pack8 {
  uint32_t u[4];
};

// Streaming read of data used once: bypass L1 allocation, keep the read-only path.
__device__ __forceinline__ Pack8 load_stream(const __nv_bfloat16* p) {
  Pack8 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.u[0]), "=r"(v.u[1]), "=r"(v.u[2]), "=r"(v.u[3])
               : "l"(p));
  return v;
}

// The same read allocating in L1 (the read-only path without no_allocate). At many rows the rows'
// reads complete sooner: forward [65536,4096] 274.2 -> 261.4 us, [16384,6144] 102.6 -> 99.0;
// backward (the direct engine) [262144,256] 113.7 -> 108.2, the query view of 65536 tokens 629.3 ->
// 594.7 (H200, bench/variants.py, docs/performance.md). Below a few thousand rows (tens of
// thousands in the backward, and in the forward at H 256 / 512) the streaming read is as fast or
// faster, so the route picks per width and row count (args.cuh RowLoads).
__device__ __forceinline__ Pack8 load_cached(const __nv_bfloat16* p) {
  Pack8 v;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.u[0]), "=r"(v.u[1]), "=r"(v.u[2]), "=r"(v.u[3])
               : "l"(p));
  return v;
}

// 2 BF16 values (4 bytes, one word) through the read-only path: the fused form's tile lanes.
__device__ __forceinline__ uint32_t load_pair(const __nv_bfloat16* p) {
  return __ldg(reinterpret_cast<const unsigned int*>(p));
}

__device__ __forceinline__ void store_pack(__nv_bfloat16* p, const Pack8& v) {
  asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.u[0]), "r"(v.u[1]),
               "r"(v.u[2]), "r"(v.u[3])
               : "memory");
}

// 8 FP32 values as two 16-byte stores (p 16-byte aligned): the counterpart of load_weight8<float>.
__device__ __forceinline__ void store_float8(float* p, const float (&f)[kVec]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
}

// BF16 -> FP32 is exact: the BF16 bits are the high half of the FP32 bits.
__device__ __forceinline__ float lo_bf16(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float hi_bf16(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

__device__ __forceinline__ void unpack(const Pack8& v, float (&f)[kVec]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = lo_bf16(v.u[i]);
    f[2 * i + 1] = hi_bf16(v.u[i]);
  }
}

__device__ __forceinline__ void unpack(uint32_t v, float (&f)[2]) {
  f[0] = lo_bf16(v);
  f[1] = hi_bf16(v);
}

// Sum of the squares of a pack's 8 BF16 values in FP64, in a fixed order: the low and the high
// halves of the four words in two chains of four (short dependent chains: a row's sum of squares
// is on the critical path of every forward row), then low + high. A BF16 square is exact in FP32
// and its FP32 -> FP64 widening is exact, so each add rounds once.
__device__ __forceinline__ double pack_squares(const Pack8& v) {
  double lo = 0.0, hi = 0.0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float a = lo_bf16(v.u[i]), b = hi_bf16(v.u[i]);
    lo += double(a * a);
    hi += double(b * b);
  }
  return lo + hi;
}

// FP32 -> BF16 with round-to-nearest-even (the rounding torch uses for .to(bfloat16)).
__device__ __forceinline__ Pack8 pack(const float (&f)[kVec]) {
  Pack8 v;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    v.u[i] = *reinterpret_cast<uint32_t*>(&h);
  }
  return v;
}

// Weight slice of 8 columns as FP32, from a BF16 or FP32 weight vector (read once per CTA).
template <typename WT>
__device__ __forceinline__ void load_weight8(const WT* w, int64_t col, float (&f)[kVec]);

template <>
__device__ __forceinline__ void load_weight8<__nv_bfloat16>(const __nv_bfloat16* w, int64_t col,
                                                            float (&f)[kVec]) {
  Pack8 v = *reinterpret_cast<const Pack8*>(w + col);
  unpack(v, f);
}

template <>
__device__ __forceinline__ void load_weight8<float>(const float* w, int64_t col, float (&f)[kVec]) {
  const float4 a = *reinterpret_cast<const float4*>(w + col);
  const float4 b = *reinterpret_cast<const float4*>(w + col + 4);
  f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
  f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}

// A weight slice of 8 columns held in registers in its own dtype (a BF16 slice takes 4 registers,
// not 8) and widened to FP32 where it is used.
template <typename WT>
struct WeightSlice;

template <>
struct WeightSlice<__nv_bfloat16> {
  Pack8 p;
  __device__ __forceinline__ void load(const __nv_bfloat16* w, int64_t col) {
    p = *reinterpret_cast<const Pack8*>(w + col);
  }
  __device__ __forceinline__ void get(float (&f)[kVec]) const { unpack(p, f); }
};

template <>
struct WeightSlice<float> {
  float v[kVec];
  __device__ __forceinline__ void load(const float* w, int64_t col) { load_weight8(w, col, v); }
  __device__ __forceinline__ void get(float (&f)[kVec]) const {
#pragma unroll
    for (int e = 0; e < kVec; ++e) f[e] = v[e];
  }
};

}  // namespace cake
