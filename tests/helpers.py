"""Test helpers shared by the GPU test files."""

from __future__ import annotations

import torch

import cake_rmsnorm_det as crd
from cake_rmsnorm_det import reference as ref

QUALIFIED = (256, 512, 1536, 2048, 4096, 5120, 6144)


def make(rows: int, hidden: int, wdtype: torch.dtype, residual: bool, device, seed: int = 0):
    # drawn on the device (seeded, so reproducible): CPU draws of 65537 x 6144 rows dominate runtime
    gen = torch.Generator(device=device).manual_seed(seed)

    def draw(*shape):
        return torch.randn(*shape, generator=gen, device=device)

    x = draw(rows, hidden).to(torch.bfloat16)
    r = draw(rows, hidden).to(torch.bfloat16) if residual else None
    w = (1.0 + 0.5 * draw(hidden)).to(wdtype)
    g = draw(rows, hidden).to(torch.bfloat16)
    gr = draw(rows, hidden).to(torch.bfloat16) if residual else None
    return x, r, w, g, gr


def poisoned(shape, dtype, device):
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def run_forward(x, w, eps, r=None):
    """Forward into NaN-poisoned outputs."""
    y = poisoned(x.shape, torch.bfloat16, x.device)
    rstd = poisoned(x.shape[:-1], torch.float32, x.device)
    if r is None:
        crd.forward(x, w, eps, out=y, rstd_out=rstd)
        return y, None, rstd
    h = poisoned(x.shape, torch.bfloat16, x.device)
    crd.forward(x, w, eps, residual=r, out=y, h_out=h, rstd_out=rstd)
    return y, h, rstd


def run_backward(g, x, w, rstd, gr=None, ws=None):
    """Backward into NaN-poisoned outputs."""
    dx = poisoned(x.shape, torch.bfloat16, x.device)
    dw = poisoned((x.shape[-1],), torch.float32, x.device)
    crd.backward(g, x, w, rstd, gr, dx=dx, dw=dw, workspace=ws)
    return dx, dw


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    ia = a.contiguous().view(torch.uint8)
    ib = b.contiguous().view(torch.uint8)
    return bool(torch.equal(ia, ib))


def assert_close_bf16(out: torch.Tensor, truth: torch.Tensor, what: str, ulps: int = 1):
    """out (BF16) within `ulps` BF16 ulps of the FP64 truth rounded to BF16, no NaN."""
    assert not torch.isnan(out.float()).any(), f"{what}: NaN (unwritten or wrong)"
    d = ref.bf16_ulp_distance(out, truth.to(torch.bfloat16))  # ordered-integer distance
    assert int(d.max()) <= ulps, f"{what}: {int(d.max())} BF16 ulps from the reference"


def dx_tolerance(dx, g, x, w, rstd, gr=None):
    """(|dx - truth|, allowed) per element. Allowed: one BF16 ulp of the larger of |dx| and
    |truth| (the upper binade's ulp at a boundary), plus 1e-5 of what FP32 rounding can leave
    after cancellation: of the terms r*g*w and r*xhat*c [+ g_residual], and of the row's dot
    c = mean(g*w*xhat), whose absolute error scales with mean|g*w*xhat|, not with |c|.
    1e-5 is ~170 FP32 ulps, and ~400x tighter than one BF16 ulp of those terms."""
    truth, _ = ref.backward_fp64(g, x, w, rstd, gr)
    gd, xd, wd = g.double(), x.double(), w.double()
    r = rstd.double().unsqueeze(-1)
    xhat = xd * r
    gwx = gd * wd * xhat
    c = gwx.mean(-1, keepdim=True)
    scale = r * ((gd * wd).abs() + (xhat * c).abs() + xhat.abs() * gwx.abs().mean(-1, keepdim=True))
    if gr is not None:
        scale = scale + gr.double().abs()
    top = torch.maximum(truth.abs(), dx.double().abs())
    ulp = torch.exp2(torch.floor(torch.log2(top.clamp_min(1e-38))) - 7)
    return (dx.double() - truth).abs(), ulp + 1e-5 * scale


def assert_dx_close(dx, g, x, w, rstd, gr=None, what="dx"):
    """dx within the tolerance of dx_tolerance, no NaN."""
    assert not torch.isnan(dx.float()).any(), f"{what}: NaN (unwritten or wrong)"
    err, allowed = dx_tolerance(dx, g, x, w, rstd, gr)
    bad = err > allowed
    assert not bool(bad.any()), (f"{what}: {int(bad.sum())} elements off; worst excess "
                                 f"{float((err - allowed).max())} at {bad.nonzero()[0].tolist()}")
