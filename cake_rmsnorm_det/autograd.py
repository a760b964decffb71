"""PyTorch integration: torch.library custom ops (with fake kernels), autograd, rmsnorm(), RMSNorm.

The ops are opaque to torch.compile (one node each, traced through their fake kernels with
symbolic token counts), so a compiled model keeps the kernels' bits and does not recompile when
T changes. Eager calls take an autograd.Function over the same kernels instead: the dispatcher's
custom-op layer cost more host time than the rest of a call (docs/performance.md, "Host time a
call").
"""

from __future__ import annotations

import numbers
from typing import Optional, Sequence, Union

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx

from . import api

_NS = "cake_rmsnorm_det"


def _forward(x: Tensor, weight: Tensor, residual: Optional[Tensor], eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(y, h_new, rstd); h_new is empty when there is no residual."""
    if residual is None:
        y, rstd = api.forward(x, weight, eps)
        return y, x.new_empty(0), rstd
    return api.forward(x, weight, eps, residual=residual)


@torch.library.custom_op(f"{_NS}::rmsnorm_fwd", mutates_args=())
def _fwd_op(x: Tensor, weight: Tensor, residual: Optional[Tensor], eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """Returns (y, h_new, rstd); h_new is empty when there is no residual."""
    return _forward(x, weight, residual, eps)


@_fwd_op.register_fake
def _(x: Tensor, weight: Tensor, residual: Optional[Tensor], eps: float) -> tuple[Tensor, Tensor, Tensor]:
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    h = torch.empty_like(x, memory_format=torch.contiguous_format) if residual is not None else x.new_empty(0)
    return y, h, x.new_empty(x.shape[:-1], dtype=torch.float32)


@torch.library.custom_op(f"{_NS}::rmsnorm_bwd", mutates_args=())
def _bwd_op(grad_out: Tensor, x: Tensor, weight: Tensor, rstd: Tensor,
            grad_residual: Optional[Tensor]) -> tuple[Tensor, Tensor]:
    """Returns (dx, dw) with dw in FP32."""
    return api.backward(grad_out, x, weight, rstd, grad_residual)


@_bwd_op.register_fake
def _(grad_out: Tensor, x: Tensor, weight: Tensor, rstd: Tensor,
      grad_residual: Optional[Tensor]) -> tuple[Tensor, Tensor]:
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            x.new_empty(x.shape[-1], dtype=torch.float32))


def _setup_context(ctx, inputs, output) -> None:
    x, weight, residual, eps = inputs
    y, h, rstd = output
    ctx.has_residual = residual is not None
    ctx.save_for_backward(h if residual is not None else x, weight, rstd)


def _grads(ctx, grad_y: Optional[Tensor], grad_h: Optional[Tensor], backward) -> tuple:
    """The gradients of (x, weight, residual, eps) from those of (y, h_new), by `backward` (the
    custom op, or api.backward itself on the eager path: the same kernels)."""
    xin, weight, rstd = ctx.saved_tensors
    if grad_y is None:
        grad_y = torch.zeros_like(xin)
    g_res = grad_h if (ctx.has_residual and grad_h is not None and grad_h.numel()) else None
    dx, dw = backward(grad_y.contiguous() if grad_y.stride(-1) != 1 else grad_y, xin, weight, rstd, g_res)
    dres = dx if ctx.has_residual else None
    return dx, dw.to(weight.dtype), dres, None


def _backward(ctx, grad_y: Optional[Tensor], grad_h: Optional[Tensor], grad_rstd: Optional[Tensor]):
    return _grads(ctx, grad_y, grad_h, _bwd_op)


torch.library.register_autograd(f"{_NS}::rmsnorm_fwd", _backward, setup_context=_setup_context)


class _EagerRMSNorm(torch.autograd.Function):
    """rmsnorm's eager path: the custom op's forward and backward without the dispatcher's layer
    (on a 2-core CPU a forward and backward's host time outside the kernels' calls: 114 -> 52 us)."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: Tensor, weight: Tensor, residual: Optional[Tensor],
                eps: float) -> tuple[Tensor, Tensor, Tensor]:
        """(y, h_new, rstd) as the custom op returns them; rstd takes no gradient."""
        out = _forward(x, weight, residual, eps)
        _setup_context(ctx, (x, weight, residual, eps), out)
        ctx.mark_non_differentiable(out[2])
        return out

    @staticmethod
    def backward(ctx: FunctionCtx, grad_y: Optional[Tensor], grad_h: Optional[Tensor],
                 grad_rstd: Optional[Tensor]) -> tuple:
        """The gradients of (x, weight, residual, eps), by api.backward."""
        return _grads(ctx, grad_y, grad_h, api.backward)


def _resolve_eps(eps: Optional[float], x: Tensor) -> float:
    # None is torch.nn.RMSNorm's default: the machine epsilon of the input's dtype (2**-7 for BF16).
    return torch.finfo(x.dtype).eps if eps is None else eps


def rmsnorm(x: Tensor, weight: Tensor, eps: Optional[float] = 1e-6,
            residual: Optional[Tensor] = None) -> Union[Tensor, tuple[Tensor, Tensor]]:
    """Deterministic RMSNorm with autograd: ``y``, or ``(y, h_new)`` with a residual.

    ``eps=None`` takes ``torch.finfo(x.dtype).eps``, as ``torch.nn.functional.rms_norm`` does.
    Gradients flow to x, residual and weight (dw is computed in FP32, cast to weight's dtype)."""
    eps = api._check_eps(_resolve_eps(eps, x))  # before the op's float(): "1e-6" is no eps
    norm = _fwd_op if torch.compiler.is_compiling() else _EagerRMSNorm.apply
    y, h, _ = norm(x, weight, residual, eps)
    return (y, h) if residual is not None else y


class RMSNorm(torch.nn.Module):
    """Drop-in for ``torch.nn.RMSNorm``, with deterministic kernels.

    Args:
        normalized_shape: H, or the trailing shape to normalize over (``(H,)``, or e.g. ``(4, 64)``:
            the last dimensions, read as one row of their product, which must be a supported width).
        eps: added to the mean square; None (the default, as in torch.nn.RMSNorm) takes
            ``torch.finfo(x.dtype).eps`` at each call (2**-7 for BF16 x). LLMs usually pass 1e-5 / 1e-6.
        elementwise_affine: learn a weight (initialised to ones); without it the weight is 1.
        device, dtype: of the weight (BF16 or FP32).

    ``forward(x, residual=None)`` returns y, or ``(y, h_new)`` with a residual.
    """

    __constants__ = ["normalized_shape", "eps", "elementwise_affine"]

    def __init__(self, normalized_shape: Union[int, Sequence[int]], eps: Optional[float] = None,
                 elementwise_affine: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (int(normalized_shape),)
        self.normalized_shape = tuple(int(s) for s in normalized_shape)
        if not self.normalized_shape or any(s < 1 for s in self.normalized_shape):
            raise ValueError(f"normalized_shape must be H or a non-empty shape of positive sizes, got "
                             f"{self.normalized_shape}")
        self.eps = None if eps is None else float(eps)
        self.elementwise_affine = elementwise_affine
        dtype = dtype if dtype is not None else torch.float32
        if dtype not in (torch.float32, torch.bfloat16):
            raise TypeError(f"weight dtype must be float32 or bfloat16, got {dtype}")
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_buffer("_ones", torch.ones(self.normalized_shape, device=device, dtype=dtype),
                                 persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Set the weight to ones (as torch.nn.RMSNorm does)."""
        if self.weight is not None:
            torch.nn.init.ones_(self.weight)

    def forward(self, x: Tensor, residual: Optional[Tensor] = None) -> Union[Tensor, tuple[Tensor, Tensor]]:
        """y = RMSNorm(x) (BF16 x of last dimension normalized_shape); with `residual`, (y, h_new) where
        h_new = x + residual is normalized and returned for the next layer."""
        w = self.weight if self.weight is not None else self._ones
        k = len(self.normalized_shape)
        if k == 1:
            return rmsnorm(x, w, self.eps, residual)
        # Several normalized dimensions: one row of their product (reshape copies only where the
        # trailing dimensions cannot be merged in place; autograd flows through the views).
        if not isinstance(x, Tensor) or tuple(x.shape[-k:]) != self.normalized_shape:
            raise ValueError(f"x must end in the normalized shape {list(self.normalized_shape)}, got "
                             f"{list(x.shape) if isinstance(x, Tensor) else type(x).__name__}")
        if residual is not None and (not isinstance(residual, Tensor) or residual.shape != x.shape):
            raise ValueError(f"residual must have x's shape {list(x.shape)}, got "
                             f"{list(residual.shape) if isinstance(residual, Tensor) else type(residual).__name__}")
        rows = (*x.shape[:-k], w.numel())
        out = rmsnorm(x.reshape(rows), w.reshape(-1), self.eps, None if residual is None else residual.reshape(rows))
        if residual is None:
            return out.view(x.shape)
        return out[0].view(x.shape), out[1].view(x.shape)

    def extra_repr(self) -> str:
        """The module's arguments, as torch.nn.RMSNorm prints them."""
        return "{normalized_shape}, eps={eps}, elementwise_affine={elementwise_affine}".format(**self.__dict__)
