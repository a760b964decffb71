"""Route inspection: which program runs for a call, in which form and engine, and why.

    python -m cake_rmsnorm_det.routes --arch sm_90a --hidden 4096 --tokens 65536 --weight bf16 --pass bwd [--residual]
    python -m cake_rmsnorm_det.routes --arch sm_90a --all
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Optional, Union

import torch

from . import cake_jit, cake_windows, layout
from .programs import SUPPORTED_ARCHS, current_arch, find_built, sm_count
from .layout import H200_SMS, launch_config


@dataclass(frozen=True)
class RouteInfo:
    """The answer of :func:`explain_route`."""

    key: str
    rows: int
    window: str
    program: str
    program_key: str
    form: str
    engine: str
    launch: str
    evidence: str
    built: bool

    def __str__(self) -> str:
        return "\n".join([
            f"key       {self.key}",
            f"rows      {self.rows}",
            f"window    {self.window} rows",
            f"program   {self.program} ({self.program_key})",
            f"form      {self.form}",
            f"engine    {self.engine}",
            f"launch    {self.launch}",
            f"evidence  {self.evidence}",
            f"built     {'yes' if self.built else 'no (built on first use)'}",
        ])


def _weight_name(w: Union[str, torch.dtype]) -> str:
    if w in (torch.bfloat16, "bf16", "bfloat16"):
        return "bf16"
    if w in (torch.float32, "fp32", "float32"):
        return "fp32"
    raise ValueError(f"weight dtype must be bf16 or fp32, got {w!r}")


def explain_route(pass_: str, hidden: int, tokens: int, weight_dtype: Union[str, torch.dtype] = "bf16",
                  residual: bool = False, arch: Optional[str] = None, heads: int = 1) -> RouteInfo:
    """Explain the route of one call: `tokens` x `heads` rows of width `hidden`.

    ``arch`` defaults to the current GPU's (or $CAKE_RMSNORM_DET_ARCH)."""
    arch = arch or current_arch()
    rows = int(tokens) * int(heads)
    sms = sm_count() if torch.cuda.is_available() else H200_SMS
    r = cake_jit.route(arch, pass_, hidden, _weight_name(weight_dtype), residual, rows)
    pack = cake_jit.fwd_pack(hidden, rows, arch) if pass_ == "fwd" else 1
    loads = cake_jit.row_loads(pass_, hidden, rows, arch, pack)
    return RouteInfo(
        key=str(r.key), rows=rows, window=r.window.text(), program=r.program.name,
        program_key=r.program.key, form=r.window.form, engine=r.window.engine,
        launch=launch_config(pass_, hidden, rows, r.window.form, r.chunk_rows, r.chunks, r.window.engine,
                             cake_jit.fwd_cta_rows(hidden, rows, sms, arch=arch, pack=pack) if pass_ == "fwd" else 0,
                             sms, pass_ == "fwd" and pack == 1 and cake_jit.fwd_has_wide(hidden),
                             split_tiles=hidden in cake_jit.QUALIFIED_WIDTHS, pack=pack, loads=loads,
                             order=r.chunk_order, residual=bool(residual)),
        evidence=(r.window.evidence + _pack_evidence(pass_, hidden, arch) + _loads_evidence(pass_, hidden, arch)
                  + _cta_evidence(pass_, hidden, rows, arch, pack)
                  + _order_evidence(pass_, hidden, arch, r.chunk_order, r.window.engine)),
        built=find_built(r.program, arch) is not None)


def _pack_evidence(pass_: str, hidden: int, arch: str) -> str:
    """Why the forward packs its rows from a row count on (cake_windows.MEASURED_FWD_PACKS), if it does."""
    hit = cake_windows.fwd_measured_pack(arch, hidden) if pass_ == "fwd" else None
    return "" if hit is None else f"; packed rows from {hit[0][1]} rows: {hit[1].line()}"


def _cta_evidence(pass_: str, hidden: int, rows: int, arch: str, pack: int) -> str:
    """Why the forward's narrow rows take a measured CTA size at this row count
    (cake_windows.MEASURED_FWD_CTA_ROWS), if they do."""
    step = cake_windows.fwd_cta_step(arch, hidden, rows) if pass_ == "fwd" and pack == 1 else None
    if step is None:
        return ""
    return f"; narrow rows: {step.size()} from {step.start} rows: {step.evidence.line()}"


def _order_evidence(pass_: str, hidden: int, arch: str, order: int, engine: str) -> str:
    """Why the backward's dw chunks are strided at this row count (cake_windows.MEASURED_STRIDED_CHUNKS, or
    MEASURED_STRIDED_RING on the ring's windows), if they are."""
    hit = cake_windows.measured_strided_chunks(arch, hidden, engine) if pass_ == "bwd" else None
    if hit is None or order != layout.STRIDED:
        return ""
    return f"; strided dw chunks on the {engine} engine from {hit[0]} rows: {hit[1].line()}"


def _loads_evidence(pass_: str, hidden: int, arch: str) -> str:
    """Why a pass reads its rows into L1 from a row count on (cake_windows.MEASURED_L1_LOADS), if it does."""
    hit = cake_windows.measured_l1_loads(arch, pass_, hidden)
    return "" if hit is None else f"; rows read into L1 from {hit[0]} rows: {hit[1].line()}"


def route_table(arch: str) -> str:
    """Every window of every qualified key of `arch`, as text."""
    lines = [f"routes of {arch} (windows are row counts; generic widths route to the *_generic programs)"]
    for key in cake_jit.all_keys(arch):
        for w in cake_jit.windows(key):
            prog = cake_jit.program_by_key(w.program_key)
            lines.append(f"{str(key):48s} {w.text():>14s} {w.form:7s} {w.engine:7s} {prog.name}  [{w.evidence}]")
    return "\n".join(lines)


def _main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cake_rmsnorm_det.routes", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", choices=sorted(SUPPORTED_ARCHS), default=None,
                    help="target arch (default: the current GPU's)")
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--tokens", type=int, help="rows (tokens x heads for [T, heads, H] views)")
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--weight", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--pass", dest="pass_", default="bwd", choices=list(cake_jit.PASSES))
    ap.add_argument("--residual", action="store_true")
    ap.add_argument("--all", action="store_true", help="print the whole route table of the arch")
    a = ap.parse_args(argv)
    arch = a.arch
    if arch is None:
        try:
            arch = current_arch()
        except Exception as e:
            ap.error(f"no GPU to take the arch from ({e}); pass --arch")
    if a.all:
        print(route_table(arch))
        return 0
    if a.hidden is None or a.tokens is None:
        ap.error("--hidden and --tokens are required (or --all)")
    try:
        print(explain_route(a.pass_, a.hidden, a.tokens, a.weight, a.residual, arch, a.heads))
    except ValueError as e:
        ap.error(str(e))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
