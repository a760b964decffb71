"""The forward's CTA size rule against full CTAs, side by side over token counts (GPU).

    python bench/fwd_launch.py [--out DIR] [--widths 256,512,...] [--tokens 1,16,...]

For each width and token count the forward is timed (the benchmark's method: CUPTI
kernel-active time, cold L2, median of 30) with the rule's rows per CTA (cake_jit.fwd_cta_rows)
and with full CTAs (rows_per_cta rows, the launch before the rule). Both launches' y and rstd are
compared bit for bit: the CTA size may never change a bit.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cake_rmsnorm_det as crd  # noqa: E402
from cake_rmsnorm_det import bench, cake_jit, layout  # noqa: E402
from cake_rmsnorm_det.programs import sm_count  # noqa: E402

TOKENS = (1, 16, 64, 256, 1024, 4096, 16384)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--widths", default=",".join(map(str, cake_jit.QUALIFIED_WIDTHS)))
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    a = ap.parse_args(argv)
    dev = torch.device("cuda")
    timer = bench.Timer(dev)
    torch.manual_seed(0)
    sms = sm_count(dev)
    rows, bad = [], 0
    print(f"{'shape':16s} {'rows/CTA':>8s} {'rule us':>9s} {'full us':>9s}  rule/full", flush=True)
    for h in bench.int_list(a.widths):
        rpc = layout.rows_per_cta(layout.fwd_row_layout(h)[0])
        for t in bench.int_list(a.tokens):
            x = torch.randn(t, h, device=dev).to(torch.bfloat16)
            w = (torch.rand(h, device=dev) + 0.5).to(torch.bfloat16)
            rule = cake_jit.fwd_cta_rows(h, t, sms)
            us, outs = {}, {}
            for name, n in (("rule", rule), ("full", rpc)):
                with crd.force_cta_rows(n):
                    outs[name] = [o.clone() for o in crd.forward(x, w, 1e-6)]
                    us[name] = timer(lambda: crd.forward(x, w, 1e-6))
            if not all(torch.equal(p, q) for p, q in zip(outs["rule"], outs["full"])):
                bad += 1
                print(f"  BITS DIFFER: [{t},{h}]", flush=True)
            rows.append({"T": t, "H": h, "cta_rows": {"rule": rule, "full": rpc}, "us": us})
            print(f"[{t},{h}]{'':{max(0, 14 - len(str(t)) - len(str(h)))}s} {rule:>4d}/{rpc:<3d} {us['rule']:9.3f} "
                  f"{us['full']:9.3f}  {us['rule'] / us['full']:.3f}", flush=True)
            del x
    Path(a.out).mkdir(parents=True, exist_ok=True)
    Path(a.out, "fwd-launch.json").write_text(json.dumps(rows, indent=1))
    print(f"bits: {'all equal' if bad == 0 else f'{bad} launches differ'}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
