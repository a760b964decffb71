"""Forward and backward entry points: validation, the layout rule, workspace, dispatch.

Everything a call can get wrong is checked here, before any launch, with an error that names
the rule. Inputs whose rows can be read in place (a 16-byte aligned base, a contiguous last
dimension, leading dimensions that collapse to at most two strided levels with strides that are
multiples of 8 elements) are passed as views; anything else is materialized once.
"""

from __future__ import annotations

import contextlib
import math
import threading
from dataclasses import dataclass
from typing import Iterator, NamedTuple, Optional

import torch

from . import cake_jit, layout
from .programs import current_arch, load_program, sm_count

_FORMS = {"pair": 0, "single": 1, "fused": 2}
# Engine name -> launch argument: its place in its pass's pair (args.cuh's engine enums).
_ENGINES = {e: i for pair in cake_jit.ENGINES.values() for i, e in enumerate(pair)}
_WIDE_ROWS = {False: 0, True: 1, None: 2}  # forward.cuh's ForwardRows: narrow, wide, the launcher's choice


# ---------------------------------------------------------------------------------------------
# Test knobs: a CTA cap and a forced backward form. They change which CTA does what, never the
# bits, which is what the determinism tests show.
class _Knobs(threading.local):
    max_ctas: int = 0
    form: Optional[str] = None
    engine: Optional[str] = None
    cta_rows: int = 0
    wide: Optional[bool] = None
    pack: int = 0
    l1_loads: Optional[bool] = None
    tile_cluster: int = 0
    chunk_order: Optional[int] = None


_knobs = _Knobs()


@contextlib.contextmanager
def _knob(name: str, value) -> Iterator[None]:
    """Set one of this thread's knobs for the block, then put the old value back."""
    old = getattr(_knobs, name)
    setattr(_knobs, name, value)
    try:
        yield
    finally:
        setattr(_knobs, name, old)


def cap_ctas(n: int) -> contextlib.AbstractContextManager:
    """Cap every launch of this thread at `n` CTAs (tests: the bits must not change)."""
    if n < 1:
        raise ValueError("the CTA cap must be >= 1")
    return _knob("max_ctas", int(n))


def force_form(form: str) -> contextlib.AbstractContextManager:
    """Run backward in `form` ('pair' or 'single'; 'fused' where the partition is one-row chunks)."""
    if form not in _FORMS:
        raise ValueError(f"form must be one of {sorted(_FORMS)}")
    return _knob("form", form)


def force_engine(engine: str) -> contextlib.AbstractContextManager:
    """Run every call of this thread with `engine` (forward: 'regs' or 'l1'; backward: 'direct'
    or 'ring') whatever the route's window says (tests, measurements: the bits must not change).
    A pass whose engines do not include it keeps its route's."""
    if engine not in _ENGINES:
        raise ValueError(f"engine must be one of {sorted(_ENGINES)}")
    return _knob("engine", engine)


def force_cta_rows(n: int) -> contextlib.AbstractContextManager:
    """Launch every forward of this thread with `n` rows per CTA (1 .. the rows per CTA of the
    width's layout) in place of the launch rule (measurements, tests: the bits must not change)."""
    if n < 1:
        raise ValueError("rows per CTA must be >= 1")
    return _knob("cta_rows", int(n))


def force_tile_cluster(n: int) -> contextlib.AbstractContextManager:
    """Split each dw tile of the fused backward over a cluster of `n` CTAs (1 .. layout.MAX_TILE_CLUSTER;
    1: one CTA a tile) in place of the launcher's rule (measurements, tests: the bits must not change). A launch
    whose CTA cap holds fewer than `n` CTAs, or whose blocks one pass of the cluster would not
    cover, keeps one CTA a tile."""
    if not 1 <= n <= layout.MAX_TILE_CLUSTER:
        raise ValueError(f"a tile cluster holds 1 to {layout.MAX_TILE_CLUSTER} CTAs, got {n}")
    return _knob("tile_cluster", int(n))


def force_wide(on: bool) -> contextlib.AbstractContextManager:
    """Launch every forward of this thread with wide rows (one 16-byte slice per thread) or narrow
    ones in place of the launcher's choice (measurements, tests: the bits must not change). Wide
    rows exist for the qualified widths of more than one slice per thread, weights in registers
    (force_engine('regs') where the route's window says 'l1')."""
    return _knob("wide", bool(on))


def force_pack(n: int) -> contextlib.AbstractContextManager:
    """Launch every forward of this thread with packed rows, `n` = layout.FWD_PACK canonical threads
    per thread (where layout.fwd_has_pack: H 256's program), or canonical rows (`n` = 1), in place of
    the route's choice (measurements, tests: the bits must not change). A program without packed
    rows raises at launch."""
    if n not in (1, layout.FWD_PACK):
        raise ValueError(f"a pack is 1 or {layout.FWD_PACK}, got {n}")
    return _knob("pack", int(n))


def force_l1_loads(on: bool) -> contextlib.AbstractContextManager:
    """Launch every call of this thread with its rows read into L1 (`on`) or streamed past it, in
    place of the route's choice (cake_jit.row_loads; measurements, tests: the bits must not change):
    the forward's narrow rows, the backward's direct engine. The forward's packed and wide rows only
    stream (a launch that forces them with L1 reads raises); the backward's ring and fused form stream."""
    return _knob("l1_loads", bool(on))


_CHUNK_ORDERS = {"contiguous": layout.CONTIGUOUS, "strided": layout.STRIDED}


def force_chunk_order(order: str) -> contextlib.AbstractContextManager:
    """Run every backward of this thread with its dw chunks `order` ('contiguous' or 'strided',
    cake_jit.chunk_order) in place of the route's choice (measurements, tests). Unlike the other
    knobs this one changes dw bits: which rows a chunk sums is part of the partition. Strided chunks
    need at least a full CTA's row groups a chunk (a call with fewer raises ValueError) and run the
    direct engine."""
    if order not in _CHUNK_ORDERS:
        raise ValueError(f"chunk order must be one of {sorted(_CHUNK_ORDERS)}")
    return _knob("chunk_order", _CHUNK_ORDERS[order])


def _loads(pass_: str, hidden: int, rows: int, arch: str, pack: int = 1, wide: bool = False) -> int:
    if _knobs.l1_loads is None:
        return cake_jit.row_loads(pass_, hidden, rows, arch, pack, wide)
    return layout.L1_LOADS if _knobs.l1_loads else layout.STREAM_LOADS


def _engine(pass_: str, window_engine: str) -> int:
    e = _knobs.engine if _knobs.engine in cake_jit.ENGINES[pass_] else window_engine
    return _ENGINES[e]


# ---------------------------------------------------------------------------------------------
# Validation and the layout rule

@dataclass(frozen=True)
class _Rows:
    t: torch.Tensor     # the tensor whose storage the kernel reads
    d1: int
    s0: int
    s1: int


def _check_eps(eps: float) -> float:
    if not isinstance(eps, (int, float)) or isinstance(eps, bool):
        raise TypeError(f"eps must be a float, got {type(eps).__name__}")
    eps = float(eps)
    if not (eps > 0.0) or math.isinf(eps):
        raise ValueError(f"eps must be a finite number > 0, got {eps}")
    return eps


def _check_act(t: torch.Tensor, name: str, hidden: Optional[int] = None) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.bfloat16:
        raise TypeError(f"{name} must be bfloat16 (activations are BF16), got {t.dtype}")
    if t.device.type != "cuda":
        raise ValueError(f"{name} must be on a CUDA device, got {t.device}")
    if t.dim() < 1:
        raise ValueError(f"{name} must have at least one dimension [..., H]")
    if hidden is not None and t.shape[-1] != hidden:
        raise ValueError(f"{name} has last dimension {t.shape[-1]}, expected H = {hidden}")
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name} must have a contiguous last dimension (stride 1), got stride {t.stride(-1)}; "
                         "call .contiguous() on it")


def _check_hidden(hidden: int) -> None:
    if hidden % 8 or hidden > cake_jit.MAX_HIDDEN or hidden < 8:
        raise ValueError(f"H = {hidden} is not supported: H must be a multiple of 8 in [8, {cake_jit.MAX_HIDDEN}]")


def _check_weight(w: torch.Tensor, hidden: int, device: torch.device) -> str:
    if not isinstance(w, torch.Tensor):
        raise TypeError(f"weight must be a torch.Tensor, got {type(w).__name__}")
    if w.dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"weight must be bfloat16 or float32, got {w.dtype}")
    if w.dim() != 1 or w.shape[0] != hidden:
        raise ValueError(f"weight must have shape [{hidden}], got {list(w.shape)}")
    if w.device != device:
        raise ValueError(f"weight is on {w.device} but x is on {device}; put them on one device")
    return "bf16" if w.dtype == torch.bfloat16 else "fp32"


def _same_device(t: torch.Tensor, device: torch.device, name: str) -> None:
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but x is on {device}; put them on one device")


def _aligned(t: torch.Tensor) -> torch.Tensor:
    """t itself when contiguous and 16-byte aligned, else a fresh contiguous copy (a fresh
    allocation is aligned; ``.contiguous()`` alone returns a misaligned contiguous tensor as is)."""
    if t.is_contiguous() and t.data_ptr() % 16 == 0:
        return t
    return torch.empty_like(t, memory_format=torch.contiguous_format).copy_(t)


def _rows_view(t: torch.Tensor) -> _Rows:
    """Collapse leading dims to at most (d0, d1) with strides (s0, s1) when that reads the rows in
    place with 16-byte accesses; otherwise materialize a contiguous copy once."""
    hidden = t.shape[-1]
    if t.is_contiguous() and t.data_ptr() % 16 == 0:  # the common case, what the rule gives it (fast)
        return _Rows(t, 1, hidden, hidden)
    dims = [(n, s) for n, s in zip(t.shape[:-1], t.stride()[:-1]) if n != 1]
    merged: list[list[int]] = []
    for n, s in dims:
        if merged and merged[-1][1] == s * n:
            merged[-1] = [merged[-1][0] * n, s]
        else:
            merged.append([n, s])
    ok = (t.data_ptr() % 16 == 0 and len(merged) <= 2 and all(s % 8 == 0 and s >= hidden for _, s in merged)
          and t.stride(-1) == 1)
    if not ok:
        t = _aligned(t)
        return _Rows(t, 1, hidden, hidden)
    if not merged:
        return _Rows(t, 1, hidden, hidden)
    if len(merged) == 1:
        return _Rows(t, 1, merged[0][1], hidden)
    (_, s0), (d1, s1) = merged
    return _Rows(t, d1, s0, s1)


def _leading(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(t.shape[:-1])


def _stream(device: torch.device) -> int:
    return torch.cuda.current_stream(device).cuda_stream


def _check_out(t: Optional[torch.Tensor], name: str, shape: tuple[int, ...], dtype: torch.dtype,
               device: torch.device, inputs: tuple[torch.Tensor, ...]) -> None:
    if t is None:
        return
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor")
    if tuple(t.shape) != tuple(shape) or t.dtype != dtype or t.device != device:
        raise ValueError(f"{name} must be a {dtype} tensor of shape {list(shape)} on {device}, got "
                         f"{t.dtype} {list(t.shape)} on {t.device}")
    if not t.is_contiguous() or t.data_ptr() % 16:
        raise ValueError(f"{name} must be contiguous and 16-byte aligned")
    lo, hi = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
    for i in inputs:
        if i is None or i.numel() == 0:
            continue
        ilo = i.data_ptr()
        ihi = ilo + (max((n - 1) * s for n, s in zip(i.shape, i.stride())) + 1) * i.element_size()
        if lo < ihi and ilo < hi:
            raise ValueError(f"{name} overlaps an input tensor; pass a separate output buffer")


# ---------------------------------------------------------------------------------------------
# Workspace

def workspace_bytes(tokens: int, hidden: int) -> int:
    """Bytes of backward workspace for `tokens` rows of width `hidden` (leading dims flattened)."""
    _check_hidden(hidden)
    if tokens < 0:
        raise ValueError("tokens must be >= 0")
    return cake_jit.workspace_bytes(tokens, hidden)


def workspace(tokens: int, hidden: int, device: torch.device | str | None = None) -> torch.Tensor:
    """A zeroed backward workspace (uint8) for up to `tokens` rows of width `hidden`.

    It is reusable across calls, token counts up to `tokens` and CUDA Graph replays: the kernels
    leave its counter at zero."""
    dev = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
    return torch.zeros(workspace_bytes(tokens, hidden), dtype=torch.uint8, device=dev)


_ws_cache: dict[tuple[int, int], torch.Tensor] = {}
_ws_lock = threading.Lock()


def _default_workspace(nbytes: int, device: torch.device) -> torch.Tensor:
    """A per-(device, stream) workspace that grows as needed; fresh (not cached) while a CUDA
    Graph is being captured, so a graph never shares memory with eager calls."""
    if torch.cuda.is_current_stream_capturing():
        return torch.zeros(nbytes, dtype=torch.uint8, device=device)
    key = (device.index if device.index is not None else torch.cuda.current_device(), _stream(device))
    with _ws_lock:
        ws = _ws_cache.get(key)
        if ws is None or ws.numel() < nbytes:
            ws = torch.zeros(max(nbytes, 1 << 16), dtype=torch.uint8, device=device)
            _ws_cache[key] = ws
    return ws


# ---------------------------------------------------------------------------------------------
# Entry points

def _route(pass_: str, hidden: int, weight: str, residual: bool, rows: int,
           device: torch.device) -> tuple[cake_jit.Route, str]:
    """The route of a call (no build, no load: that waits until a launch needs the program)."""
    arch = current_arch(device)
    return cake_jit.route(arch, pass_, hidden, weight, residual, rows), arch


class ForwardLaunch(NamedTuple):
    """What a forward call launches: its route and the launcher's knobs (forward.cuh's codes)."""
    route: cake_jit.Route
    arch: str
    engine: int
    cta_rows: int
    wide: int
    pack: int
    loads: int


def forward_launch(hidden: int, weight: str, residual: bool, rows: int, device: torch.device) -> ForwardLaunch:
    """The route and launch knobs of a forward call of `rows` rows (the test knobs of this thread
    applied), as `forward` passes them; bench/phases.py launches its builds with the same."""
    r, arch = _route("fwd", hidden, weight, residual, rows, device)
    wide = _knobs.wide is True
    pack = _knobs.pack or (1 if wide else cake_jit.fwd_pack(hidden, rows, arch))
    cta_rows = _knobs.cta_rows or cake_jit.fwd_cta_rows(hidden, rows, sm_count(device), wide, arch, pack)
    return ForwardLaunch(r, arch, _engine("fwd", r.window.engine), cta_rows, _WIDE_ROWS[_knobs.wide], pack,
                         _loads("fwd", hidden, rows, arch, pack, wide))


def _call(fn, program_name: str, *args):
    try:
        return fn(*args)
    except Exception as e:
        raise RuntimeError(f"cake_rmsnorm_det program {program_name}: {e}") from e


def forward(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
            residual: Optional[torch.Tensor] = None, *, out: Optional[torch.Tensor] = None,
            h_out: Optional[torch.Tensor] = None,
            rstd_out: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, ...]:
    """RMSNorm forward: ``y = x * rstd * w`` with ``rstd = 1/sqrt(mean(x^2) + eps)`` per row.

    With ``residual``, ``h_new = BF16(x + residual)`` is formed first, normalized, and returned.

    Args:
        x: BF16 ``[..., H]`` with a contiguous last dimension (strided leading dims allowed).
        weight: BF16 or FP32 ``[H]`` on x's device.
        eps: a finite number > 0.
        residual: optional BF16 tensor of x's shape.
        out, h_out, rstd_out: optional preallocated outputs (contiguous, not overlapping inputs).

    Returns:
        ``(y, rstd)``, or ``(y, h_new, rstd)`` with a residual; y/h_new contiguous BF16 of x's
        shape, rstd FP32 of x's leading shape.
    """
    _check_act(x, "x")
    hidden = x.shape[-1]
    _check_hidden(hidden)
    eps = _check_eps(eps)
    wkind = _check_weight(weight, hidden, x.device)
    if residual is not None:
        _check_act(residual, "residual", hidden)
        _same_device(residual, x.device, "residual")
        if residual.shape != x.shape:
            raise ValueError(f"residual must have x's shape {list(x.shape)}, got {list(residual.shape)}")
    lead = _leading(x)
    ins = (x, weight, residual)
    _check_out(out, "out", tuple(x.shape), torch.bfloat16, x.device, ins)
    _check_out(h_out, "h_out", tuple(x.shape), torch.bfloat16, x.device, ins)
    _check_out(rstd_out, "rstd_out", lead, torch.float32, x.device, ins)
    y = out if out is not None else torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
    rstd = rstd_out if rstd_out is not None else torch.empty(lead, dtype=torch.float32, device=x.device)
    h = None
    if residual is not None:
        h = h_out if h_out is not None else torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
    rows = x.numel() // hidden if hidden else 0
    if rows == 0:
        return (y, h, rstd) if residual is not None else (y, rstd)
    xv = _rows_view(x)
    rv = _rows_view(residual) if residual is not None else xv
    if residual is not None and (rv.d1 != xv.d1 and rv.d1 != 1 and xv.d1 != 1):
        rv = _rows_view(_aligned(residual))
    # both views address rows the same way: (row // d1, row % d1); re-express a 1-level view
    d1 = max(xv.d1, rv.d1)
    xs = _split(xv, d1)
    rs = _split(rv, d1)
    w = _aligned(weight)
    k = forward_launch(hidden, wkind, residual is not None, rows, x.device)
    mod = load_program(k.route.program, k.arch)
    with torch.cuda.device(x.device):
        _call(mod.forward, k.route.program.name, xv.t, rv.t, w, y, h if h is not None else y, rstd, rows,
              hidden, d1, xs[0], xs[1], rs[0], rs[1], eps, residual is not None,
              k.engine, k.cta_rows, k.wide, k.pack, k.loads, _knobs.max_ctas, _stream(x.device))
    return (y, h, rstd) if residual is not None else (y, rstd)


def _split(v: _Rows, d1: int) -> tuple[int, int]:
    """Strides (s0, s1) of view v when rows are addressed as (row // d1, row % d1)."""
    if v.d1 == d1:
        return v.s0, v.s1
    # v is one-level (row * s0): then row = a*d1 + b -> a*(d1*s0) + b*s0
    return v.s0 * d1, v.s0


def backward(grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor,
             grad_residual: Optional[torch.Tensor] = None, *, workspace: Optional[torch.Tensor] = None,
             dx: Optional[torch.Tensor] = None,
             dw: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm backward: ``dx`` (BF16, x's shape) and ``dw`` (FP32 ``[H]``), deterministic.

    ``dx = rstd * (g*w - xhat*mean(g*w*xhat)) [+ grad_residual]`` with ``xhat = x*rstd``;
    ``dw = sum over rows of g*x*rstd``, from exact FP64 products summed in a fixed order, rounded
    once. The bits depend only on the inputs (never on the GPU's SM count, grid or stream).

    Args:
        grad_out: BF16 of x's shape (dL/dy).
        x: the forward's input (h_new in the residual form), BF16 ``[..., H]``.
        weight: BF16 or FP32 ``[H]``.
        rstd: FP32 of x's leading shape, as returned by :func:`forward`.
        grad_residual: optional BF16 of x's shape (dL/dh_new), added to dx.
        workspace: optional uint8 buffer of at least :func:`workspace_bytes` bytes from
            :func:`workspace` (zeroed); one per stream that runs backward concurrently.
        dx, dw: optional preallocated outputs.
    """
    _check_act(x, "x")
    hidden = x.shape[-1]
    _check_hidden(hidden)
    _check_act(grad_out, "grad_out", hidden)
    _same_device(grad_out, x.device, "grad_out")
    if grad_out.shape != x.shape:
        raise ValueError(f"grad_out must have x's shape {list(x.shape)}, got {list(grad_out.shape)}")
    wkind = _check_weight(weight, hidden, x.device)
    lead = _leading(x)
    if not isinstance(rstd, torch.Tensor) or rstd.dtype != torch.float32:
        raise TypeError(f"rstd must be a float32 tensor, got {getattr(rstd, 'dtype', type(rstd))}")
    _same_device(rstd, x.device, "rstd")
    if tuple(rstd.shape) != lead:
        raise ValueError(f"rstd must have x's leading shape {list(lead)}, got {list(rstd.shape)}")
    if grad_residual is not None:
        _check_act(grad_residual, "grad_residual", hidden)
        _same_device(grad_residual, x.device, "grad_residual")
        if grad_residual.shape != x.shape:
            raise ValueError(f"grad_residual must have x's shape {list(x.shape)}, got {list(grad_residual.shape)}")
    ins = (grad_out, x, weight, rstd, grad_residual)
    _check_out(dx, "dx", tuple(x.shape), torch.bfloat16, x.device, ins)
    _check_out(dw, "dw", (hidden,), torch.float32, x.device, ins)
    rows = x.numel() // hidden
    r, arch = _route("bwd", hidden, wkind, grad_residual is not None, rows, x.device)
    need = cake_jit.workspace_bytes_for(r.chunks, hidden)  # the partition the route already made
    if workspace is not None:
        if not isinstance(workspace, torch.Tensor) or workspace.dtype != torch.uint8:
            raise TypeError("workspace must be a uint8 tensor from cake_rmsnorm_det.workspace()")
        _same_device(workspace, x.device, "workspace")
        if workspace.numel() < need or not workspace.is_contiguous() or workspace.data_ptr() % 16:
            raise ValueError(f"workspace must be a contiguous, 16-byte aligned uint8 buffer of at least "
                             f"{need} bytes for {rows} rows of H = {hidden}; got {workspace.numel()} bytes "
                             "(use cake_rmsnorm_det.workspace(tokens, hidden))")
        _check_out(workspace, "workspace", (workspace.numel(),), torch.uint8, x.device, ins)
    dx_t = dx if dx is not None else torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
    dw_t = dw if dw is not None else torch.empty(hidden, dtype=torch.float32, device=x.device)
    if rows == 0:
        dw_t.zero_()
        return dx_t, dw_t
    rstd_c = rstd if rstd.is_contiguous() else rstd.contiguous()
    gv, xv = _rows_view(grad_out), _rows_view(x)
    rv = _rows_view(grad_residual) if grad_residual is not None else gv
    d1 = max(gv.d1, xv.d1, rv.d1)
    views = [gv, xv, rv]
    for i, v in enumerate(views):  # two different two-level layouts: materialize the odd one
        if v.d1 not in (1, d1):
            views[i] = _rows_view(_aligned(v.t))
    gv, xv, rv = views
    gs, xs, rs = _split(gv, d1), _split(xv, d1), _split(rv, d1)
    w = _aligned(weight)
    form = r.window.form
    if form == "fused" and d1 > 1:
        form = "pair"  # the fused form reads one-level views only; the pair form's bits are the same
    if _knobs.form is not None:
        form = _knobs.form
        if form == "fused" and r.chunk_rows != 1:
            raise ValueError(f"the fused form needs one-row chunks; {rows} rows of H = {hidden} have chunks of "
                             f"{r.chunk_rows} rows (at most {cake_jit.one_row_chunks(hidden)} rows)")
        if form == "fused" and d1 > 1:
            raise ValueError(f"the fused form reads one-level row views; these rows are a two-level view "
                             f"(groups of {d1} rows): use the pair form")
    order = r.chunk_order if _knobs.chunk_order is None else _knobs.chunk_order
    if order == layout.STRIDED and not layout.strided_fits(hidden, r.chunk_rows):
        raise ValueError(f"strided dw chunks need at least {layout.bwd_row_groups(hidden)} rows a chunk at "
                         f"H = {hidden}; {rows} rows have chunks of {r.chunk_rows}")
    ws = workspace if workspace is not None else _default_workspace(need, x.device)
    mod = load_program(r.program, arch)
    with torch.cuda.device(x.device):
        _call(mod.backward, r.program.name, gv.t, xv.t, w, rstd_c, rv.t, dx_t, dw_t, ws, rows, hidden,
              d1, gs[0], gs[1], xs[0], xs[1], rs[0], rs[1], r.chunk_rows, r.chunks, order,
              grad_residual is not None, _FORMS[form], _engine("bwd", r.window.engine),
              _loads("bwd", hidden, rows, arch), _knobs.max_ctas,
              _knobs.tile_cluster, _stream(x.device))
    return dx_t, dw_t
