// The TVM-FFI face of a program: checks what the kernels rely on, fills the launch arguments,
// launches on the caller's stream and turns a CUDA error into an exception.
// Python has already validated shapes and layouts; these checks guard the raw pointers.
#pragma once
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>

#include <cstdint>

#include "cake/args.cuh"
#include "cake/layout.cuh"
#include "cake/program.cuh"

namespace cake {

using tvm::ffi::TensorView;

constexpr int64_t kWorkspaceHeader = 256;  // bytes before the partials: the arrival ticket

inline void* base_ptr(const TensorView& t) {
  return static_cast<char*>(t.data_ptr()) + t.byte_offset();
}

inline void check_tensor(const TensorView& t, const char* name, int code, int bits) {
  if (t.device().device_type != kDLCUDA) {
    TVM_FFI_THROW(ValueError) << name << " must be a CUDA tensor";
  }
  if (t.dtype().code != code || t.dtype().bits != bits || t.dtype().lanes != 1) {
    TVM_FFI_THROW(TypeError) << name << " has the wrong dtype";
  }
  if (reinterpret_cast<uintptr_t>(base_ptr(t)) % 16 != 0) {
    TVM_FFI_THROW(ValueError) << name << " must be 16-byte aligned";
  }
}

inline void check_bf16(const TensorView& t, const char* name) { check_tensor(t, name, kDLBfloat, 16); }

inline bool weight_is_fp32(const TensorView& w) {
  if (w.dtype().code == kDLFloat && w.dtype().bits == 32) {
    check_tensor(w, "weight", kDLFloat, 32);
    return true;
  }
  check_bf16(w, "weight");
  return false;
}

inline void check_launch(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    TVM_FFI_THROW(RuntimeError) << what << " failed: " << cudaGetErrorName(e) << ": "
                                << cudaGetErrorString(e);
  }
}

inline void check_rows(int64_t rows, int64_t hidden, int64_t d1) {
  if (rows < 0 || hidden <= 0 || hidden % 8 != 0 || hidden > 16384 || d1 < 1) {
    TVM_FFI_THROW(ValueError) << "bad geometry: rows=" << rows << " hidden=" << hidden << " d1=" << d1;
  }
}

// A launch's RowLoads argument (api.py passes cake_jit.row_loads' choice or the test knob's).
inline int checked_loads(int64_t loads, const char* pass) {
  if (loads != kStreamLoads && loads != kL1Loads) TVM_FFI_THROW(ValueError) << "bad " << pass << " launch: loads=" << loads;
  return static_cast<int>(loads);
}

inline void ffi_forward(TensorView x, TensorView residual, TensorView w, TensorView y,
                        TensorView h_out, TensorView rstd, int64_t rows, int64_t hidden, int64_t d1,
                        int64_t sx0, int64_t sx1, int64_t sr0, int64_t sr1, double eps,
                        bool has_residual, int64_t engine, int64_t cta_rows, int64_t wide,
                        int64_t pack, int64_t loads, int64_t max_ctas, int64_t stream) {
  check_rows(rows, hidden, d1);
  check_bf16(x, "x");
  check_bf16(y, "y");
  check_tensor(rstd, "rstd", kDLFloat, 32);
  if (has_residual) {
    check_bf16(residual, "residual");
    check_bf16(h_out, "h_new");
  }
  ForwardArgs a{};
  a.x = static_cast<const __nv_bfloat16*>(base_ptr(x));
  a.residual = has_residual ? static_cast<const __nv_bfloat16*>(base_ptr(residual)) : nullptr;
  a.weight_fp32 = weight_is_fp32(w);
  a.w = base_ptr(w);
  a.y = static_cast<__nv_bfloat16*>(base_ptr(y));
  a.h_out = has_residual ? static_cast<__nv_bfloat16*>(base_ptr(h_out)) : nullptr;
  a.rstd = static_cast<float*>(base_ptr(rstd));
  a.rows = rows;
  a.hidden = hidden;
  a.xv = RowView{d1, sx0, sx1};
  a.rv = RowView{d1, sr0, sr1};
  a.eps = eps;
  if (engine != kWeightRegs && engine != kWeightL1) TVM_FFI_THROW(ValueError) << "unknown forward engine " << engine;
  a.engine = static_cast<int>(engine);
  if (cta_rows < 0 || cta_rows > 1024) TVM_FFI_THROW(ValueError) << "bad forward launch: cta_rows=" << cta_rows;
  a.cta_rows = static_cast<int>(cta_rows);
  if (wide < kNarrowRows || wide > kAutoRows) TVM_FFI_THROW(ValueError) << "bad forward launch: wide=" << wide;
  a.wide = static_cast<int>(wide);
  if (pack != 1 && pack != kFwdPack) {
    TVM_FFI_THROW(ValueError) << "bad forward launch: pack=" << pack;
  }
  a.pack = static_cast<int>(pack);
  a.loads = checked_loads(loads, "forward");
  a.max_ctas = static_cast<int>(max_ctas);
  a.stream = reinterpret_cast<cudaStream_t>(stream);
  if (rows == 0) return;
  check_launch(cake_program_forward(a), "forward launch");
}

inline void ffi_backward(TensorView g, TensorView x, TensorView w, TensorView rstd,
                         TensorView g_residual, TensorView dx, TensorView dw, TensorView workspace,
                         int64_t rows, int64_t hidden, int64_t d1, int64_t sg0, int64_t sg1,
                         int64_t sx0, int64_t sx1, int64_t sr0, int64_t sr1, int64_t chunk_rows,
                         int64_t chunks, int64_t chunk_order, bool has_residual, int64_t form, int64_t engine,
                         int64_t loads, int64_t max_ctas, int64_t tile_cluster, int64_t stream) {
  check_rows(rows, hidden, d1);
  check_bf16(g, "grad_out");
  check_bf16(x, "x");
  check_bf16(dx, "dx");
  check_tensor(rstd, "rstd", kDLFloat, 32);
  check_tensor(dw, "dw", kDLFloat, 32);
  check_tensor(workspace, "workspace", kDLUInt, 8);
  if (has_residual) check_bf16(g_residual, "grad_residual");
  if (chunk_rows < 1 || chunks < 1 || chunks * chunk_rows < rows || (chunks - 1) * chunk_rows >= rows) {
    TVM_FFI_THROW(ValueError) << "bad dw partition: chunk_rows=" << chunk_rows << " chunks=" << chunks;
  }
  const int64_t need = kWorkspaceHeader + chunks * hidden * int64_t(sizeof(double));
  if (workspace.numel() < need) {
    TVM_FFI_THROW(ValueError) << "workspace holds " << workspace.numel() << " bytes, needs " << need;
  }
  if (form != kPair && form != kSingle && form != kFused) TVM_FFI_THROW(ValueError) << "unknown form " << form;
  if (chunk_order != kContiguous && chunk_order != kStrided) {
    TVM_FFI_THROW(ValueError) << "chunk_order must be 0 (contiguous) or 1 (strided), got " << chunk_order;
  }
  // a strided block is a full CTA's row groups, which every form then holds (no cut CTAs)
  const int64_t full_groups = bwd_rows_per_cta(row_layout(static_cast<int>(hidden)).threads);
  if (chunk_order == kStrided && chunk_rows < full_groups) {
    TVM_FFI_THROW(ValueError) << "a strided dw partition needs chunks of at least " << full_groups
                              << " rows at H = " << hidden << ", got " << chunk_rows;
  }
  if (form == kFused && chunk_rows != 1) {
    TVM_FFI_THROW(ValueError) << "the fused form runs one-row chunks, got chunks of " << chunk_rows << " rows";
  }
  BackwardArgs a{};
  a.g = static_cast<const __nv_bfloat16*>(base_ptr(g));
  a.x = static_cast<const __nv_bfloat16*>(base_ptr(x));
  a.weight_fp32 = weight_is_fp32(w);
  a.w = base_ptr(w);
  a.rstd = static_cast<const float*>(base_ptr(rstd));
  a.g_residual = has_residual ? static_cast<const __nv_bfloat16*>(base_ptr(g_residual)) : nullptr;
  a.dx = static_cast<__nv_bfloat16*>(base_ptr(dx));
  a.dw = static_cast<float*>(base_ptr(dw));
  char* ws = static_cast<char*>(base_ptr(workspace));
  a.counter = reinterpret_cast<unsigned*>(ws);
  a.partials = reinterpret_cast<double*>(ws + kWorkspaceHeader);
  a.rows = rows;
  a.hidden = hidden;
  a.chunk_rows = chunk_rows;
  a.chunks = chunks;
  a.order = static_cast<int>(chunk_order);
  a.gv = RowView{d1, sg0, sg1};
  a.xv = RowView{d1, sx0, sx1};
  a.grv = RowView{d1, sr0, sr1};
  a.form = static_cast<int>(form);
  if (engine != kDirect && engine != kRing) TVM_FFI_THROW(ValueError) << "unknown backward engine " << engine;
  a.engine = static_cast<int>(engine);
  a.loads = checked_loads(loads, "backward");
  a.max_ctas = static_cast<int>(max_ctas);
  if (tile_cluster < 0 || tile_cluster > kMaxTileCluster) {
    TVM_FFI_THROW(ValueError) << "tile_cluster must be 0 (the launcher's rule) or 1.." << kMaxTileCluster << ", got "
                              << tile_cluster;
  }
  a.tile_cluster = static_cast<int>(tile_cluster);
  a.stream = reinterpret_cast<cudaStream_t>(stream);
  check_launch(cake_program_backward(a), "backward launch");
}

}  // namespace cake

// A binding file is one of these lines: it exports the program's entry point under a fixed name.
#define CAKE_FORWARD_BINDING() TVM_FFI_DLL_EXPORT_TYPED_FUNC(forward, cake::ffi_forward)
#define CAKE_BACKWARD_BINDING() TVM_FFI_DLL_EXPORT_TYPED_FUNC(backward, cake::ffi_backward)
