"""The forward's few-row calls taken apart by phase (GPU).

    python bench/phases.py [--shapes 1x256,256x6144,1024x4096] [--out phases.json]

bench/phases.cu builds the package's forward kernel (forward.cuh) with its phase marks live (entry;
squares summed, so the row's loads have landed; row sum known; rstd known; stores issued), one
build per setting: the marks compiled out (the package's kernel), marks that only wait on their
value, the kernel stopped at mark 1 / 2 / 3, and each warp's clock stamped at every mark. Per shape,
with the route's own launch knobs (engine, CTA rows, wide / packed rows, loads), in one process
(CUPTI kernel-active time, cold L2, median of 30, the benchmark's method): the package's call, each
build, torch.compile's kernel and PyTorch's neg of the same bytes (a copy's floor); the differences
between the stops are what each phase adds to the call. Then one stamped call after the flush: per
warp the cycles from each mark to the next (median and p90 over the live warps; the row sum's
includes the wait at the row's barrier for its other warps' loads), and across the grid when warps
entered and left (globaltimer, from the first entry).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cake_rmsnorm_det import bench  # noqa: E402
from cake_rmsnorm_det.api import forward_launch  # noqa: E402
import floor  # noqa: E402

WORDS = 8  # phases.cu kWords: globaltimer in, clock at marks 0..4, globaltimer out, SM
# Build settings of phases.cu: name -> -D options.
BUILDS = {"none": ("CAKE_PHASE_NONE",), "marks": (), "stop@squares": ("CAKE_PHASE_STOP=1",),
          "stop@sum": ("CAKE_PHASE_STOP=2",), "stop@rstd": ("CAKE_PHASE_STOP=3",), "stamps": ("CAKE_PHASE_STAMPS",)}
PHASES = ("loads+squares", "row sum", "rsqrt", "stores")  # mark k-1 -> mark k


def knobs(rows: int, hidden: int) -> dict:
    """The launch knobs the package's forward passes for a BF16-weight plain call (api.forward_launch)."""
    k = forward_launch(hidden, "bf16", False, rows, torch.device("cuda"))
    return {"engine": k.engine, "wide": k.wide, "pack": k.pack, "cta_rows": k.cta_rows, "loads": k.loads,
            "program": k.route.program.name}


def build_all(out: Path) -> dict[str, ctypes.CDLL]:
    """Every setting of phases.cu, built at once (one nvcc process each)."""
    procs = {}
    for name, defines in BUILDS.items():
        so = out / f"phases-{name.replace('@', '-')}.so"
        procs[name] = (so, subprocess.Popen(floor.nvcc_command(so, "phases.cu", defines)))
    libs = {}
    for name, (so, p) in procs.items():
        if p.wait() != 0:
            raise RuntimeError(f"phases.cu ({name}): nvcc failed")
        libs[name] = ctypes.CDLL(str(so))
    return libs


def call(lib: ctypes.CDLL, k: dict, x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, rstd: torch.Tensor,
         stamps: torch.Tensor | None = None) -> None:
    """One forward call of a phases.cu build on the default stream; a launch error raises."""
    rows, hidden = x.shape
    rc = lib.phases_forward(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(w.data_ptr()), ctypes.c_void_p(y.data_ptr()),
                            ctypes.c_void_p(rstd.data_ptr()), ctypes.c_int64(rows), ctypes.c_int64(hidden),
                            k["engine"], k["cta_rows"], k["wide"], k["pack"], k["loads"],
                            ctypes.c_void_p(stamps.data_ptr() if stamps is not None else 0))
    if rc != 0:
        raise RuntimeError(f"phases build at [{rows},{hidden}]: launch failed ({rc})")


def pct(v: list[float], q: float) -> float:
    s = sorted(v)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def read_stamps(st: torch.Tensor) -> dict:
    """Per-phase cycles over the warps that reached the last mark, and the grid's entry / exit times."""
    s = st.view(-1, WORDS).cpu().tolist()
    ran = [r for r in s if r[1] != 0]
    done = [r for r in ran if r[5] != 0]
    t0 = min(r[0] for r in ran)
    out = {"warps": len(ran), "live_warps": len(done), "sms": len({r[7] for r in ran})}
    for i, name in enumerate(PHASES):
        d = [r[2 + i] - r[1 + i] for r in done]
        out[name] = {"median": statistics.median(d), "p90": pct(d, 0.9), "max": max(d)}
    life = [r[5] - r[1] for r in done]
    out["warp cycles"] = {"median": statistics.median(life), "p90": pct(life, 0.9), "max": max(life)}
    enter = [(r[0] - t0) / 1e3 for r in ran]
    leave = [(r[6] - t0) / 1e3 for r in done]
    out["enter us"] = {"median": round(statistics.median(enter), 3), "p90": round(pct(enter, 0.9), 3), "max": round(max(enter), 3)}
    out["leave us"] = {"median": round(statistics.median(leave), 3), "p90": round(pct(leave, 0.9), 3), "max": round(max(leave), 3)}
    ns = [r[6] - r[0] for r in done if r[6] - r[0] >= 1000]
    cyc = [r[5] - r[1] for r in done if r[6] - r[0] >= 1000]
    out["GHz"] = round(statistics.median(c / n for c, n in zip(cyc, ns)), 3) if ns else None
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="1x256,1x4096,256x4096,256x6144,1024x1536,1024x4096,16384x256")
    ap.add_argument("--out", default=str(Path(tempfile.mkdtemp(prefix="cake-phases-")) / "phases.json"))
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    libs = build_all(out.parent)
    bench.lift_recompile_limits()
    dev = torch.device("cuda")
    timer = bench.Timer(dev)
    rows_out = []
    for shape in a.shapes.split(","):
        t, h = (int(v) for v in shape.split("x"))
        k = knobs(t, h)
        x = torch.randn(t, h, device=dev).to(torch.bfloat16)
        w = (torch.rand(h, device=dev) + 0.5).to(torch.bfloat16)
        y, rstd, neg = torch.empty_like(x), torch.empty(t, device=dev), torch.empty_like(x)
        stamps = torch.zeros(t * 32 * WORDS, dtype=torch.int64, device=dev)
        peers = bench.contenders("fwd", x, w, torch.randn_like(x), 1e-6, None, True)
        ref_y, ref_r = peers["cake"]()
        us = {"cake": timer(peers["cake"]), "compile": timer(peers["compile"]),
              "neg": timer(lambda: torch.neg(x, out=neg))}
        for name, lib in libs.items():
            st = stamps if name == "stamps" else None
            if not name.startswith("stop"):  # the builds that run to the end keep the package's bits
                y.fill_(0)
                call(lib, k, x, w, y, rstd, st)
                torch.cuda.synchronize()
                if not (torch.equal(y, ref_y) and torch.equal(rstd, ref_r)):
                    raise RuntimeError(f"[{t},{h}]: the {name} build's bits differ from the package's")
            us[name] = timer(lambda lib=lib, st=st: call(lib, k, x, w, y, rstd, st))
        stamps.zero_()
        timer.flush_buf.bitwise_not_()
        call(libs["stamps"], k, x, w, y, rstd, stamps)
        torch.cuda.synchronize()
        st = read_stamps(stamps)
        row = {"shape": f"[{t},{h}]", "knobs": k, "us": {n: round(v, 3) for n, v in us.items()}, "stamps": st}
        rows_out.append(row)
        print(f"{row['shape']:12s} us: " + "  ".join(f"{n} {v:.2f}" for n, v in us.items()), flush=True)
        print(f"{'':12s} cycles (median/p90): " + "  ".join(f"{n} {st[n]['median']}/{st[n]['p90']}" for n in (*PHASES, "warp cycles"))
              + f"  | warps {st['live_warps']}/{st['warps']} on {st['sms']} SMs, enter us {st['enter us']}, leave us {st['leave us']}, {st['GHz']} GHz",
              flush=True)
    out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows_out}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
