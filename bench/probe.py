"""A few calls for Nsight Compute to profile (GPU): small and large rows of both passes.

    ncu --clock-control none --section WarpStateStats -k regex:'forward_kernel|backward_(direct|ring)_kernel' \
        python bench/probe.py [--shapes 1x4096,256x4096,65536x4096] [--passes fwd,bwd] [--peers] [--both-reads]

Each shape is called twice per contender (the first loads the program or compiles the peer); a
flush of L2 precedes every call, and Nsight Compute's own cache control keeps the profiled launch
cold as well. --peers adds torch.compile and Liger (the benchmark's contenders; widen the -k
filter to 'triton|rms_norm' to profile their kernels beside ours). --both-reads calls the package with
its rows streamed past L1 and then read into it (crd.force_l1_loads), in that order. --floors adds
PyTorch's elementwise kernels moving the pass's bytes (bench/split.py's floors: `add` g + x into a
third tensor for the backward, `neg` for the forward; filter 'elementwise' to profile them).
"""

import argparse
import contextlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cake_rmsnorm_det as crd  # noqa: E402
from cake_rmsnorm_det import bench  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--shapes", default="1x4096,256x4096,65536x4096", help="TxH,TxH,...")
ap.add_argument("--passes", default="fwd,bwd")
ap.add_argument("--peers", action="store_true", help="also call torch.compile and Liger")
ap.add_argument("--both-reads", action="store_true", help="the package with streamed, then L1-allocating row reads")
ap.add_argument("--floors", action="store_true", help="also PyTorch's add (bwd) / neg (fwd) of the same bytes")
a = ap.parse_args()
dev = torch.device("cuda")
flush = torch.empty(512 * 2**20, dtype=torch.int8, device=dev)
torch.manual_seed(0)
for shape in a.shapes.split(","):
    rows, hidden = (int(v) for v in shape.split("x"))
    x, w, g = bench.row_inputs(rows, hidden, dev)
    for pass_ in a.passes.split(","):
        calls = bench.contenders(pass_, x, w, g, 1e-6, None, include_baselines=a.peers)
        if a.floors:
            out = torch.empty_like(x)
            calls["floor"] = (lambda: torch.add(g, x, out=out)) if pass_ == "bwd" else (lambda: torch.neg(x, out=out))
        for name, call in calls.items():
            reads = (False, True) if a.both_reads and name == "cake" else (None,)
            for l1 in reads:
                if name not in ("cake", "compile", "liger", "floor"):
                    continue
                with (crd.force_l1_loads(l1) if l1 is not None else contextlib.nullcontext()):
                    for _ in range(2):
                        flush.bitwise_not_()
                        call()
torch.cuda.synchronize()
print("probe done")
