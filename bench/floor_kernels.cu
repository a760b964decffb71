// Micro kernels for bench/floor.py: bounds on the forward's fixed and per-row costs. Not part of
// the package (no canonical layout, no bit contract): one row per CTA, built and timed beside it.
// k_row: one 16-byte slice per thread (H / 8 threads); k_loop: torch.compile's looped shape.
#include <cuda_bf16.h>
#include <cstdint>

#include "cake/reduce.cuh"
#include "cake/vec.cuh"

using cake::hi_bf16;
using cake::lo_bf16;

__global__ void k_empty(int) {}

// MODE 0: copy x -> y. 1: FP32 sums, rsqrtf. 2: FP64 sums and rsqrt (the package's row math:
// pack_squares, the butterfly, the warp sums in warp order).
template <int MODE>
__device__ __forceinline__ void k_row_body(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, float* rstd,
                                           int hidden, double eps) {
  __shared__ double sd[32];
  __shared__ float sf[32];
  const int64_t row = blockIdx.x;
  const int c = threadIdx.x * 8;
  const bool live = c < hidden;
  cake::Pack8 xv{}, wv{};
  if (live) {
    xv = cake::load_stream(x + row * hidden + c);
    wv = *reinterpret_cast<const cake::Pack8*>(w + c);
  }
  const int warps = blockDim.x / 32;
  float r = 1.f;
  if constexpr (MODE == 1) {
    float s0 = 0.f, s1 = 0.f;
    for (int i = 0; i < 4; ++i) {
      const float a = lo_bf16(xv.u[i]), b = hi_bf16(xv.u[i]);
      s0 += a * a;
      s1 += b * b;
    }
    r = rsqrtf(cake::row_allsum(s0 + s1, warps, sf) / hidden + float(eps));
  } else if constexpr (MODE == 2) {
    r = float(rsqrt(fma(cake::row_allsum(cake::pack_squares(xv), warps, sd), 1.0 / hidden, eps)));
  }
  if (!live) return;
  if (MODE > 0 && threadIdx.x == 0) rstd[row] = r;
  if constexpr (MODE == 0) {
    cake::store_pack(y + row * hidden + c, xv);
    return;
  }
  float xf[8], wf[8], o[8];
  cake::unpack(xv, xf);
  cake::unpack(wv, wf);
  for (int e = 0; e < 8; ++e) o[e] = xf[e] * r * wf[e];
  cake::store_pack(y + row * hidden + c, cake::pack(o));
}

// The same math as MODE 2 with its arguments in one 160-byte struct (as the package passes them).
struct Big { const __nv_bfloat16* x; const __nv_bfloat16* r; const __nv_bfloat16* w; __nv_bfloat16* y; __nv_bfloat16* h;
             float* rstd; int64_t rows, hidden, v[6]; double eps; int m[6]; };
__global__ void k_big(const Big b) { k_row_body<2>(b.x, b.w, b.y, b.rstd, int(b.hidden), b.eps); }
// The same 160 bytes with the fields the kernel reads in its first 48 (one constant-cache line).
struct BigFirst { const __nv_bfloat16* x; const __nv_bfloat16* w; __nv_bfloat16* y; float* rstd; double eps; int hidden, pad;
                  const void* r; void* h; int64_t rows, v[7]; int m[6]; };
__global__ void k_bigfirst(const BigFirst b) { k_row_body<2>(b.x, b.w, b.y, b.rstd, b.hidden, b.eps); }

template <int MODE>
__global__ void k_row(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, float* rstd, int hidden, double eps) {
  k_row_body<MODE>(x, w, y, rstd, hidden, eps);
}

// Triton-like looped rows: 512 threads per row, 4 elements (8 bytes) per thread per round; pass 1
// sums squares in FP64, pass 2 reads x again (L2) with w and writes y. HINT: L2 evict_last on pass
// 1's loads, evict_first on pass 2's (torch.compile's hints).
struct alignas(8) P4 { uint32_t u[2]; };
template <bool HINT>
__device__ __forceinline__ P4 ld4(const void* p, bool last) {
  P4 v;
  if (HINT) {
    uint64_t pol;
    if (last) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    else asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    asm volatile("ld.global.L2::cache_hint.v2.u32 {%0,%1}, [%2], %3;" : "=r"(v.u[0]), "=r"(v.u[1]) : "l"(p), "l"(pol));
  } else {
    asm volatile("ld.global.v2.u32 {%0,%1}, [%2];" : "=r"(v.u[0]), "=r"(v.u[1]) : "l"(p));
  }
  return v;
}
template <bool HINT, int ROUNDS>
__global__ void __launch_bounds__(512) k_loop(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, float* rstd, int hidden, double eps) {
  __shared__ double sd[16];
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * hidden;
  double acc = 0.0;
  for (int r = 0; r < ROUNDS; ++r) {
    const int c = r * 2048 + threadIdx.x * 4;
    if (c < hidden) {
      P4 v = ld4<HINT>(xr + c, true);
      for (int i = 0; i < 2; ++i) { float a = lo_bf16(v.u[i]), b = hi_bf16(v.u[i]); acc += double(a * a); acc += double(b * b); }
    }
  }
  const double s = cake::row_allsum(acc, 16, sd);
  const float rr = float(rsqrt(fma(s, 1.0 / hidden, eps)));
  if (threadIdx.x == 0) rstd[row] = rr;
  for (int r = 0; r < ROUNDS; ++r) {
    const int c = r * 2048 + threadIdx.x * 4;
    if (c < hidden) {
      P4 v = ld4<HINT>(xr + c, false);
      P4 ww = *reinterpret_cast<const P4*>(w + c);
      float o[4] = {lo_bf16(v.u[0]) * rr * lo_bf16(ww.u[0]), hi_bf16(v.u[0]) * rr * hi_bf16(ww.u[0]),
                    lo_bf16(v.u[1]) * rr * lo_bf16(ww.u[1]), hi_bf16(v.u[1]) * rr * hi_bf16(ww.u[1])};
      __nv_bfloat162 h0 = __floats2bfloat162_rn(o[0], o[1]), h1 = __floats2bfloat162_rn(o[2], o[3]);
      P4 out; out.u[0] = *reinterpret_cast<uint32_t*>(&h0); out.u[1] = *reinterpret_cast<uint32_t*>(&h1);
      *reinterpret_cast<P4*>(y + row * hidden + c) = out;
    }
  }
}
template <bool HINT>
int launch_loop(const __nv_bfloat16* X, const __nv_bfloat16* W, __nv_bfloat16* Y, float* rstd, int rows, int hidden) {
  const int rounds = (hidden + 2047) / 2048;
  switch (rounds) {
    case 1: k_loop<HINT, 1><<<rows, 512>>>(X, W, Y, rstd, hidden, 1e-6); break;
    case 2: k_loop<HINT, 2><<<rows, 512>>>(X, W, Y, rstd, hidden, 1e-6); break;
    case 3: k_loop<HINT, 3><<<rows, 512>>>(X, W, Y, rstd, hidden, 1e-6); break;
    default: return -1;
  }
  return 0;
}

// mode: -1 empty, 0 copy, 1 f32, 2 f64, 4 f64 with 160-byte arguments
// read across three constant-cache lines, 5 the same arguments read from one, 6 / 7 k_loop
// without / with L2 eviction hints.
extern "C" int launch(int mode, const void* x, const void* w, void* y, float* rstd, int rows, int hidden) {
  const int threads = (hidden / 8 + 31) / 32 * 32;
  const auto X = static_cast<const __nv_bfloat16*>(x); const auto W = static_cast<const __nv_bfloat16*>(w);
  const auto Y = static_cast<__nv_bfloat16*>(y);
  switch (mode) {
    case -1: k_empty<<<rows, threads>>>(0); break;
    case 0: k_row<0><<<rows, threads>>>(X, W, Y, rstd, hidden, 1e-6); break;
    case 1: k_row<1><<<rows, threads>>>(X, W, Y, rstd, hidden, 1e-6); break;
    case 2: k_row<2><<<rows, threads>>>(X, W, Y, rstd, hidden, 1e-6); break;
    case 4: { Big b{}; b.x = X; b.w = W; b.y = Y; b.rstd = rstd; b.rows = rows; b.hidden = hidden; b.eps = 1e-6;
              k_big<<<rows, threads>>>(b); break; }
    case 5: { BigFirst b{}; b.x = X; b.w = W; b.y = Y; b.rstd = rstd; b.rows = rows; b.hidden = hidden; b.eps = 1e-6;
              k_bigfirst<<<rows, threads>>>(b); break; }
    case 6: if (launch_loop<false>(X, W, Y, rstd, rows, hidden)) return -1; break;
    case 7: if (launch_loop<true>(X, W, Y, rstd, rows, hidden)) return -1; break;
    default: return -1;
  }
  return int(cudaGetLastError());
}
