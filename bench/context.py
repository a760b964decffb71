"""What runs before a call: each contender's time after the flush alone and after another kernel (GPU).

    python bench/context.py [--shapes fwd:256x6144,bwd:1024x1536] [--out context.json]

The benchmark flushes L2 with a 512 MB `bitwise_not_` before every call, so every contender's first
kernel follows a long elementwise kernel that used no shared memory and left L2 full of dirty lines.
In a model the call follows other work. Here the call is timed (the benchmark's method: CUPTI
kernel-active time of its own kernels, median of 30) after the flush and then one of:

  none         nothing (the benchmark's own setting)
  elementwise  a 4 KB `add_` (PyTorch's vectorized elementwise kernel, no shared memory)
  reduction    a 4 KB `sum` (PyTorch's reduce kernel, shared memory)
  gemm         a [256,256] x [256,256] BF16 matmul (cuBLAS: large shared memory per CTA)
  self-1row    the same contender on one row of the same width (its own code and launch path
               warm, its data still cold; package only)

The preamble's kernels are left out of the call's time (their count is taken from the preamble
timed alone). A contender whose time moves with the preamble where another's does not pays for
something of its launch (its shared-memory configuration, its code's first fetch) rather than for
its bytes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cake_rmsnorm_det import bench  # noqa: E402


def preambles(dev, hidden: int, pass_: str) -> dict:
    import cake_rmsnorm_det as crd

    small = torch.zeros(2048, device=dev, dtype=torch.bfloat16)
    a = torch.randn(256, 256, device=dev).to(torch.bfloat16)
    one = torch.randn(1, hidden, device=dev).to(torch.bfloat16)
    w1 = torch.ones(hidden, device=dev, dtype=torch.bfloat16)
    y1, r1 = crd.forward(one, w1)
    self_call = (lambda: crd.forward(one, w1)) if pass_ == "fwd" else (lambda: crd.backward(one, one, w1, r1))
    return {"none": None, "elementwise": lambda: small.add_(1), "reduction": lambda: small.sum(),
            "gemm": lambda: a @ a, "self-1row": self_call}


def call_times(timer: bench.Timer, pre, fn, skip: int) -> float:
    """Median over calls of the kernel-active time of fn's kernels, after pre's `skip` kernels."""
    def both():
        if pre is not None:
            pre()
        fn()
    calls = timer.kernel_times(both)
    return round(statistics.median(sum(c[skip:]) for c in calls), 3)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="fwd:256x6144,fwd:1024x1536,fwd:16384x256,bwd:1024x1536,bwd:1x256",
                    help="pass:TxH,...")
    ap.add_argument("--contenders", default="cake,compile,F.rms_norm,liger")
    ap.add_argument("--out", default=str(Path(tempfile.mkdtemp(prefix="cake-context-")) / "context.json"))
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: this measurement needs the GPU", file=sys.stderr)
        return 2
    bench.lift_recompile_limits()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    timer = bench.Timer(dev)
    rows = []
    names = [n for n in a.contenders.split(",") if n]
    for item in a.shapes.split(","):
        pass_, shape = item.split(":")
        t, h = (int(v) for v in shape.split("x"))
        x, w, g = bench.row_inputs(t, h, dev)
        calls = bench.contenders(pass_, x, w, g, 1e-6, None, True)
        pres = preambles(dev, h, pass_)
        skips = {k: (0 if p is None else len(timer.kernel_times(p, n=5)[0])) for k, p in pres.items()}
        for name in names:
            if name not in calls:
                continue
            row = {"pass": pass_, "shape": f"[{t},{h}]", "who": name, "us": {}}
            for pre_name, pre in pres.items():
                if pre_name == "self-1row" and name != "cake":
                    continue
                row["us"][pre_name] = call_times(timer, pre, calls[name], skips[pre_name])
            rows.append(row)
            print(f"{pass_} {row['shape']:12s} {name:11s} " + "  ".join(f"{k} {v}" for k, v in row["us"].items()),
                  flush=True)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
