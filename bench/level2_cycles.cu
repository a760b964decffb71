// Cycles of the dw combine's level 2 in one warp (GPU; a standalone program, not part of the package).
//
//     nvcc -std=c++17 -O3 -arch=sm_90a --prec-div=true --prec-sqrt=true --ftz=false -Icsrc/include \
//         -o /tmp/level2_cycles bench/level2_cycles.cu && /tmp/level2_cycles
//
// (the package's flags, programs.NVCC_FLAGS, so that the walk is the code the programs build).
// The reduce kernel's level 2 is one warp walking a column per lane over <= 32 block results in
// shared memory (dw_reduce.cuh, dw_final_of) while the CTA's other warps have exited. This times
// that walk with clock64 in a CTA shaped like the reduce kernel's (1024 threads, the blocks in
// shared memory), beside a bare chain of 32 dependent FP64 adds (the floor of any walk in block
// order) and the same walk without the compensation (a plain sum of the blocks' sums).
#include <cstdio>
#include <cuda_runtime.h>

#include "cake/dw_reduce.cuh"

namespace {

__device__ __forceinline__ long long clock_now() {
  long long t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory");
  return t;
}

__device__ __noinline__ double fp64_chain(const double* v) {
  double r[cake::kMaxBlocks], s = 0.0;
#pragma unroll
  for (int i = 0; i < cake::kMaxBlocks; ++i) r[i] = v[i];
#pragma unroll
  for (int i = 0; i < cake::kMaxBlocks; ++i) s += r[i];
  return s;
}

__device__ __noinline__ float plain_walk(const double2* blocks, int64_t nb, int64_t stride) {
  double s = 0.0;
  for (int64_t b = 0; b < nb; ++b) s += blocks[b * stride].x;
  return float(s);
}

__device__ __noinline__ float package_walk(const double2* blocks, int64_t nb, int64_t stride) {
  return cake::dw_final_of(blocks, nb, stride);
}

constexpr int kWays = 3;

__global__ void __launch_bounds__(1024) level2_cycles(float* sink, long long* cycles, int64_t nb, const double* zeros) {
  __shared__ double2 blocks[cake::kMaxBlocks][cake::kReduceTile];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  blocks[warp][lane] = make_double2(1.0 + warp * 1e-3 + lane * 1e-7, 1e-17 * warp);
  __syncthreads();
  if (warp != 0) return;
  float acc = 0.f;
  for (int rep = 0; rep < 3; ++rep) {  // the last repetition's counts: code and data warm
    long long t[kWays + 1];
    t[0] = clock_now();
    acc += package_walk(&blocks[0][lane], nb, cake::kReduceTile);
    t[1] = clock_now();
    acc += float(fp64_chain(zeros + lane));
    t[2] = clock_now();
    acc += plain_walk(&blocks[0][lane], nb, cake::kReduceTile);
    t[3] = clock_now();
    if (lane == 0)
      for (int i = 0; i < kWays; ++i) cycles[i] = t[i + 1] - t[i];
  }
  sink[lane] = acc;
}

bool check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}

}  // namespace

int main() {
  float* sink = nullptr;
  long long* cycles = nullptr;
  double* zeros = nullptr;
  if (!check(cudaMalloc(&sink, 32 * sizeof(float)), "cudaMalloc") ||
      !check(cudaMalloc(&cycles, kWays * sizeof(long long)), "cudaMalloc") ||
      !check(cudaMalloc(&zeros, 64 * sizeof(double)), "cudaMalloc") ||
      !check(cudaMemset(zeros, 0, 64 * sizeof(double)), "cudaMemset"))
    return 1;
  const char* names[kWays] = {"level 2 (dw_final_of)", "32 dependent FP64 adds", "plain sum of the blocks"};
  for (int64_t nb : {8, 32}) {
    level2_cycles<<<1, 1024>>>(sink, cycles, nb, zeros);
    if (!check(cudaGetLastError(), "launch") || !check(cudaDeviceSynchronize(), "kernel")) return 1;
    long long h[kWays];
    if (!check(cudaMemcpy(h, cycles, sizeof(h), cudaMemcpyDeviceToHost), "cudaMemcpy")) return 1;
    std::printf("%lld blocks:\n", static_cast<long long>(nb));
    for (int i = 0; i < kWays; ++i) {
      const double per = double(h[i]) / (i == 1 ? cake::kMaxBlocks : nb);
      std::printf("  %-28s %6lld cycles (%.1f per block)\n", names[i], h[i], per);
    }
  }
  return 0;
}
