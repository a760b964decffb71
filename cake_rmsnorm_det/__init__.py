"""cake_rmsnorm_det: deterministic RMSNorm forward and backward for training, as JIT-compiled
CUDA programs loaded through TVM-FFI.

    import cake_rmsnorm_det as crd
    y, rstd = crd.forward(x, w, eps)
    y, h_new, rstd = crd.forward(x, w, eps, residual=r)
    dx, dw = crd.backward(g, x, w, rstd)
    y = crd.rmsnorm(x, w, eps=1e-6)
    norm = crd.RMSNorm(4096, eps=1e-6, dtype=torch.float32)  # eps=None: finfo(x.dtype).eps, as torch
    crd.explain_route("bwd", hidden=4096, tokens=65536, weight_dtype=torch.bfloat16)
"""

from .api import (backward, cap_ctas, force_chunk_order, force_cta_rows, force_engine, force_form,
                  force_l1_loads, force_pack, force_tile_cluster, force_wide, forward, workspace, workspace_bytes)
from .autograd import RMSNorm, rmsnorm


def explain_route(pass_: str, hidden: int, tokens: int, weight_dtype: "str | torch.dtype" = "bf16",
                  residual: bool = False, arch: "str | None" = None, heads: int = 1) -> "RouteInfo":
    """Which program runs for `tokens` x `heads` rows of width `hidden`, in which form, and why
    (see :func:`cake_rmsnorm_det.routes.explain_route`)."""
    from .routes import explain_route as _explain

    return _explain(pass_, hidden, tokens, weight_dtype, residual, arch, heads)


def __getattr__(name: str):
    if name == "RouteInfo":
        from .routes import RouteInfo

        return RouteInfo
    raise AttributeError(name)

__version__ = "0.1.0"

# FlashInfer-style long names: code written against that API runs unchanged.
cake_rmsnorm_det_train_forward = forward
cake_rmsnorm_det_train_backward = backward
cake_rmsnorm_det = rmsnorm
cake_rmsnorm_det_workspace = workspace
cake_rmsnorm_det_workspace_bytes = workspace_bytes

__all__ = [
    "forward", "backward", "rmsnorm", "RMSNorm", "workspace", "workspace_bytes", "explain_route",
    "RouteInfo", "cap_ctas", "force_engine", "force_form", "force_cta_rows", "force_pack", "force_l1_loads",
    "force_chunk_order", "force_tile_cluster", "force_wide",
    "cake_rmsnorm_det_train_forward",
    "cake_rmsnorm_det_train_backward", "cake_rmsnorm_det", "cake_rmsnorm_det_workspace",
    "cake_rmsnorm_det_workspace_bytes", "__version__",
]
