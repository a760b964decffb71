"""Each contender's kernels one by one (GPU): where a call's time goes, kernel by kernel.

    python bench/split.py [--shapes bwd:1024x512,fwd:256x6144] [--out split.json]

The benchmark's method (bench.Timer: CUPTI kernel-active time, a 512 MB flush before every call,
median of 30), but each kernel of a call is reported apart, by name, beside the call's total. A
row of two or more kernels (the backward's pair form and F.rms_norm's dx and dw kernels) shows
which of them carries a gap. Each shape also times the same bytes moved by PyTorch's elementwise
kernels, cold, as a floor for that shape: `add` (g + x into a third tensor: the backward's two
reads and one write) and `neg` (-x into y: the forward's one read and one write; a copy would be a
memcpy, which the timer leaves out). --chunk-orders adds the package's backward with its dw chunks
forced contiguous and strided (crd.force_chunk_order; 'cake' is the route's order). --weight fp32
and --residual time those rows of the package instead (its peers then run as in the benchmark);
--engine direct|ring forces the package's engine (crd.force_engine). --flush read empties L2 by
reading the flush buffer instead of rewriting it (bench.Timer), so each call starts with L2 clean
rather than full of the flush's dirty lines: run both ways, it shows what the benchmark's flush
costs each kernel (round 38, an H100: 7.6-9.1 us off ours and PyTorch's add alike at 65536 rows,
the ratio between them unchanged; docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cake_rmsnorm_det as crd  # noqa: E402
from cake_rmsnorm_det import bench, cake_jit, layout  # noqa: E402


def short(name: str, width: int = 64) -> str:
    """A kernel's name without `void`, namespaces and its parameter list, cut to `width`."""
    if name.endswith(")") and "(" in name:
        name = name[: name.rindex("(")]
    for noise in ("void ", "cake::", "at::native::", "(anonymous namespace)::", "__nv_bfloat16"):
        name = name.replace(noise, "bf16" if noise == "__nv_bfloat16" else "")
    return name[:width]


def split_times(timer: bench.Timer, fn) -> dict:
    """Median duration of each kernel position of fn's calls (with its name), and of the total."""
    calls = timer.kernel_events(fn)
    n = min(len(c) for c in calls)
    kernels = [{"name": short(calls[0][i][0]), "us": round(statistics.median(c[i][1] for c in calls), 3)}
               for i in range(n)]
    return {"total_us": round(statistics.median(sum(d for _, d in c) for c in calls), 3), "kernels": kernels}


def chunk_order_calls(cake, rows: int, hidden: int) -> dict:
    """The package's backward call `cake` under each dw chunk order its partition allows."""
    strided = layout.strided_fits(hidden, cake_jit.dw_partition(rows, hidden)[0])
    orders = ["contiguous"] + (["strided"] if strided else [])

    def under(order):
        def call():
            with crd.force_chunk_order(order):
                return cake()
        return call
    return {f"cake {o}": under(o) for o in orders}


def forced(fn, engine: str):
    """fn under crd.force_engine(engine)."""
    def call():
        with crd.force_engine(engine):
            return fn()
    return call


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="bwd:1x256,bwd:1024x512,fwd:256x6144",
                    help="pass:TxH,... (pass fwd or bwd)")
    ap.add_argument("--no-baselines", action="store_true", help="the package and the floors only")
    ap.add_argument("--chunk-orders", action="store_true", help="the backward with each dw chunk order too")
    ap.add_argument("--weight", default="bf16", choices=["bf16", "fp32"], help="the weight's dtype")
    ap.add_argument("--residual", action="store_true", help="the residual rows (forward h_new, backward g_residual)")
    ap.add_argument("--engine", default="route", choices=["route", "direct", "ring"],
                    help="the package's backward engine: the route's, or forced (crd.force_engine)")
    ap.add_argument("--flush", default="rewrite", choices=["rewrite", "read"],
                    help="how L2 is emptied before each call: the benchmark's in-place rewrite, or a read")
    ap.add_argument("--out", default=None, help="a JSON file for the results")
    a = ap.parse_args()
    bench.lift_recompile_limits()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    timer = bench.Timer(dev, flush=a.flush)
    results = []
    for spec in a.shapes.split(","):
        pass_, dims = spec.split(":")
        rows, hidden = (int(v) for v in dims.split("x"))
        x, w, g = bench.row_inputs(rows, hidden, dev)
        w = w.float() if a.weight == "fp32" else w
        res = torch.randn_like(x) if a.residual else None
        calls = bench.contenders(pass_, x, w, g, 1e-6, res, include_baselines=not a.no_baselines)
        out = torch.empty_like(x)
        if pass_ == "bwd":
            calls["floor: add"] = lambda: torch.add(g, x, out=out)
            if a.chunk_orders:
                calls.update(chunk_order_calls(calls["cake"], rows, hidden))
        else:
            calls["floor: neg"] = lambda: torch.neg(x, out=out)
        print(f"{pass_} [{rows},{hidden}] {a.weight} weight{', residual' if a.residual else ''}", flush=True)
        for name, fn in calls.items():
            if name == "eager":
                continue
            if a.engine != "route" and name.startswith("cake"):
                fn = forced(fn, a.engine)
            r = split_times(timer, fn)
            results.append({"pass": pass_, "T": rows, "H": hidden, "weight": a.weight, "residual": a.residual,
                            "flush": a.flush, "contender": name, **r})
            parts = " + ".join(f"{k['name']} {k['us']}" for k in r["kernels"])
            print(f"  {name:12s} {r['total_us']:9.3f} us = {parts}", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
