"""The one-row backward's time against where its tensors lie (GPU): the weight's dtype or the placement?

    python bench/placement.py [--widths 256,512] [--placements 16] [--flush rewrite|read] [--out placement.json]

bench/split.py had backward_row_kernel with an FP32 weight 0.1-0.2 us (6-16%) faster than with a
BF16 one at [1,256] / [1,512], on the H200 and on an H100, though the two kernels' SASS differ only
in the weight's load (docs/performance.md, rounds 43-45). split.py's two rows lie at different
addresses (its FP32 weight is a copy made after g and x), and a call of one row is a single chain
of DRAM round trips, whose length can depend on where each line lies. Here each placement puts g,
x, w, rstd, dx and dw at the same random 256-byte-aligned offsets of one pool for both weights, and
times PyTorch's add (g + x into dx's place) there too: if the BF16 / FP32 gap holds at every
placement, it is the weight's; if it follows the placement (the add with it), it is the addresses'.
Method: bench.Timer (CUPTI kernel-active time, a 512 MB flush before every call, median of 30).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cake_rmsnorm_det as crd  # noqa: E402
from cake_rmsnorm_det import bench  # noqa: E402

POOL_BYTES = 64 << 20  # 32 pages of 2 MB
SLOT_BYTES = 4096      # one tensor a slot: the largest here (an FP32 [512] weight or dw) is 2 KB


class Placement:
    """Six tensors of one row at random 256-byte-aligned offsets of `pool`, one 4 KB slot each."""

    NAMES = ("g", "x", "w", "rstd", "dx", "dw")

    def __init__(self, pool: torch.Tensor, rng: random.Random):
        slots = rng.sample(range(POOL_BYTES // SLOT_BYTES), len(self.NAMES))
        self.offsets = {n: s * SLOT_BYTES + 256 * rng.randrange(SLOT_BYTES // 2 // 256)
                        for n, s in zip(self.NAMES, slots)}
        self.pool = pool

    def tensor(self, name: str, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
        """The view of `name`'s slot as `dtype` of `shape`."""
        n = torch.Size(shape).numel() * dtype.itemsize
        o = self.offsets[name]
        return self.pool[o:o + n].view(dtype).view(shape)


def time_placement(timer: bench.Timer, p: Placement, hidden: int, src: dict) -> dict:
    """Median us of the one-row backward with each weight at placement p, and of the add there."""
    g = p.tensor("g", torch.bfloat16, (1, hidden))
    x = p.tensor("x", torch.bfloat16, (1, hidden))
    rstd = p.tensor("rstd", torch.float32, (1,))
    dx = p.tensor("dx", torch.bfloat16, (1, hidden))
    dw = p.tensor("dw", torch.float32, (hidden,))
    g.copy_(src["g"])
    x.copy_(src["x"])
    rstd.copy_(src["rstd"])
    out = {}
    for wt, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        w = p.tensor("w", dtype, (hidden,))
        w.copy_(src["w"])
        out[wt] = round(timer(lambda: crd.backward(g, x, w, rstd, dx=dx, dw=dw)), 3)
    out["add"] = round(timer(lambda: torch.add(g, x, out=dx)), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--widths", default="256,512", help="row widths, ','-separated (one row each)")
    ap.add_argument("--placements", type=int, default=16, help="random placements a width")
    ap.add_argument("--flush", default="rewrite", choices=["rewrite", "read"],
                    help="how L2 is emptied before each call (bench.Timer)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="a JSON file for the results")
    a = ap.parse_args()
    if a.placements < 1:
        raise SystemExit("placement: --placements must be at least 1")
    dev = torch.device("cuda")
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    timer = bench.Timer(dev, flush=a.flush)
    pool = torch.zeros(POOL_BYTES, dtype=torch.uint8, device=dev)
    props = torch.cuda.get_device_properties(dev)
    print(f"# {props.name} ({props.multi_processor_count} SMs), flush {a.flush}, {a.placements} placements a width",
          flush=True)
    rows = []
    for hidden in bench.int_list(a.widths):
        x, w, g = bench.row_inputs(1, hidden, dev)
        rstd = crd.forward(x, w)[1]
        src = {"g": g, "x": x, "w": w, "rstd": rstd}
        print(f"[1,{hidden}]  placement    bf16 us   fp32 us   fp32/bf16   add us", flush=True)
        for i in range(a.placements):
            r = time_placement(timer, Placement(pool, rng), hidden, src)
            rows.append({"H": hidden, "placement": i, **r})
            print(f"           {i:9d} {r['bf16']:9.3f} {r['fp32']:9.3f} {r['fp32'] / r['bf16']:11.3f} {r['add']:8.3f}",
                  flush=True)
    print("\nsummary: median [min, max] over placements")
    for hidden in bench.int_list(a.widths):
        rs = [r for r in rows if r["H"] == hidden]

        def span(vals):
            return f"{statistics.median(vals):.3f} [{min(vals):.3f}, {max(vals):.3f}]"
        print(f"[1,{hidden}]  bf16 {span([r['bf16'] for r in rs])}  fp32 {span([r['fp32'] for r in rs])}  "
              f"fp32/bf16 {span([r['fp32'] / r['bf16'] for r in rs])}  add {span([r['add'] for r in rs])}")
    if a.out:
        meta = {"gpu": props.name, "sms": props.multi_processor_count, "flush": a.flush, "seed": a.seed,
                "command": " ".join(sys.argv)}
        Path(a.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
