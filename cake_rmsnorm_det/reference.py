"""Reference math for tests and benchmarks: the FP32 formula (what PyTorch users compute) and the
FP64 truths that accuracy is measured against. Runs on any device, CPU included."""

from __future__ import annotations

from typing import Optional

import torch


def rstd_fp64(x: torch.Tensor, eps: float) -> torch.Tensor:
    """FP64 rstd of each row of a BF16/FP32 tensor: 1/sqrt(mean(x^2) + eps)."""
    xd = x.double()
    return torch.rsqrt(xd.pow(2).mean(-1) + eps)


def forward_fp32(x: torch.Tensor, w: torch.Tensor, eps: float,
                 residual: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, ...]:
    """The FP32 formula: (y, rstd) or (y, h_new, rstd), y and h_new rounded to BF16 once."""
    h = None
    if residual is not None:
        h = (x.float() + residual.float()).to(torch.bfloat16)
        x = h
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    y = (xf * rstd * w.float()).to(torch.bfloat16)
    rstd = rstd.squeeze(-1)
    return (y, h, rstd) if h is not None else (y, rstd)


def _backward(g, x, w, rstd, g_residual, dtype):
    gf, xf, wf = g.to(dtype), x.to(dtype), w.to(dtype)
    r = rstd.to(dtype).unsqueeze(-1)
    xhat = xf * r
    gw = gf * wf
    c = (gw * xhat).mean(-1, keepdim=True)
    dx = r * (gw - xhat * c)
    if g_residual is not None:
        dx = dx + g_residual.to(dtype)
    dw = (gf * xhat).reshape(-1, x.shape[-1]).sum(0)
    return dx, dw


def backward_fp32(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor, rstd: torch.Tensor,
                  g_residual: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The FP32 formula for (dx in BF16, dw in FP32) at the given rstd."""
    dx, dw = _backward(g, x, w, rstd, g_residual, torch.float32)
    return dx.to(torch.bfloat16), dw


def backward_fp64(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor, rstd: torch.Tensor,
                  g_residual: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dw) in FP64 at the given (FP32) rstd: the truth for accuracy. dw sums the exact
    products g*x*rstd (xhat = x*rstd is exact in FP64)."""
    return _backward(g, x, w, rstd, g_residual, torch.float64)


def dw_fp64(g: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor) -> torch.Tensor:
    """FP64 column sums of g*x*rstd (the exact products, summed in FP64)."""
    h = x.shape[-1]
    return (g.double().reshape(-1, h) * x.double().reshape(-1, h) * rstd.double().reshape(-1, 1)).sum(0)


def dw_fp32_eager(g: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor) -> torch.Tensor:
    """The FP32 eager reduction PyTorch users get: (g.float()*x.float()*rstd).sum(0)."""
    h = x.shape[-1]
    return (g.float().reshape(-1, h) * x.float().reshape(-1, h) * rstd.float().reshape(-1, 1)).sum(0)


def dw_error_ratio(dw: torch.Tensor, ref: torch.Tensor, atol: float = 1e-4, rtol: float = 1e-4) -> float:
    """max_j |dw_j - ref_j| / (atol + rtol*|ref_j|): <= 1 is within the budget."""
    return float(((dw.double() - ref).abs() / (atol + rtol * ref.abs())).max())


def _ordered_bits(t: torch.Tensor) -> torch.Tensor:
    """A BF16 / FP32 tensor's bits as int64, ordered like its values (sign and magnitude to signed)."""
    bits, magnitude = {torch.bfloat16: (torch.int16, 0x7FFF), torch.float32: (torch.int32, 0x7FFFFFFF)}[t.dtype]
    i = t.contiguous().view(bits).to(torch.int64)
    return torch.where(i < 0, -(i & magnitude), i)


def bf16_ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Distance in BF16 ulps between two BF16 tensors (as ordered integers; NaN-free inputs)."""
    return (_ordered_bits(a) - _ordered_bits(b)).abs()


def fp32_ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Distance in FP32 ulps between two FP32 tensors (as ordered integers)."""
    return (_ordered_bits(a) - _ordered_bits(b)).abs()


def input_family(name: str, rows: int, hidden: int, device: torch.device | str = "cpu",
                 seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, g) in BF16 for one accuracy family: 'normal', 'outliers' (a few channels ~40x) or
    'positive' (x = |N|+1, g = 1 + 0.1 N: column sums that do not cancel)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(rows, hidden, generator=gen)
    g = torch.randn(rows, hidden, generator=gen)
    if name == "outliers":
        cols = torch.randperm(hidden, generator=gen)[: max(1, hidden // 256)]
        x[:, cols] *= 40.0
    elif name == "positive":
        x = x.abs() + 1.0
        g = 1.0 + 0.1 * g
    elif name != "normal":
        raise ValueError(f"unknown input family {name!r}")
    return x.to(torch.bfloat16).to(device), g.to(torch.bfloat16).to(device)


FAMILIES = ("normal", "outliers", "positive")
