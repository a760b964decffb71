"""Benchmark: CUPTI kernel-active time, cold L2, against torch eager, torch.compile, F.rms_norm and Liger.

    python -m cake_rmsnorm_det.bench [--quick] [--passes bwd,fwd] [--out bench/results]

Method (docs/performance.md): per call, the sum of the durations of every kernel and memset it
launches (torch.profiler, CUDA activity); a 512 MB flush kernel (bitwise_not_ on int8) before
every call, and the trace split at it; median of 30 calls after 3 warm-ups, one process.
Effective bandwidth = bytes / time with bytes = 6*T*H + 4T (bwd) or 4*T*H + 4T (fwd).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import torch

FLUSH_NAME = "bitwise_not"
WIDTHS = (256, 512, 1536, 2048, 4096, 5120, 6144)
TOKENS = (1, 16, 256, 1024, 4096, 16384, 65536)


def int_list(text: str) -> tuple[int, ...]:
    """A comma-separated list of integers ("" -> ()), for the bench scripts' --tokens/--widths."""
    return tuple(int(t) for t in text.split(",") if t)


def shapes(quick: bool, extra_widths: tuple[int, ...] = ()) -> list[dict]:
    """The benchmark's shape table (../shared/MEASURE.md): every width at each token count, then the
    key and query head views; `quick`: four token counts and one view of each kind. `extra_widths`:
    widths outside the table (the generic programs') at the same token counts."""
    out = []
    ts = (1, 256, 4096, 65536) if quick else TOKENS
    for h in WIDTHS + tuple(h for h in extra_widths if h not in WIDTHS):
        for t in ts:
            out.append({"label": f"[{t},{h}]", "T": t, "H": h, "kind": "rows"})
    for t in ((32768,) if quick else (4096, 32768, 65536)):
        out.append({"label": f"key [{t},4,256]", "T": t, "H": 256, "kind": "key"})
    for t in ((16384,) if quick else (1024, 4096, 16384, 65536)):
        out.append({"label": f"query [{t},24,256] of [{t},24,512]", "T": t, "H": 256, "kind": "query"})
    return out


def make_input(shape: dict, device: torch.device) -> torch.Tensor:
    """The x of one table shape, BF16 normal values: plain rows, the contiguous key view, or the
    strided query view (the first 256 columns of each head of a [T, 24, 512] buffer, not copied)."""
    t, h = shape["T"], shape["H"]
    if shape["kind"] == "rows":
        return torch.randn(t, h, device=device).to(torch.bfloat16)
    if shape["kind"] == "key":
        return torch.randn(t, 4, h, device=device).to(torch.bfloat16)
    return torch.randn(t, 24, 512, device=device).to(torch.bfloat16)[:, :, :h]


class Timer:
    """Kernel-active time per call from the profiler, with a cold L2 before every call."""

    def __init__(self, device, flush_bytes: int = 512 * 2**20, flush: str = "rewrite"):
        """flush_bytes: the buffer bitwise_not_ rewrites before every call (512 MB evicts L2; a tiny
        one keeps it warm and only marks where calls start). flush: "rewrite" (the method of
        ../shared/MEASURE.md: the rewrite leaves L2 full of the buffer's dirty lines, which a call then
        evicts) or "read" (the buffer only read, by a sum, so that a call starts with L2 cold and
        clean; one-byte bitwise_not_ markers before and after it split the trace, and the sum's
        kernels between them belong to no call)."""
        if flush not in ("rewrite", "read"):
            raise ValueError(f"flush must be 'rewrite' or 'read', got {flush!r}")
        self.flush = flush
        self.flush_buf = torch.empty(flush_bytes, dtype=torch.int8, device=device)
        self.marker = torch.zeros(1, dtype=torch.int8, device=device)

    def _flush(self) -> None:
        if self.flush == "rewrite":
            self.flush_buf.bitwise_not_()
        else:
            self.marker.bitwise_not_()
            self.flush_buf.view(torch.int32).sum(dtype=torch.int64)
            self.marker.bitwise_not_()

    def kernel_times(self, fn: Callable[[], object], n: int = 30, warmup: int = 3) -> list[list[float]]:
        """The durations (us) of the kernels and memsets each of n calls launched, in launch order."""
        return [[dur for _, dur in call] for call in self.kernel_events(fn, n, warmup)]

    def kernel_events(self, fn: Callable[[], object], n: int = 30,
                      warmup: int = 3) -> list[list[tuple[str, float]]]:
        """(name, duration in us) of the kernels and memsets each of n calls launched, in launch order."""
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                self._flush()
                fn()
            torch.cuda.synchronize()
        evs = []
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith("Memcpy"):
                evs.append((e.time_range.start, e.time_range.elapsed_us(), e.name))
        evs.sort()
        calls = split_calls([(name, dur) for _, dur, name in evs])
        if self.flush == "read":
            calls = calls[1::2]  # every other span lies between a read flush's two markers
        if len(calls) != n:
            raise RuntimeError(f"profiler split gave {len(calls)} calls, expected {n}")
        return calls

    def __call__(self, fn: Callable[[], object], n: int = 30, warmup: int = 3) -> float:
        return statistics.median(sum(c) for c in self.kernel_times(fn, n, warmup))


def split_calls(events: list[tuple[str, float]]) -> list[list[tuple[str, float]]]:
    """A trace's (name, us) events in launch order, cut at each flush kernel or marker (FLUSH_NAME):
    the span after each one (what precedes the first belongs to no span). With the read flush the
    spans alternate: the flush's own kernels, then a call's."""
    spans: list[list[tuple[str, float]]] = []
    cur: Optional[list[tuple[str, float]]] = None
    for name, dur in events:
        if FLUSH_NAME in name:
            if cur is not None:
                spans.append(cur)
            cur = []
        elif cur is not None:
            cur.append((name, dur))
    if cur is not None:
        spans.append(cur)
    return spans


def _stream_tbps(op: Callable[[], object], nbytes: int) -> float:
    """TB/s of op (moving nbytes, read + written), from CUDA events over 10 calls after 3."""
    for _ in range(3):
        op()
    torch.cuda.synchronize()
    t0 = torch.cuda.Event(enable_timing=True)
    t1 = torch.cuda.Event(enable_timing=True)
    t0.record()
    for _ in range(10):
        op()
    t1.record()
    torch.cuda.synchronize()
    return nbytes / (t0.elapsed_time(t1) / 1e3 / 10) / 1e12


def copy_ceiling(device: torch.device) -> float:
    """TB/s of a 2 GB device-to-device copy (bytes read + written): the forward's ratio, one read
    to one write."""
    a = torch.empty(2 * 2**30, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    tbps = _stream_tbps(lambda: b.copy_(a), 2 * a.numel())
    del a, b
    return tbps


def add_ceiling(device: torch.device) -> float:
    """TB/s of PyTorch's BF16 add of two 1 GB operands into a third (bytes read + written): the
    backward's ratio, two reads (g, x) to one write (dx)."""
    a = torch.zeros(2**29, dtype=torch.bfloat16, device=device)
    b = torch.zeros_like(a)
    c = torch.empty_like(a)
    tbps = _stream_tbps(lambda: torch.add(a, b, out=c), 3 * 2 * a.numel())
    del a, b, c
    return tbps


# --------------------------------------------------------------------------------------------
# The contenders. Each returns a zero-argument callable that runs one call of the pass.

def eager_fwd(x: torch.Tensor, w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The eager baseline's forward: the FP32 formula, y in BF16 and rstd."""
    xf = x.float()
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * r * w.float()).to(torch.bfloat16), r


def eager_bwd(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
              rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The eager baseline's backward: dx (BF16) and dw (FP32, PyTorch's own reduction) from the FP32
    formula."""
    gf, xf, wf = g.float(), x.float(), w.float()
    r = rstd.unsqueeze(-1)
    xhat = xf * r
    gw = gf * wf
    c = (gw * xhat).mean(-1, keepdim=True)
    dx = (r * (gw - xhat * c)).to(torch.bfloat16)
    dw = (gf * xhat).reshape(-1, x.shape[-1]).sum(0)
    return dx, dw


_compiled: dict = {}


def contenders(pass_: str, x: torch.Tensor, w: torch.Tensor, g: torch.Tensor, eps: float,
               residual: Optional[torch.Tensor], include_baselines: bool) -> dict[str, Callable[[], object]]:
    """One zero-argument call of the pass per contender: cake_rmsnorm_det, and with
    `include_baselines` torch eager, torch.compile (dynamic=False), F.rms_norm with autograd and
    Liger where it is installed (the peers read strided views through a reshape copy)."""
    import cake_rmsnorm_det as crd

    out: dict[str, Callable[[], object]] = {}
    if pass_ == "fwd":
        if residual is None:
            out["cake"] = lambda: crd.forward(x, w, eps)
        else:
            out["cake"] = lambda: crd.forward(x, w, eps, residual=residual)
    else:
        if residual is None:
            y, rstd = crd.forward(x, w, eps)
            xin = x
            out["cake"] = lambda: crd.backward(g, xin, w, rstd)
        else:
            y, h, rstd = crd.forward(x, w, eps, residual=residual)
            out["cake"] = lambda: crd.backward(g, h, w, rstd, residual)
    if not include_baselines:
        return out
    xc = x.reshape(-1, x.shape[-1])          # peers take a reshape copy of strided views
    gc = g.reshape(-1, x.shape[-1])
    rstd_e = eager_fwd(xc, w, eps)[1].squeeze(-1)
    if pass_ == "fwd":
        out["eager"] = lambda: eager_fwd(x.reshape(-1, x.shape[-1]), w, eps)
        cf = torch.compile(eager_fwd, dynamic=False)
        out["compile"] = lambda: cf(x.reshape(-1, x.shape[-1]), w, eps)
        out["F.rms_norm"] = lambda: torch.nn.functional.rms_norm(x, (x.shape[-1],), w.to(x.dtype) if w.dtype != x.dtype else w, eps)
    else:
        out["eager"] = lambda: eager_bwd(g.reshape(-1, x.shape[-1]), x.reshape(-1, x.shape[-1]), w, rstd_e)
        cb = torch.compile(eager_bwd, dynamic=False)
        out["compile"] = lambda: cb(g.reshape(-1, x.shape[-1]), x.reshape(-1, x.shape[-1]), w, rstd_e)
        xr = xc.detach().clone().requires_grad_(True)
        wr = w.detach().clone().to(x.dtype).requires_grad_(True)
        yr = torch.nn.functional.rms_norm(xr, (x.shape[-1],), wr, eps)
        out["F.rms_norm"] = lambda: torch.autograd.grad(yr, (xr, wr), gc, retain_graph=True)
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        xl = xc.detach().clone().requires_grad_(pass_ == "bwd")
        wl = w.detach().clone().requires_grad_(pass_ == "bwd")
        if pass_ == "fwd":
            out["liger"] = lambda: LigerRMSNormFunction.apply(x.reshape(-1, x.shape[-1]), wl, eps, 0.0, "llama", False)
        else:
            yl = LigerRMSNormFunction.apply(xl, wl, eps, 0.0, "llama", False)
            out["liger"] = lambda: torch.autograd.grad(yl, (xl, wl), gc, retain_graph=True)
    except Exception as e:  # not installed, or a shape it refuses
        print(f"  liger unavailable: {type(e).__name__}: {e}", file=sys.stderr)
    return out


def lift_recompile_limits() -> None:
    """One static compile per shape (dynamic=False) for the torch.compile contender: lift dynamo's
    recompile limits, whichever of them this torch has."""
    import torch._dynamo

    for knob in ("cache_size_limit", "recompile_limit", "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 100000)


def row_inputs(rows: int, hidden: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x, w, g of the bench scripts: BF16 normal rows, a BF16 weight in [0.5, 1.5), BF16 normal g."""
    x = torch.randn(rows, hidden, device=device).to(torch.bfloat16)
    w = (torch.rand(hidden, device=device) + 0.5).to(torch.bfloat16)
    return x, w, torch.randn_like(x)


def run(args: argparse.Namespace) -> list[dict]:
    """Time every shape of the table that `args` selects, each contender in this process (CUPTI
    kernel-active time, cold L2, median of 30), with a progress line a shape; one dict a row."""
    lift_recompile_limits()
    device = torch.device("cuda")
    torch.manual_seed(0)
    timer = Timer(device)
    ceiling = copy_ceiling(device)
    two_reads = add_ceiling(device)
    props = torch.cuda.get_device_properties(device)
    meta = {"gpu": props.name, "sms": props.multi_processor_count, "date": time.strftime("%Y-%m-%d"),
            "torch": torch.__version__, "copy_TBps": round(ceiling, 3), "add_TBps": round(two_reads, 3),
            "command": " ".join(sys.argv)}
    print(f"# {meta['gpu']} ({meta['sms']} SMs), copy ceiling {ceiling:.2f} TB/s, "
          f"two-read add ceiling {two_reads:.2f} TB/s", flush=True)
    rows: list[dict] = []
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    jsonl = (outdir / "results.jsonl").open("w")
    eps = 1e-6
    variants = [("bf16", False)] if args.plain_only else [("bf16", False), ("bf16", True), ("fp32", False),
                                                         ("fp32", True)]
    if args.variants:
        variants = [(v.split(":")[0], v.split(":")[1] == "1") for v in args.variants.split(",")]
    widths = int_list(args.widths)
    todo = [(p, s, wd, res) for p in args.passes for s in shapes(args.quick, widths) for wd, res in variants
            if not (args.quick and (wd, res) == ("fp32", True))
            and args.min_tokens <= s["T"] <= (args.max_tokens or s["T"])
            and (not widths or s["H"] in widths)]
    t_start = time.perf_counter()
    for i, (pass_, s, wd, res) in enumerate(todo, 1):
        x = make_input(s, device)
        w = (torch.rand(s["H"], device=device) + 0.5).to(torch.bfloat16 if wd == "bf16" else torch.float32)
        g = torch.randn(x.shape, device=device).to(torch.bfloat16)
        r = torch.randn(x.shape, device=device).to(torch.bfloat16) if res else None
        base = wd == "bf16" and not res and not args.no_baselines
        nrows = x.numel() // s["H"]
        nbytes = (6 if pass_ == "bwd" else 4) * x.numel() + 4 * nrows
        row = {"pass": pass_, "shape": s["label"], "T": s["T"], "H": s["H"], "rows": nrows, "weight": wd,
               "residual": res, "bytes": nbytes, "us": {}}
        for name, fn in contenders(pass_, x, w, g, eps, r, base).items():
            try:
                row["us"][name] = round(timer(fn), 3)
            except Exception as e:
                print(f"  {name} failed on {s['label']}: {type(e).__name__}: {e}", file=sys.stderr)
        ours = row["us"].get("cake")
        row["TBps"] = round(nbytes / ours / 1e6, 3) if ours else None
        others = {k: v for k, v in row["us"].items() if k != "cake"}
        row["best_baseline"] = min(others, key=others.get) if others else None
        row["speedup_vs_best"] = round(others[row["best_baseline"]] / ours, 3) if others and ours else None
        rows.append(row)
        jsonl.write(json.dumps(row) + "\n")
        jsonl.flush()
        el = time.perf_counter() - t_start
        print(f"[{i}/{len(todo)} {el:5.0f}s] {pass_} {s['label']:34s} w={wd} res={int(res)} "
              f"cake {ours} us {row['TBps']} TB/s " + " ".join(f"{k}={v}" for k, v in others.items()), flush=True)
        del x, g, r
    (outdir / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    (outdir / "results.md").write_text(markdown(meta, rows))
    try:
        plot(rows, outdir)
    except Exception as e:
        print(f"plot skipped: {e}", file=sys.stderr)
    return rows


def markdown(meta: dict, rows: list[dict]) -> str:
    """The results as docs/performance.md's table: us per contender, cake's TB/s, best baseline / cake."""
    names = ["cake", "eager", "compile", "F.rms_norm", "liger"]
    lines = [f"GPU {meta['gpu']} ({meta['sms']} SMs), {meta['date']}, torch {meta['torch']}, copy ceiling "
             f"{meta['copy_TBps']} TB/s"
             + (f", two-read add ceiling {meta['add_TBps']} TB/s" if "add_TBps" in meta else "")
             + ". Kernel-active us per call (CUPTI), cold L2, median of 30.", "",
             "| pass | shape | w | res | " + " | ".join(names) + " | cake TB/s | best baseline / cake |",
             "|" + "---|" * (len(names) + 6)]
    for r in rows:
        cells = [str(r["us"].get(n, "")) for n in names]
        lines.append(f"| {r['pass']} | {r['shape']} | {r['weight']} | {int(r['residual'])} | " + " | ".join(cells)
                     + f" | {r['TBps']} | {r['speedup_vs_best'] or ''} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], outdir: Path) -> None:
    """<pass>_tbps.png in `outdir`: effective TB/s against T, one panel per width, every contender
    (BF16 weight, no residual)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for pass_ in ("bwd", "fwd"):
        sel = [r for r in rows if r["pass"] == pass_ and r["weight"] == "bf16" and not r["residual"]
               and "[" in r["shape"] and r["shape"].count(",") == 1]
        if not sel:
            continue
        fig, axes = plt.subplots(2, 4, figsize=(16, 7), sharey=True)
        for ax, h in zip(axes.flat, WIDTHS):
            rs = sorted((r for r in sel if r["H"] == h), key=lambda r: r["T"])
            for name in ("cake", "eager", "compile", "F.rms_norm", "liger"):
                pts = [(r["T"], r["bytes"] / r["us"][name] / 1e6) for r in rs if name in r["us"]]
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=name)
            ax.set_xscale("log", base=2)
            ax.set_title(f"{pass_} H={h}")
            ax.set_xlabel("T")
            ax.set_ylabel("TB/s")
            ax.grid(True, alpha=0.3)
        axes.flat[0].legend()
        axes.flat[-1].axis("off")
        fig.tight_layout()
        fig.savefig(outdir / f"{pass_}_tbps.png", dpi=80)


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cake_rmsnorm_det.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer shapes")
    ap.add_argument("--passes", default="bwd,fwd")
    ap.add_argument("--no-baselines", action="store_true", help="time cake_rmsnorm_det alone")
    ap.add_argument("--plain-only", action="store_true", help="BF16 weight without residual only")
    ap.add_argument("--variants", help="weight:residual pairs, e.g. fp32:0,bf16:1 (default: all four)")
    ap.add_argument("--compare", metavar="JSON", help="an earlier results.json: print cake now vs then, "
                    "and against the baselines of either run")
    ap.add_argument("--max-tokens", type=int, default=0, help="only the shapes of at most this many tokens")
    ap.add_argument("--min-tokens", type=int, default=0, help="only the shapes of at least this many tokens")
    ap.add_argument("--widths", default="", help="only the shapes of these widths, e.g. 256,512 (the head views are "
                    "256); a width outside the table (e.g. 8192: a generic program) at the table's token counts")
    ap.add_argument("--out", default="bench/results")
    a = ap.parse_args(argv)
    a.passes = a.passes.split(",")
    if not torch.cuda.is_available():
        print("no CUDA device: the benchmark needs the GPU", file=sys.stderr)
        return 2
    rows = run(a)
    if a.compare:
        print(compare(rows, json.loads(Path(a.compare).read_text())["rows"]))
    return 0


def compare(rows: list[dict], earlier: list[dict]) -> str:
    """cake now against cake in an earlier run, and against the best baseline of either run."""
    then = {(r["pass"], r["shape"], r["weight"], r["residual"]): r for r in earlier}
    out = ["pass shape                                   w    res  cake_us  then_us  now/then  best_baseline_us  best/now"]
    for r in rows:
        old = then.get((r["pass"], r["shape"], r["weight"], r["residual"]))
        now = r["us"].get("cake")
        base = {k: v for k, v in r["us"].items() if k != "cake"}
        if old:
            base.update({k: v for k, v in old["us"].items() if k != "cake" and k not in base})
        best = min(base.values()) if base else None
        was = old["us"].get("cake") if old else None
        out.append(f"{r['pass']:4s} {r['shape'][:38]:38s} {r['weight']:4s} {int(r['residual'])}  {now!s:>8} {was!s:>8} "
                   f"{(now / was if now and was else float('nan')):8.3f}  {best!s:>16} "
                   f"{(best / now if best and now else float('nan')):8.3f}")
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(_main())
