"""Trying to break it on the GPU: bad input, overlapping outputs, co-resident kernels, no waiting."""

from __future__ import annotations

import threading

import pytest
import torch

import cake_rmsnorm_det as crd
from cake_rmsnorm_det import cake_jit

from helpers import bits_equal, make

pytestmark = pytest.mark.gpu
EPS = 1e-6


def _xwg(device, rows=64, hidden=512):
    x, _, w, g, _ = make(rows, hidden, torch.float32, False, device)
    return x, w, g


def test_bad_inputs_raise_before_launch(device):
    x, w, g = _xwg(device)
    _, rstd = crd.forward(x, w, EPS)
    cases = [
        (TypeError, lambda: crd.forward(x.half(), w, EPS)),
        (TypeError, lambda: crd.forward(x.float(), w, EPS)),
        (ValueError, lambda: crd.forward(x.cpu(), w.cpu(), EPS)),
        (ValueError, lambda: crd.forward(x, w.cpu(), EPS)),
        (ValueError, lambda: crd.forward(x, w[:256], EPS)),
        (ValueError, lambda: crd.forward(x[:, :500], w[:500], EPS)),           # H not a multiple of 8
        (ValueError, lambda: crd.forward(torch.zeros(2, 16392, device=device, dtype=torch.bfloat16),
                                         torch.ones(16392, device=device), EPS)),
        (ValueError, lambda: crd.forward(x.t(), w, EPS)),                        # last dim not contiguous
        (ValueError, lambda: crd.forward(x, w, 0.0)),
        (ValueError, lambda: crd.forward(x, w, -1e-6)),
        (ValueError, lambda: crd.forward(x, w, float("nan"))),
        (TypeError, lambda: crd.forward(x, w.to(torch.float16), EPS)),
        (ValueError, lambda: crd.backward(g[:, :256], x, w, rstd)),
        (ValueError, lambda: crd.backward(g, x, w, rstd[:10])),
        (TypeError, lambda: crd.backward(g, x, w, rstd.double())),
        (ValueError, lambda: crd.backward(g, x, w, rstd, dx=torch.empty(3, device=device, dtype=torch.bfloat16))),
        (ValueError, lambda: crd.backward(g, x, w, rstd, dw=torch.empty(512, device=device, dtype=torch.bfloat16))),
        (ValueError, lambda: crd.backward(g, x, w, rstd, dw=torch.empty(512))),
        (ValueError, lambda: crd.backward(g, x, w, rstd, dx=g)),                 # output overlaps an input
        (ValueError, lambda: crd.forward(x, w, EPS, out=x)),
        (ValueError, lambda: crd.backward(g, x, w, rstd, workspace=torch.zeros(8, dtype=torch.uint8, device=device))),
        (TypeError, lambda: crd.backward(g, x, w, rstd, workspace=torch.zeros(1 << 20, dtype=torch.float32, device=device))),
    ]
    for i, (exc, fn) in enumerate(cases):
        dx_before = g.clone()
        with pytest.raises(exc):
            fn()
        assert bits_equal(g, dx_before), f"case {i} wrote into an input"


def test_error_messages_name_the_rule(device):
    x, w, g = _xwg(device)
    with pytest.raises(ValueError, match="multiple of 8"):
        crd.forward(x[:, :500], w[:500], EPS)
    with pytest.raises(TypeError, match="bfloat16"):
        crd.forward(x.half(), w, EPS)
    with pytest.raises(ValueError, match="workspace"):
        _, rstd = crd.forward(x, w, EPS)
        crd.backward(g, x, w, rstd, workspace=torch.zeros(8, dtype=torch.uint8, device=device))


_HOG_SRC = r"""
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>
#include <cuda_runtime.h>
__global__ void hog(long long cycles, int* flag) {
  extern __shared__ char smem[];
  smem[threadIdx.x] = 1;
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
  if (threadIdx.x == 0 && blockIdx.x == 0) flag[0] = 1;
}
void launch(tvm::ffi::TensorView flag, int64_t ctas, int64_t smem, int64_t cycles, int64_t stream) {
  cudaFuncSetAttribute(hog, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  hog<<<int(ctas), 128, size_t(smem), reinterpret_cast<cudaStream_t>(stream)>>>(
      cycles, static_cast<int*>(flag.data_ptr()));
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) TVM_FFI_THROW(RuntimeError) << cudaGetErrorString(e);
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(launch, launch);
"""


@pytest.fixture(scope="module")
def hog_module():
    import os
    import tempfile

    import tvm_ffi.cpp

    from cake_rmsnorm_det.programs import cuda_home

    os.environ.setdefault("TVM_FFI_CUDA_ARCH_LIST", "9.0a")
    os.environ.setdefault("CUDA_HOME", str(cuda_home()))
    d = tempfile.mkdtemp(prefix="cake-hog-")
    path = os.path.join(d, "hog.cu")
    with open(path, "w") as f:
        f.write(_HOG_SRC)
    lib = tvm_ffi.cpp.build("cake_test_hog", cuda_files=[path], build_directory=d)
    return tvm_ffi.load_module(lib)


@pytest.mark.parametrize("smem_kb", [100, 132])
def test_backward_completes_beside_resident_hog(hog_module, smem_kb, device):
    """Every form finishes with the same bits while another stream keeps a CTA with 100 or 132 KB
    of shared memory resident on every SM (the fused form at 400 rows of H 512 splits its dw tiles
    over clusters of CTAs, which the hardware starts together or not at all)."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    data = {}
    for hidden, rows in ((256, 8), (512, 400), (4096, 5), (4096, 3000), (6144, 70000)):
        x, _, w, g, _ = make(rows, hidden, torch.bfloat16, False, device, seed=rows)
        _, rstd = crd.forward(x, w, EPS)
        forms = ["pair", "single"] + (["fused"] if cake_jit.dw_partition(rows, hidden)[0] == 1 else [])
        for form in forms:
            with crd.force_form(form):
                data[(hidden, rows, form)] = ((g, x, w, rstd), crd.backward(g, x, w, rstd))
    torch.cuda.synchronize()
    hog_stream, work = torch.cuda.Stream(), torch.cuda.Stream()
    flag = torch.zeros(1, dtype=torch.int32, device=device)
    hog_module.launch(flag, sms, smem_kb * 1024, 200_000_000, hog_stream.cuda_stream)  # ~0.1 s
    outs = {}
    with torch.cuda.stream(work):
        for (hidden, rows, form), (args, _) in data.items():
            with crd.force_form(form):
                outs[(hidden, rows, form)] = crd.backward(*args)
    done = threading.Event()

    def wait():
        work.synchronize()
        done.set()

    threading.Thread(target=wait, daemon=True).start()
    assert done.wait(60), "backward did not complete beside the resident kernel"
    hog_stream.synchronize()
    assert int(flag.item()) == 1
    for k, (_, (rdx, rdw)) in data.items():
        dx, dw = outs[k]
        assert bits_equal(dx, rdx) and bits_equal(dw, rdw), f"{k}: bits changed beside the hog"


def test_no_kernel_waits_on_another_cta(device):
    """A grid of one CTA cannot finish if any CTA waits for another: every form, both passes,
    runs to completion (and to the same bits) with launches capped at one CTA (where the fused
    form would split a dw tile over a cluster, H 512 at 400 rows, it keeps one CTA a tile)."""
    for hidden, rows in ((256, 4000), (512, 400), (4096, 7), (4096, 2000), (1000, 999)):
        x, r, w, g, gr = make(rows, hidden, torch.bfloat16, True, device, seed=hidden)
        y, h, rstd = crd.forward(x, w, EPS, residual=r)
        forms = ["pair", "single"] + (["fused"] if cake_jit.dw_partition(rows, hidden)[0] == 1 else [])
        for form in forms:
            with crd.force_form(form):
                dx, dw = crd.backward(g, h, w, rstd, gr)
                with crd.cap_ctas(1):
                    y1, h1, rstd1 = crd.forward(x, w, EPS, residual=r)
                    dx1, dw1 = crd.backward(g, h, w, rstd, gr)
            torch.cuda.synchronize()
            assert bits_equal(y, y1) and bits_equal(rstd, rstd1) and bits_equal(h, h1)
            assert bits_equal(dx, dx1) and bits_equal(dw, dw1), f"H={hidden} rows={rows} {form}"


def test_workspace_reused_across_token_counts(device):
    ws = crd.workspace(70000, 2048, device)
    for rows in (70000, 3, 9, 1000, 65537):
        x, _, w, g, _ = make(rows, 2048, torch.bfloat16, False, device, seed=rows)
        _, rstd = crd.forward(x, w, EPS)
        for form in ("single", "pair"):
            with crd.force_form(form):
                a = crd.backward(g, x, w, rstd, workspace=ws)
                b = crd.backward(g, x, w, rstd)
            assert bits_equal(a[1], b[1]) and bits_equal(a[0], b[0])
    assert not bool(ws[:cake_jit.WORKSPACE_HEADER].any()), "the workspace header (its arrival ticket) was not left at zero"
