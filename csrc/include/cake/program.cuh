// What every program shares: grid sizing from the device, and the entry points a program defines.
#pragma once
#include <cuda_runtime.h>
#include <cstdint>

namespace cake {

struct ForwardArgs;
struct BackwardArgs;

// CTAs of `kernel` that fit on the whole device at once (occupancy x SM count) with `smem` bytes
// of dynamic shared memory, cached per kernel, block size, smem and device. Grids never exceed
// it, so no CTA waits for a slot. On a cache miss it first opts the kernel into dynamic shared
// memory past the default 48 KB (which static shared data counts against too): the occupancy
// query and the launch both need that, and later launches find it in place. Returns 0 when the
// opt-in fails (*err says why).
inline int64_t resident_ctas(const void* kernel, int threads, size_t smem, cudaError_t* err) {
  struct Entry { const void* k; int threads; size_t smem; int device; int64_t n; };
  static thread_local Entry cache[32] = {};
  *err = cudaSuccess;
  int device = 0;
  cudaGetDevice(&device);
  for (auto& e : cache)
    if (e.k == kernel && e.threads == threads && e.smem == smem && e.device == device) return e.n;
  if (smem > 44 * 1024) {  // only ever raised: an earlier, larger opt-in stays valid
    cudaFuncAttributes fa;
    *err = cudaFuncGetAttributes(&fa, kernel);
    if (*err == cudaSuccess && size_t(fa.maxDynamicSharedSizeBytes) < smem)
      *err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (*err != cudaSuccess) return 0;
  }
  int sms = 0, per_sm = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem);
  const int64_t n = int64_t(sms) * (per_sm > 0 ? per_sm : 1);
  for (auto& e : cache)
    if (e.k == nullptr) { e = Entry{kernel, threads, smem, device, n}; break; }
  return n;
}

// The most CTAs one launch may take: the largest grid (2^31 - 1 CTAs), or a test's cap (max_ctas
// > 0). Launchers with more CTAs than that run successive launches (or, with chunks, fewer CTAs).
inline int64_t launch_cta_limit(int max_ctas) {
  constexpr int64_t kMaxGrid = 0x7fffffff;
  return max_ctas > 0 && max_ctas < kMaxGrid ? max_ctas : kMaxGrid;
}

// The current device's SM count, cached per device.
inline int device_sms() {
  static thread_local int cache[64] = {};
  int device = 0;
  cudaGetDevice(&device);
  if (device >= 0 && device < 64 && cache[device] > 0) return cache[device];
  int n = 0;
  cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device);
  if (device >= 0 && device < 64) cache[device] = n;
  return n > 0 ? n : 1;
}

}  // namespace cake

// Defined by each program's kernel file (one of the two, by the program's pass).
cudaError_t cake_program_forward(const cake::ForwardArgs& a);
cudaError_t cake_program_backward(const cake::BackwardArgs& a);
