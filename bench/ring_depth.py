"""Tuning experiment: the row ring's depth cap (CAKE_MAX_RING_STAGES) against time, per program.

    python bench/ring_depth.py [--caps 1,2,4,6] [--build DIR] [--out DIR] [-j 16]

Builds each specialised program once per cap (the production build is cap 4), runs every shape
with each build through the public API, checks that every cap gives the same bits as the
production program (the depth only changes when rows are loaded, never what is computed), and
prints kernel-active us (bench.Timer: CUPTI, cold L2, median of 30) per cap.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cake_rmsnorm_det as crd  # noqa: E402
from cake_rmsnorm_det import api, bench, programs  # noqa: E402

WIDTHS = (256, 512, 1536, 2048, 4096, 5120, 6144)


def variant(prog: programs.Program, cap: int) -> programs.Program:
    return dataclasses.replace(prog, name=f"{prog.name}_ring{cap}",
                               nvcc_flags=prog.nvcc_flags + (f"-DCAKE_MAX_RING_STAGES={cap}",))


def _build(key: str, cap: int, out: str) -> str:
    prog = programs.program_by_key(key)
    return str(programs.build_program(variant(prog, cap), "sm_90a", Path(out)))


def shapes() -> list[tuple[str, tuple[int, ...], int, bool]]:
    out = [(f"[65536,{h}]", (65536, h), h, False) for h in WIDTHS]
    out += [(f"[{t},4096]", (t, 4096), 4096, False) for t in (1, 256, 1024)]
    out += [("[4096,512]", (4096, 512), 512, False), ("[65536,4096] res", (65536, 4096), 4096, True),
            ("key [32768,4,256]", (32768, 4, 256), 256, False),
            ("query [16384,24,256]", (16384, 24, 512), 256, False)]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--caps", default="1,2,4,6")
    ap.add_argument("--build", default="/tmp/ring_depth_build", help="where the variant libraries go")
    ap.add_argument("--out", default="/tmp/ring_depth", help="where ring_depth.json goes")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    caps = [int(c) for c in a.caps.split(",")]
    keys = [f"{p}_h{h}" for p in ("fwd", "bwd") for h in WIDTHS]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(a.jobs) as pool:
        libs = {(k, c): pool.submit(_build, k, c, a.build) for k in keys for c in caps}
        libs = {kc: f.result() for kc, f in libs.items()}
    print(f"built {len(libs)} variants in {time.perf_counter() - t0:.0f}s", flush=True)
    import tvm_ffi

    mods = {kc: tvm_ffi.load_module(lib) for kc, lib in libs.items()}
    real_load = api.load_program
    state = {"cap": None}

    def load(prog, arch):
        if state["cap"] is None or prog.hidden is None:
            return real_load(prog, arch)
        return mods[(prog.key, state["cap"])]

    api.load_program = load
    dev = torch.device("cuda")
    timer = bench.Timer(dev)
    torch.manual_seed(0)
    results, bad = [], []
    for label, shape, h, res in shapes():
        buf = torch.randn(shape, device=dev).to(torch.bfloat16)
        x = buf[..., :h] if shape[-1] != h else buf
        w = (torch.rand(h, device=dev) + 0.5).to(torch.bfloat16)
        g = torch.randn(x.shape, device=dev).to(torch.bfloat16)
        r = torch.randn(x.shape, device=dev).to(torch.bfloat16) if res else None
        kw = {"residual": r} if res else {}
        state["cap"] = None
        ref_f = crd.forward(x, w, 1e-6, **kw)
        hx = ref_f[1] if res else x
        rstd = ref_f[-1]
        ref_b = crd.backward(g, hx, w, rstd, r)
        row = {"shape": label}
        for cap in caps:
            state["cap"] = cap
            f = crd.forward(x, w, 1e-6, **kw)
            b = crd.backward(g, hx, w, rstd, r)
            torch.cuda.synchronize()
            same = all(torch.equal(p.view(torch.int16) if p.dtype == torch.bfloat16 else p.view(torch.int32),
                                   q.view(torch.int16) if q.dtype == torch.bfloat16 else q.view(torch.int32))
                       for p, q in zip(list(f) + list(b), list(ref_f) + list(ref_b)))
            if not same:
                bad.append((label, cap))
            row[f"fwd{cap}"] = round(timer(lambda: crd.forward(x, w, 1e-6, **kw)), 2)
            row[f"bwd{cap}"] = round(timer(lambda: crd.backward(g, hx, w, rstd, r)), 2)
        results.append(row)
        print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
        del buf, x, g, r
    state["cap"] = None
    Path(a.out).mkdir(parents=True, exist_ok=True)
    Path(a.out, "ring_depth.json").write_text(json.dumps(results, indent=1))
    print(f"\nbits differ from production on: {bad or 'none'}")
    for p in ("fwd", "bwd"):
        print(f"\n{p} us by ring cap " + " ".join(f"{c:>8d}" for c in caps))
        for row in results:
            print(f"{row['shape']:24s}" + " ".join(f"{row[f'{p}{c}']:8.2f}" for c in caps))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
