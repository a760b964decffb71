"""Ahead-of-time builds of every program, for wheels and for machines that must never compile.

    python -m cake_rmsnorm_det.aot --arch sm_90a [--arch sm_100a ...] --out DIR [-j N] [--only KEY ...]

Writes DIR/<arch>/<program>.so (+ .sha256). The runtime looks in the package's ``_aot/`` folder
and in $CAKE_RMSNORM_DET_AOT_DIR before its cache: a wheel bundles a build by copying DIR to
``cake_rmsnorm_det/_aot/`` before packaging (docs/packaging.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Optional, TextIO

from .programs import SUPPORTED_ARCHS, Program, build_program, program_by_key, programs


def _build_one(key: str, arch: str, out: str) -> tuple[str, str, float, str]:
    t0 = time.perf_counter()
    prog = program_by_key(key)
    try:
        lib = build_program(prog, arch, Path(out) / arch)
        return key, arch, time.perf_counter() - t0, str(lib)
    except Exception as e:  # reported in the summary, not raised mid-pool
        return key, arch, time.perf_counter() - t0, f"FAILED: {e}"


def build_all(archs: list[str], out: Path, jobs: int = 0, only: Optional[list[str]] = None,
              log: TextIO = sys.stdout) -> list[tuple[str, str, float, str]]:
    """Build the programs of build.json (or `only` those keys) for each arch into `out`, `jobs` at
    once (0: a CPU each), a line on `log` as each ends; one (key, arch, seconds, library or
    "FAILED: why") a build. A failed build is reported, not raised."""
    todo: list[tuple[Program, str]] = []
    for arch in archs:
        if arch not in SUPPORTED_ARCHS:
            raise ValueError(f"arch {arch!r} is not supported; supported: {', '.join(SUPPORTED_ARCHS)}")
        for p in programs():
            if (only is None or p.key in only) and arch in p.archs:
                todo.append((p, arch))
    jobs = jobs or max(1, os.cpu_count() or 1)
    results = []
    t0 = time.perf_counter()
    print(f"AOT: {len(todo)} builds ({len(archs)} arch(s)) with {jobs} jobs into {out}", file=log, flush=True)
    # One process per build: the arch reaches the compiler through the environment.
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futs = [pool.submit(_build_one, p.key, arch, str(out)) for p, arch in todo]
        for i, f in enumerate(as_completed(futs), 1):
            key, arch, dt, what = f.result()
            status = "FAILED" if what.startswith("FAILED") else "ok"
            print(f"[{i:3d}/{len(todo)}] {arch:8s} {key:14s} {status:6s} {dt:6.1f}s", file=log, flush=True)
            if status == "FAILED":
                print(what, file=log, flush=True)
            results.append((key, arch, dt, what))
    failed = [r for r in results if r[3].startswith("FAILED")]
    print(f"AOT summary: {len(results) - len(failed)} built, {len(failed)} failed, "
          f"{time.perf_counter() - t0:.1f}s wall", file=log, flush=True)
    return results


def _main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cake_rmsnorm_det.aot", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", action="append", required=True, choices=sorted(SUPPORTED_ARCHS))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("-j", "--jobs", type=int, default=0, help="parallel builds (default: CPU count)")
    ap.add_argument("--only", action="append", help="build only this program key (repeatable)")
    a = ap.parse_args(argv)
    res = build_all(a.arch, a.out, a.jobs, a.only)
    return 1 if any(r[3].startswith("FAILED") for r in res) else 0


if __name__ == "__main__":
    raise SystemExit(_main())
