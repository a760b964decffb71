"""The forward's launch rule against the launches it chooses between, over token counts (GPU).

    python bench/fwd_launch.py [--out DIR] [--widths 256,512,...] [--tokens 1,16,...]
                               [--cta-rows 1,2] [--ctas-per-sm 2,4] [--packed [--pack-cta-rows 8,16]]
                               [--variant plain|fp32w|residual] [--l1-loads]

For each width and token count the forward is timed (the benchmark's method: CUPTI
kernel-active time, cold L2, median of 30) as the package launches it (cake_jit.fwd_cta_rows,
and the launcher's choice of wide rows), with narrow rows and with wide rows (each at the rows per
CTA of cake_jit.fwd_cta_rows for that width of row), with narrow full CTAs (rows_per_cta rows,
the launch before the rules), and where a measured CTA size holds, with the rule's CTAs without it
("spread", cake_jit.fwd_rule_cta_rows); --cta-rows and --ctas-per-sm add narrow launches of fewer rows per
CTA and of a grid capped at k CTAs per SM (each CTA then strides over the rows), --packed packed
rows (a thread holding layout.FWD_PACK canonical threads, where the width builds them). The route's
engine is kept, but wide rows are timed with weights in registers (the only engine that has
them). --l1-loads times instead the narrow canonical rows at the rule's CTA size with their reads
streamed past L1 and allocated in it (cake_jit.row_loads' two choices) beside the rule's launch.
Every launch's y and rstd are compared bit for bit: the launch may never change a bit.
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
from cake_rmsnorm_det.programs import sm_count  # noqa: E402

TOKENS = (1, 16, 64, 132, 256, 528, 1024, 4096)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--widths", default=",".join(map(str, cake_jit.QUALIFIED_WIDTHS)))
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    ap.add_argument("--cta-rows", default="", help="also narrow launches of these rows per CTA (e.g. 1,2)")
    ap.add_argument("--ctas-per-sm", default="", help="also narrow full CTAs capped at k * SMs (a striding grid)")
    ap.add_argument("--packed", action="store_true", help="also packed rows where built, at the rule's CTA "
                    "size for their span and at --pack-cta-rows")
    ap.add_argument("--pack-cta-rows", default="", help="packed rows' CTA sizes beside the rule's (e.g. 8,16)")
    ap.add_argument("--l1-loads", action="store_true", help="only the rule, and narrow rows with streamed "
                    "and with L1-allocating reads")
    ap.add_argument("--variant", default="plain", choices=["plain", "fp32w", "residual"],
                    help="the rows timed: BF16 weight, FP32 weight, or BF16 weight with the residual")
    a = ap.parse_args(argv)
    dev = torch.device("cuda")
    timer = bench.Timer(dev)
    torch.manual_seed(0)
    sms = sm_count(dev)
    rows, bad = [], 0
    if a.l1_loads:
        print(f"{'shape':16s} {'route':>16s} {'shipped':>8s} {'stream':>8s} {'l1':>8s}  l1/stream", flush=True)
    else:
        print(f"{'shape':16s} {'route':>16s} {'shipped':>8s} {'narrow':>8s} {'wide':>8s} {'full':>8s}  wide/narrow",
              flush=True)
    for h in bench.int_list(a.widths):
        rpc = layout.rows_per_cta(layout.fwd_row_layout(h)[0])
        has_wide = cake_jit.fwd_has_wide(h)
        for t in bench.int_list(a.tokens):
            x = torch.randn(t, h, device=dev).to(torch.bfloat16)
            w = (torch.rand(h, device=dev) + 0.5).to(torch.float32 if a.variant == "fp32w" else torch.bfloat16)
            res = torch.randn(t, h, device=dev).to(torch.bfloat16) if a.variant == "residual" else None
            engine = crd.explain_route("fwd", h, t, w.dtype, res is not None).engine
            pack = cake_jit.fwd_pack(h, t)
            launches = {"rule": contextlib.nullcontext,
                        "narrow": lambda: _stack(crd.force_wide(False), crd.force_pack(1)),
                        "full": lambda: _stack(crd.force_wide(False), crd.force_pack(1), crd.force_cta_rows(rpc))}
            if a.l1_loads:
                launches = {"rule": contextlib.nullcontext,
                            "stream": lambda: _stack(crd.force_wide(False), crd.force_pack(1), crd.force_l1_loads(False)),
                            "l1": lambda: _stack(crd.force_wide(False), crd.force_pack(1), crd.force_l1_loads(True))}
            elif a.packed and layout.fwd_has_pack(h):
                p = layout.FWD_PACK
                prpc = layout.rows_per_cta(layout.fwd_row_span(h, False, p))
                for r in (cake_jit.fwd_cta_rows(h, t, sms, pack=p),) + bench.int_list(a.pack_cta_rows):
                    if r <= prpc:
                        launches[f"pack{p}/{r}"] = lambda r=r: _stack(crd.force_pack(p), crd.force_cta_rows(r))
            spread = cake_jit.fwd_rule_cta_rows(rpc, t, sms)  # the rule without the measured steps
            if not a.l1_loads and spread != cake_jit.fwd_cta_rows(h, t, sms):
                launches["spread"] = lambda: _stack(crd.force_wide(False), crd.force_pack(1),
                                                    crd.force_cta_rows(spread))
            for r in bench.int_list(a.cta_rows) if not a.l1_loads else ():
                if r < rpc:
                    launches[f"rows{r}"] = lambda r=r: _stack(crd.force_wide(False), crd.force_pack(1),
                                                              crd.force_cta_rows(r))
            for k in bench.int_list(a.ctas_per_sm) if not a.l1_loads else ():
                launches[f"cap{k}"] = lambda k=k: _stack(crd.force_wide(False), crd.force_pack(1),
                                                        crd.force_cta_rows(rpc), crd.cap_ctas(k * sms))
            if has_wide and not a.l1_loads:
                launches["wide"] = lambda: _stack(crd.force_wide(True), crd.force_pack(1), crd.force_engine("regs"),
                                                  crd.force_cta_rows(cake_jit.fwd_cta_rows(h, t, sms, True)))
            us, outs = {}, {}
            for name, ctx in launches.items():
                with ctx():
                    outs[name] = [o.clone() for o in crd.forward(x, w, 1e-6, residual=res)]
                    us[name] = timer(lambda: crd.forward(x, w, 1e-6, residual=res))
            if not all(torch.equal(p, q) for n in outs for p, q in zip(outs["rule"], outs[n])):
                bad += 1
                print(f"  BITS DIFFER: [{t},{h}]", flush=True)
            rule = f"{engine}/{cake_jit.fwd_cta_rows(h, t, sms, pack=pack)}" + (f"/pack{pack}" if pack > 1 else "")
            if cake_jit.row_loads("fwd", h, t, pack=pack) == layout.L1_LOADS:
                rule += "/l1rd"
            rows.append({"T": t, "H": h, "variant": a.variant, "rule": rule, "engine": engine, "us": us})
            shape = f"[{t},{h}]"
            if a.l1_loads:
                print(f"{shape:16s} {rule:>16s} {us['rule']:8.3f} {us['stream']:8.3f} {us['l1']:8.3f}  "
                      f"{us['l1'] / us['stream']:.3f}", flush=True)
                del x
                continue
            wn = f"{us['wide'] / us['narrow']:.3f}" if "wide" in us else "-"
            extra = "".join(f"  {n} {v:.3f}" for n, v in us.items() if n.startswith(("spread", "rows", "cap", "pack")))
            print(f"{shape:16s} {rule:>16s} {us['rule']:8.3f} {us['narrow']:8.3f} {us.get('wide', float('nan')):8.3f} "
                  f"{us['full']:8.3f}  {wn}{extra}", flush=True)
            del x
    Path(a.out).mkdir(parents=True, exist_ok=True)
    Path(a.out, f"fwd-{'l1-loads' if a.l1_loads else 'launch'}{'' if a.variant == 'plain' else '-' + a.variant}.json").write_text(json.dumps(rows, indent=1))
    print(f"bits: {'all equal' if bad == 0 else f'{bad} launches differ'}")
    return 1 if bad else 0


@contextlib.contextmanager
def _stack(*ctxs):
    with contextlib.ExitStack() as st:
        for c in ctxs:
            st.enter_context(c)
        yield


if __name__ == "__main__":
    raise SystemExit(main())
