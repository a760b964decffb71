"""Floors of few-row calls (GPU): micro kernels beside the package and its peers.

    python bench/floor.py [--shapes 1x256,256x6144] [--passes fwd,bwd] [--out floor.json]

The micro kernels (bench/floor_kernels.cu, built here with nvcc and called through ctypes on the
default stream) bound what a forward row costs: an empty launch, a copy of x, the row's math in
FP32 and in FP64 (the package's), the FP64 math with a 160-byte argument struct read across three
constant-cache lines or from one, and torch.compile's looped shape (512 threads a row, x read twice)
without and with its L2 eviction hints. Each contender is timed per kernel position of a call that
runs it on inputs A, then on inputs B: after a 512 MB flush ("cold": B's data is as cold as A's,
its code and launch path warm), and without the flush ("warm": a tiny marker kernel splits the
trace). CUPTI kernel-active time, median of 30 calls (the benchmark's method otherwise).
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

from cake_rmsnorm_det import bench, programs  # noqa: E402

MODES = {"empty": -1, "copy": 0, "f32": 1, "f64": 2, "f64-args3lines": 4, "f64-args1line": 5,
         "loop512": 6, "loop512-hints": 7}


def nvcc_command(so: Path, source: str, defines: tuple[str, ...] = ()) -> list[str]:
    """The nvcc call that builds bench/<source> into the shared library `so` (the package's nvcc
    flags and headers; `defines` as -D options)."""
    return [str(programs.find_nvcc()), "-arch=sm_90a", "-O3", "-shared", "-Xcompiler", "-fPIC",
            *programs.NVCC_FLAGS, *(f"-D{d}" for d in defines), f"-I{programs.include_dir()}", "-o", str(so),
            str(ROOT / "bench" / source)]


def build(out: Path, source: str = "floor_kernels.cu") -> ctypes.CDLL:
    """bench/<source> built into a shared library under out."""
    so = out / (Path(source).stem + ".so")
    subprocess.run(nvcc_command(so, source), check=True)
    return ctypes.CDLL(str(so))


def launch(lib: ctypes.CDLL, mode: int, x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, rstd: torch.Tensor) -> None:
    """One micro kernel on the default stream; a launch error raises."""
    rows, hidden = x.shape
    rc = lib.launch(mode, ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(w.data_ptr()), ctypes.c_void_p(y.data_ptr()),
                    ctypes.c_void_p(rstd.data_ptr()), rows, hidden)
    if rc != 0:
        raise RuntimeError(f"floor kernel mode {mode} at [{rows},{hidden}]: launch failed ({rc})")


def per_position(fn, timer: bench.Timer) -> list[float]:
    """Median duration of each kernel position within a call (the calls' common prefix)."""
    calls = timer.kernel_times(fn)
    k = min(len(c) for c in calls)
    return [round(statistics.median(c[i] for c in calls), 3) for i in range(k)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="1x256,1x4096,256x4096,256x6144", help="TxH,TxH,...")
    ap.add_argument("--passes", default="fwd", help="the package's and its peers' passes to time beside")
    ap.add_argument("--out", default=str(Path(tempfile.mkdtemp(prefix="cake-floor-")) / "floor.json"))
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    lib = build(out.parent)
    dev = torch.device("cuda")
    cold, warm = bench.Timer(dev), bench.Timer(dev, flush_bytes=1024)
    rows = []
    for shape in a.shapes.split(","):
        t, h = (int(v) for v in shape.split("x"))
        sets = []
        for _ in range(2):
            x = torch.randn(t, h, device=dev).to(torch.bfloat16)
            w = (torch.rand(h, device=dev) + 0.5).to(torch.bfloat16)
            sets.append((x, w, torch.randn_like(x), torch.empty_like(x), torch.empty(t, device=dev)))
        calls = {}
        for name, mode in MODES.items():
            calls["fwd " + name] = tuple((lambda m=mode, s=s: launch(lib, m, s[0], s[1], s[3], s[4])) for s in sets)
        for p in a.passes.split(","):
            peers = [bench.contenders(p, s[0], s[1], s[2], 1e-6, None, True) for s in sets]
            for name in ("cake", "compile", "liger", "F.rms_norm"):
                if all(name in c for c in peers):
                    calls[f"{p} {name}"] = (peers[0][name], peers[1][name])
        for name, (fa, fb) in calls.items():
            row = {"shape": f"[{t},{h}]", "who": name,
                   "cold_AB": per_position(lambda: (fa(), fb()), cold), "warm_A": per_position(fa, warm)}
            rows.append(row)
            print(f"{row['shape']:12s} {name:20s} cold A,B: {row['cold_AB']}   warm A: {row['warm_A']}", flush=True)
    out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
