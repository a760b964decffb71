"""Both engines of each qualified width, side by side over token counts (GPU).

    python bench/engines.py [--out DIR] [--forms [--caps 132,264]] [--reads route|stream|l1]

For each width and pass, cake_rmsnorm_det is timed with each engine forced (the routes pick one
per token window; both compute the same bits) with the benchmark's method (CUPTI kernel-active
time, cold L2, median of 30). The rows put the engine edges of cake_windows.py where they are.
--forms times the backward's fused and pair forms instead (the same bits on one-row chunks), at
the token counts whose partition is one-row chunks: the rows put the fused edges; --caps adds the
fused form on grids capped at those CTA counts (its CTAs then take several work items each).
--reads forces how rows are read (crd.force_l1_loads; the route's choice by default): the forward's
narrow rows and the backward's direct engine (the ring's bulk copies are the same either way).
--order forces the backward's dw chunk order (crd.force_chunk_order) on both engines, where the
partition allows it (strided chunks hold a full CTA's row groups): an engine edge under that order.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cake_rmsnorm_det as crd  # noqa: E402
from cake_rmsnorm_det import bench, cake_jit, layout  # noqa: E402

TOKENS = {"fwd": (256, 512, 1024, 2048, 4096, 16384, 65536), "bwd": (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)}
PAIRS = {"fwd": ("regs", "l1"), "bwd": ("direct", "ring")}
FORM_TOKENS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 264)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--widths", default=",".join(map(str, cake_jit.QUALIFIED_WIDTHS)))
    ap.add_argument("--passes", default="bwd,fwd")
    ap.add_argument("--weight", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--tokens", default="", help="token counts to time (default: the pass's TOKENS)")
    ap.add_argument("--forms", action="store_true", help="backward fused against pair form (the fused edge)")
    ap.add_argument("--caps", default="", help="with --forms: also the fused form on grids capped at these CTAs")
    ap.add_argument("--reads", default="route", choices=["route", "stream", "l1"],
                    help="rows read as the route says, streamed past L1, or into it")
    ap.add_argument("--order", default="route", choices=["route", "contiguous", "strided"],
                    help="the backward's dw chunks as the route says, or forced (where the partition allows)")
    a = ap.parse_args(argv)
    if a.forms:
        a.passes = "bwd"

    def reads():
        return contextlib.nullcontext() if a.reads == "route" else crd.force_l1_loads(a.reads == "l1")
    def order(pass_, t, h):
        if pass_ != "bwd" or a.order == "route" or (
                a.order == "strided" and not layout.strided_fits(h, cake_jit.dw_partition(t, h)[0])):
            return contextlib.nullcontext()
        return crd.force_chunk_order(a.order)
    tokens = bench.int_list(a.tokens)
    dev = torch.device("cuda")
    timer = bench.Timer(dev)
    torch.manual_seed(0)
    rows = []
    print(f"{'pass':4s} {'shape':16s} {'first':>9s} {'second':>9s}  second/first", flush=True)
    wdtype = torch.bfloat16 if a.weight == "bf16" else torch.float32
    for pass_ in a.passes.split(","):
        e1, e2 = ("fused", "pair") if a.forms else PAIRS[pass_]
        force = crd.force_form if a.forms else crd.force_engine
        for h in map(int, a.widths.split(",")):
            for t in tokens or (FORM_TOKENS if a.forms else TOKENS[pass_]):
                if a.forms and t > cake_jit.one_row_chunks(h):
                    continue
                x = torch.randn(t, h, device=dev).to(torch.bfloat16)
                w = (torch.rand(h, device=dev) + 0.5).to(wdtype)
                g = torch.randn_like(x)
                rstd = crd.forward(x, w, 1e-6)[1]
                us = {}
                for e in (e1, e2):
                    with force(e), reads(), order(pass_, t, h):
                        fn = (lambda: crd.forward(x, w, 1e-6)) if pass_ == "fwd" else (lambda: crd.backward(g, x, w, rstd))
                        us[e] = timer(fn)
                row = {"pass": pass_, "T": t, "H": h, "weight": a.weight, "order": a.order, "us": us}
                note = ""
                if a.forms:  # the two forms (and capped fused grids) must agree bit for bit
                    runs = [(e, None) for e in (e1, e2)] + [(e1, c) for c in bench.int_list(a.caps)]
                    outs = []
                    for e, cap in runs:
                        with force(e), (crd.cap_ctas(cap) if cap else contextlib.nullcontext()):
                            outs.append([o.clone() for o in crd.backward(g, x, w, rstd)])
                            if cap:
                                us[f"{e}/cap{cap}"] = timer(lambda: crd.backward(g, x, w, rstd))
                    row["bits_equal"] = all(torch.equal(p.view(torch.uint8), q.view(torch.uint8))
                                            for o in outs[1:] for p, q in zip(outs[0], o))
                    note = "" if row["bits_equal"] else "  BITS DIFFER"
                    note += "".join(f"  {k} {v:.3f}" for k, v in us.items() if "/cap" in k)
                rows.append(row)
                print(f"{pass_:4s} [{t},{h}]{'':{max(0, 14 - len(str(t)) - len(str(h)))}s} {us[e1]:9.3f} {us[e2]:9.3f}  "
                      f"{us[e2] / us[e1]:.3f} ({e2}/{e1}){note}", flush=True)
                del x, g
    Path(a.out).mkdir(parents=True, exist_ok=True)
    name = (f"{'forms' if a.forms else 'engines'}-{a.weight}{'' if a.reads == 'route' else '-' + a.reads}"
            f"{'' if a.order == 'route' else '-' + a.order}.json")
    Path(a.out, name).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
