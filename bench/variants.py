"""Time program variants: the same sources built with other tuning arguments (GPU).

    python bench/variants.py [--passes bwd,fwd] [--old DIR] [--out DIR]

A variant is a one-line program body (an instantiation of the pass's launcher with tuning
arguments, e.g. ``launch_backward_width<4096, 1>`` for ring row depth 1, or
``launch_forward_dtype<4096, false>`` for the forward with weights re-read from L1) built beside the routed
programs and put in the place of the routed program of its key while its shapes are timed, with
the benchmark's method (CUPTI kernel-active time, cold L2, median of 30). ``--old DIR`` (repeatable)
adds the programs of another source tree (DIR/include, DIR/<program files>), e.g. an earlier
commit's, labelled ``@<DIR's name>``. Every variant's outputs are compared bit for bit with the
routed program's: tuning arguments must never change a bit (other trees' bits are reported only).
Where another tree's bits differ, the row also gives max |diff| / max |ref| over the outputs.
``--weight fp32`` times FP32-weight rows, ``--residual`` the backward's residual rows; ``--orders
contiguous,strided`` times each backward shape under each forced dw chunk order
(crd.force_chunk_order; where the partition allows it).
``--engine ring --chunks 132`` times every backward (routed and variants) with that engine forced on
a partition of that many chunks (bench/partition.py's chunks_of): the ring's row depths at a width
whose route runs the direct engine. ``--old-chunks N`` puts the ``--old`` trees' backward alone on N
chunks, the routed program on its own partition: a tree whose CTAs want another chunk count
(e.g. one chunk a resident CTA of another size) against the shipped rule, in one process.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from math import ceil
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cake_rmsnorm_det import api, bench, cake_jit, layout, programs  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from partition import chunks_of  # noqa: E402

# The launcher each pass's variants instantiate: forward <H, weights in registers>, backward
# <H, ring row depth> (the engine still comes from the route, as for the routed program).
ENTRY = {"fwd": ("forward", "ForwardArgs", "launch_forward_dtype"),
         "bwd": ("backward", "BackwardArgs", "launch_backward_width")}


@dataclass(frozen=True)
class Variant:
    label: str
    pass_: str
    hidden: int
    kernel: str          # program file text
    binding: str         # binding file text
    include: str         # include folder
    tree: bool = False   # another source tree's program (--old), not a tuning of the routed sources


def tuned(pass_: str, hidden: int, args: str) -> Variant:
    entry, args_t, launcher = ENTRY[pass_]
    kernel = (f'#include "cake/{entry}.cuh"\n'
              f"cudaError_t cake_program_{entry}(const cake::{args_t}& a) {{\n"
              f"  return cake::{launcher}<{hidden}, {args}>(a);\n}}\n")
    binding = f'#include "cake/binding.cuh"\nCAKE_{entry.upper()}_BINDING()\n'
    return Variant(f"{pass_}_h{hidden}<{args}>", pass_, hidden, kernel, binding, str(programs.include_dir()))


def old_tree(pass_: str, hidden: int, tree: Path) -> Variant:
    rec = json.loads((tree / "build.json").read_text())["programs"]
    p = next(r for r in rec if r["key"] == f"{pass_}_h{hidden}")
    return Variant(f"{pass_}_h{hidden}@{tree.name}", pass_, hidden, (tree / Path(p["kernel"]).name).read_text(),
                   (tree / Path(p["binding"]).name).read_text(), str(tree / "include"), tree=True)


def build(v: Variant, out: str) -> str:
    import tvm_ffi.cpp

    d = Path(out) / v.label.translate(str.maketrans("<>, @", "____-"))
    d.mkdir(parents=True, exist_ok=True)
    (d / "kernel.cu").write_text(v.kernel)
    (d / "binding.cu").write_text(v.binding)
    home = programs.cuda_home()
    ld = []
    for x in programs.cudart_dirs(home):
        ld += [f"-L{x}", f"-Wl,-rpath,{x}"]
    os.environ["TVM_FFI_CUDA_ARCH_LIST"] = "9.0a"
    os.environ["CUDA_HOME"] = str(home)
    return tvm_ffi.cpp.build(d.name.replace("-", "_"), cuda_files=[str(d / "kernel.cu"), str(d / "binding.cu")],
                             extra_cuda_cflags=list(programs.NVCC_FLAGS), extra_ldflags=ld,
                             extra_include_paths=[v.include], build_directory=str(d / "build"), backend="cuda")


class Substitute:
    """Within the block, calls of the routed program of `key` run module `mod` instead."""

    def __init__(self, key: str, mod):
        self.key, self.mod = key, mod

    def __enter__(self):
        self.saved = api.load_program
        api.load_program = lambda prog, arch: self.mod if prog.key == self.key else self.saved(prog, arch)

    def __exit__(self, *exc):
        api.load_program = self.saved


def shapes_for(pass_: str, hidden: int, tokens: tuple[int, ...] = (), all_views: bool = False) -> list[dict]:
    """The rows of `tokens` (default: a few per pass) and, at H 256, two head views (all_views: every
    key and query view of the benchmark's shape table)."""
    ts = tokens or ((256, 4096, 65536) if pass_ == "bwd" else (1, 256, 4096, 65536))
    out = [{"label": f"[{t},{hidden}]", "T": t, "H": hidden, "kind": "rows"} for t in ts]
    if hidden == 256 and all_views:
        out += [s for s in bench.shapes(False) if s["kind"] != "rows"]
    elif hidden == 256:
        out += [{"label": "key [32768,4,256]", "T": 32768, "H": 256, "kind": "key"},
                {"label": "query [16384,24,256]", "T": 16384, "H": 256, "kind": "query"}]
    return out


def outputs(pass_: str, x, w, g, rstd, gr=None):
    if pass_ == "fwd":
        return api.forward(x, w, 1e-6)
    return api.backward(g, x, w, rstd, gr)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passes", default="bwd,fwd")
    ap.add_argument("--widths", default=",".join(map(str, cake_jit.QUALIFIED_WIDTHS)))
    ap.add_argument("--old", type=Path, action="append", default=[],
                    help="another source tree to time beside (build.json + files); repeatable")
    ap.add_argument("--old-only", action="store_true", help="time the routed and --old programs only")
    ap.add_argument("--tokens", default="", help="token counts to time (default: a few per pass)")
    ap.add_argument("--all-views", action="store_true", help="every head view of the benchmark at H 256")
    ap.add_argument("--fwd-args", default="true;false",
                    help="forward launcher arguments to build, ';'-separated (weights in registers: true/false)")
    ap.add_argument("--bwd-args", default="1;2;4", help="backward ring row depths to build, ';'-separated")
    ap.add_argument("--weight", default="bf16", choices=["bf16", "fp32"], help="the weight's dtype")
    ap.add_argument("--orders", default="route",
                    help="backward dw chunk orders to time each shape under: route, contiguous, strided (',')")
    ap.add_argument("--residual", action="store_true", help="the backward's residual rows (a grad_residual added to dx)")
    ap.add_argument("--engine", choices=["direct", "ring"], help="every backward with this engine forced")
    ap.add_argument("--chunks", type=int, default=0, help="every backward on this many dw chunks (0: the route's)")
    ap.add_argument("--old-chunks", type=int, default=0,
                    help="the --old trees' backward on this many dw chunks (0: as --chunks)")
    ap.add_argument("--out", default=tempfile.mkdtemp(prefix="cake-variants-"))
    a = ap.parse_args(argv)
    tokens = bench.int_list(a.tokens)
    widths = [int(h) for h in a.widths.split(",")]
    vs: list[Variant] = []
    for pass_ in a.passes.split(","):
        for h in widths:
            if not a.old_only and pass_ == "bwd":
                rpc = layout.bwd_row_groups(h)
                vs += [tuned("bwd", h, rd) for rd in a.bwd_args.split(";") if rd and rpc * int(rd) <= 32]
            elif not a.old_only:
                vs += [tuned("fwd", h, fa.strip()) for fa in a.fwd_args.split(";") if fa.strip()]
            vs += [old_tree(pass_, h, tree) for tree in a.old]
    print(f"building {len(vs)} variants", flush=True)
    with ProcessPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as ex:
        libs = list(ex.map(build, vs, [a.out] * len(vs)))
    import tvm_ffi

    mods = [tvm_ffi.load_module(lib) for lib in libs]
    device = torch.device("cuda")
    timer = bench.Timer(device)
    torch.manual_seed(0)
    rows_out = []
    print(f"{'pass':4s} {'shape':22s} {'variant':24s} {'us':>9s}  bits", flush=True)
    for pass_ in a.passes.split(","):
        for h in widths:
            for s, order in ((s, o) for s in shapes_for(pass_, h, tokens, a.all_views) for o in a.orders.split(",")):
                x = bench.make_input(s, device)
                w = (torch.rand(h, device=device) + 0.5).to(torch.bfloat16 if a.weight == "bf16" else torch.float32)
                g = torch.randn(x.shape, device=device).to(torch.bfloat16)
                gr = torch.randn_like(g) if a.residual else None
                rstd = api.forward(x, w, 1e-6)[1]
                chunk_rows = cake_jit.dw_partition(x.numel() // h, h)[0]
                if order == "strided" and (pass_ != "bwd" or not layout.strided_fits(h, chunk_rows)):
                    continue
                def forced(order=order, pass_=pass_, rows=x.numel() // h, chunks=a.chunks):
                    stack = contextlib.ExitStack()
                    if pass_ == "bwd" and order != "route":
                        stack.enter_context(api.force_chunk_order(order))
                    if pass_ == "bwd" and a.engine:
                        stack.enter_context(api.force_engine(a.engine))
                    if pass_ == "bwd" and chunks:
                        stack.enter_context(chunks_of(ceil(rows / chunks)))
                    return stack
                label = s["label"] + ("" if order == "route" else f" {order}")
                with forced():
                    ref = outputs(pass_, x, w, g, rstd, gr)
                    us = timer(lambda: outputs(pass_, x, w, g, rstd, gr))
                rows_out.append({"pass": pass_, "shape": label, "weight": a.weight, "residual": a.residual, "variant": "routed",
                                 "us": round(us, 3), "bits_equal": True})
                print(f"{pass_:4s} {label:22s} {'routed':24s} {us:9.3f}", flush=True)
                for v, mod in zip(vs, mods):
                    if v.pass_ != pass_ or v.hidden != h:
                        continue
                    with Substitute(f"{pass_}_h{h}", mod), forced(chunks=a.old_chunks if v.tree and a.old_chunks else a.chunks):
                        got = outputs(pass_, x, w, g, rstd, gr)
                        same = all(torch.equal(p.view(torch.int16 if p.dtype == torch.bfloat16 else torch.int32),
                                               q.view(torch.int16 if q.dtype == torch.bfloat16 else torch.int32))
                                   for p, q in zip(ref, got))
                        far = 0.0 if same else farthest(ref, got)
                        us = timer(lambda: outputs(pass_, x, w, g, rstd, gr))
                    rows_out.append({"pass": pass_, "shape": label, "weight": a.weight, "residual": a.residual, "variant": v.label,
                                     "us": round(us, 3), "bits_equal": same, "max_rel_diff": far})
                    print(f"{pass_:4s} {label:22s} {v.label:24s} {us:9.3f}  "
                          f"{'same' if same else f'DIFFER (max |diff| / max |ref| {far:.1e})'}", flush=True)
                del x, g
    Path(a.out, "variants.json").write_text(json.dumps(rows_out, indent=1))
    summary(rows_out)
    return 0 if all(r["bits_equal"] for r in rows_out if "@" not in r["variant"]) else 1


def farthest(ref, got) -> float:
    """The largest of each output's max |got - ref| / max |ref|: how far a variant whose bits differ
    (another tree, e.g. a new layout) is from the routed program; a reordered sum stays within a few
    of its dtype's ulps, a broken kernel does not."""
    worst = 0.0
    for p, q in zip(ref, got):
        p, q = p.double(), q.double()
        scale = p.abs().max().item() or 1.0
        d = (q - p).abs().max().item()
        worst = max(worst, d / scale if d == d else float("inf"))  # NaN where ref is finite: inf
    return worst


def summary(rows: list[dict]) -> None:
    """One line per pass and shape: each variant's us and its ratio to the routed program's
    (* where its bits differ)."""
    print("\nsummary: variant us (variant / routed)")
    by: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        by.setdefault((r["pass"], r["shape"]), []).append(r)
    for (pass_, shape), rs in by.items():
        base = next(r["us"] for r in rs if r["variant"] == "routed")
        cells = [f"{r['variant'].split('_h', 1)[-1]} {r['us']:.2f} ({r['us'] / base:.3f}){'' if r['bits_equal'] else '*'}"
                 for r in rs if r["variant"] != "routed"]
        print(f"{pass_} {shape:22s} routed {base:.2f} | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
