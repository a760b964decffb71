"""Host time of a call (GPU): the CPU microseconds each call takes to validate, route and launch.

    python bench/host.py [--widths 256,4096] [--tokens 1,1024] [--calls 3000] [--out host.json]
    python bench/host.py --route-only [--arch sm_90a]      (CPU: the route's lookup alone)

The benchmark times kernels (CUPTI kernel-active time), which leaves out what a call costs the
host: at few rows an eager training step launches faster than the GPU runs the kernels only if
each call's Python and launch path is shorter than its kernels. Here each contender is called
`--calls` times back to back with nothing synchronizing in between (the launch queue absorbs the
kernels), and the loop's wall time per call is its host time; `drained` adds the wait for the
last kernel. Where the kernels take longer than the host, the queue fills and the loop runs at the
GPU's pace (host close to drained): the host's own cost shows at few rows. Contenders, per shape: the package's `forward`, `backward` and one autograd step
(`rmsnorm` forward and backward), PyTorch's `F.rms_norm` forward and autograd step, and
torch.compile's (default mode: no CUDA Graphs, so its launch path is timed too). Median of five
loops each. `--route-only` times the part of a call that needs no GPU, `cake_jit.route` (window,
program, dw partition), on any machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cake_rmsnorm_det as crd  # noqa: E402
from cake_rmsnorm_det import cake_jit  # noqa: E402

EPS = 1e-6


def per_call_us(fn, calls: int, loops: int = 5, sync=torch.cuda.synchronize) -> tuple[float, float]:
    """(host, drained) microseconds a call: median over `loops` loops of `calls` calls, each after
    20 warm-up calls; `sync` waits for the device (nothing to wait for on the CPU alone)."""
    for _ in range(20):
        fn()
    sync()
    host, drained = [], []
    for _ in range(loops):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        host.append((t1 - t0) / calls * 1e6)
        drained.append((t2 - t0) / calls * 1e6)
    return round(statistics.median(host), 2), round(statistics.median(drained), 2)


def route_us(arch: str, widths: list[int], tokens: list[int], calls: int) -> None:
    """The route's lookup a call, each pass (warm: its key routed before)."""
    print(f"{'shape':>14} {'pass':>5} {'route us':>9}")
    for h in widths:
        for t in tokens:
            for p in cake_jit.PASSES:
                us, _ = per_call_us(lambda: cake_jit.route(arch, p, h, "bf16", False, t), calls, sync=lambda: None)
                print(f"{f'[{t},{h}]':>14} {p:>5} {us:9.2f}")


def contenders(tokens: int, hidden: int, dev: torch.device) -> dict:
    x = torch.randn(tokens, hidden, device=dev).to(torch.bfloat16)
    g = torch.randn_like(x)
    w = torch.ones(hidden, device=dev, dtype=torch.bfloat16)
    _, rstd = crd.forward(x, w, EPS)
    xg = x.clone().requires_grad_(True)
    wg = w.clone().requires_grad_(True)

    def step(norm):
        def run():
            norm(xg, wg).backward(g)
            xg.grad = wg.grad = None
        return run

    def torch_norm(a, b):
        return F.rms_norm(a, (hidden,), b, EPS)

    compiled = torch.compile(torch_norm, dynamic=False)
    return {
        "cake forward": lambda: crd.forward(x, w, EPS),
        "cake backward": lambda: crd.backward(g, x, w, rstd),
        "cake step": step(lambda a, b: crd.rmsnorm(a, b, EPS)),
        "F.rms_norm forward": lambda: torch_norm(x, w),
        "F.rms_norm step": step(torch_norm),
        "torch.compile forward": lambda: compiled(x, w),
        "torch.compile step": step(compiled),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--widths", default="256,4096")
    ap.add_argument("--tokens", default="1,1024")
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--out", type=Path, help="write the rows as JSON here")
    ap.add_argument("--route-only", action="store_true", help="time cake_jit.route alone (no GPU needed)")
    ap.add_argument("--arch", default="sm_90a", help="with --route-only: the routes' arch")
    a = ap.parse_args(argv)
    if a.route_only:
        route_us(a.arch, [int(v) for v in a.widths.split(",")], [int(v) for v in a.tokens.split(",")], a.calls)
        return 0
    if not torch.cuda.is_available():
        print("bench/host.py needs a CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    rows = []
    print(f"{'shape':>14} {'contender':>22} {'host us':>9} {'drained us':>11}")
    for h in (int(v) for v in a.widths.split(",")):
        for t in (int(v) for v in a.tokens.split(",")):
            for name, fn in contenders(t, h, dev).items():
                host, drained = per_call_us(fn, a.calls)
                rows.append({"tokens": t, "hidden": h, "contender": name, "host_us": host, "drained_us": drained})
                print(f"{f'[{t},{h}]':>14} {name:>22} {host:9.2f} {drained:11.2f}", flush=True)
    if a.out:
        a.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "calls": a.calls, "rows": rows},
                                    indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
