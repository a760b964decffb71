// What every program shares: grid sizing from the device, and the entry points a program defines.
#pragma once
#include <cuda_runtime.h>
#include <cstdint>

namespace cake {

struct ForwardArgs;
struct BackwardArgs;

// CTAs of `kernel` that fit on the whole device at once (occupancy x SM count), cached per kernel
// and block size for the current device. Grids never exceed it, so no CTA waits for a slot.
inline int64_t resident_ctas(const void* kernel, int threads, size_t smem = 0) {
  struct Entry { const void* k; int threads; int device; int64_t n; };
  static thread_local Entry cache[16] = {};
  int device = 0;
  cudaGetDevice(&device);
  for (auto& e : cache)
    if (e.k == kernel && e.threads == threads && e.device == device) return e.n;
  int sms = 0, per_sm = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem);
  const int64_t n = int64_t(sms) * (per_sm > 0 ? per_sm : 1);
  for (auto& e : cache)
    if (e.k == nullptr) { e = Entry{kernel, threads, device, n}; break; }
  return n;
}

}  // namespace cake

// Defined by each program's kernel file (one of the two, by the program's pass).
cudaError_t cake_program_forward(const cake::ForwardArgs& a);
cudaError_t cake_program_backward(const cake::BackwardArgs& a);
