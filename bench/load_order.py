"""Which kernels wait on a load's data before their other loads go out (CPU: nvcc and cuobjdump).

    python bench/load_order.py [--tree DIR] [--keys bwd_h256,...] [--kernels REGEX] [--all]

A call of a few rows is one chain of DRAM round trips, and its length is how many of them follow
one another. Where ptxas puts a use of one load's data (a BF16 weight's unpacking, say) before
another global load is issued, the warp waits out the first round trip before the second starts:
two in a row where one would do. This scan reads each kernel's sm_90a SASS from its start to its
first shuffle or barrier (the prologue that a few-row call runs once) and reports every global load
issued after the first instruction that reads an earlier global load's destination registers.
Loops (the engines' next-row prefetch) are past the scope: a prefetch there is meant to follow a
use, so only prologue loads count, and kernels whose first use lies past --max-first-use
instructions (a loop's body) are left out unless --all.
Found this way (round 45): every BF16-weight backward_row_kernel / backward_fused_kernel at the
tuned widths issued rstd's load (and g_residual's) after the weight's first unpacking, which cost
the one-row backward 0.1-0.2 us against the FP32-weight kernel (bench/placement.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from sass_identity import compile_cubin, tree_programs  # noqa: E402

LOAD = re.compile(r"^(@!?U?P\w+\s+)?(LDG\S*)\s+(R\d+),")
STOP = re.compile(r"\b(SHFL|BAR|WARPSYNC)\b")


def load_regs(op: str, dst: str) -> set[str]:
    """The registers a global load writes: one, two or four from its first."""
    n = 4 if ".128" in op else 2 if ".64" in op else 1
    base = int(dst[1:])
    return {f"R{base + i}" for i in range(n)}


def late_loads(body: list[str]) -> tuple[int | None, list[str]]:
    """(index of the first use of a global load's data, the global loads issued after it), over
    the instructions before the first shuffle or barrier."""
    loaded: set[str] = set()
    first_use = None
    late = []
    for i, ins in enumerate(body):
        if STOP.search(ins):
            break
        operands = ins.split(",", 1)[1] if "," in ins else ""
        m = LOAD.match(ins)
        if m:
            operands = ins[ins.index("[") :]  # a load reads only its address
        if first_use is None and set(re.findall(r"\bR\d+\b", operands)) & loaded:
            first_use = i
        if m:
            if first_use is not None:
                late.append(ins)
            loaded |= load_regs(m.group(2), m.group(3))
    return first_use, late


def kernels(cubin: Path, cuobjdump: str) -> dict[str, list[str]]:
    """{demangled kernel name: its SASS instructions in order} of a cubin (or a built program's
    library, whose fatbin cuobjdump reads alike)."""
    sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    parts = re.split(r"\n\s*Function : ", sass)[1:]
    mangled = [part.split("\n", 1)[0].strip() for part in parts]
    names = subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True, text=True).stdout.split("\n")
    return {name or m: [re.sub(r"^\s*/\*[0-9a-f]{4}\*/\s*", "", line).split(" ;")[0].strip()
                        for line in part.split("\n") if re.search(r"/\*[0-9a-f]{4}\*/", line)]
            for m, name, part in zip(mangled, names, parts)}


def scan(binary: Path, cuobjdump: str, max_first_use: int | None = 100) -> list[tuple[str, int | None, list[str]]]:
    """(kernel name, index of its first use of loaded data, the loads issued after it) for each
    kernel of a cubin or library; kernels whose first use lies past max_first_use (a loop's body)
    or that have none are left out unless max_first_use is None."""
    out = []
    for name, body in kernels(binary, cuobjdump).items():
        first_use, late = late_loads(body)
        if max_first_use is None or (first_use is not None and first_use <= max_first_use):
            out.append((name, first_use, late))
    return out


def find_cuobjdump() -> str | None:
    """cuobjdump on PATH, else the one of pip's nvidia-cuda-cuobjdump (the test extra's)."""
    found = shutil.which("cuobjdump")
    spec = None if found else importlib.util.find_spec("nvidia")
    for root in spec.submodule_search_locations if spec else []:  # nvidia/cu<major>/bin/cuobjdump
        found = found or next((str(c) for c in sorted(Path(root).glob("cu*/bin/cuobjdump"))), None)
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=Path, default=ROOT, help="a repository or experiment tree")
    ap.add_argument("--keys", default="", help="program keys, ','-separated (default: every one)")
    ap.add_argument("--kernels", default="", help="a regex the kernel's name must match")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--max-first-use", type=int, default=100,
                    help="leave out kernels whose first use comes later (a loop's body), unless --all")
    ap.add_argument("--all", action="store_true", help="every kernel, clean ones and loops too")
    ap.add_argument("--cuobjdump", default=find_cuobjdump() or "",
                    help="cuobjdump (the CUDA toolkit's, or pip's nvidia-cuda-cuobjdump)")
    a = ap.parse_args(argv)
    if not a.cuobjdump or not Path(a.cuobjdump).exists():
        raise SystemExit("load_order: no cuobjdump: pass --cuobjdump PATH (pip download nvidia-cuda-cuobjdump has one)")
    include, progs = tree_programs(a.tree)
    keys = a.keys.split(",") if a.keys else sorted(progs)
    unknown = [k for k in keys if k not in progs]
    if unknown:
        raise SystemExit(f"load_order: no program {unknown} in {a.tree}; known: {sorted(progs)}")
    flagged = 0
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=8) as pool:
        cubins = {k: pool.submit(compile_cubin, *progs[k], include, a.arch, Path(tmp) / f"{k}.cubin") for k in keys}
        for key in keys:
            cubins[key].result()
            for name, first_use, late in scan(Path(tmp) / f"{key}.cubin", a.cuobjdump,
                                              None if a.all else a.max_first_use):
                if (a.kernels and not re.search(a.kernels, name)) or (not a.all and not late):
                    continue
                flagged += bool(late)
                print(f"{'LATE' if late else 'ok  '} {key}: {name}  first use @{first_use}"
                      + "".join(f"\n       after it: {ins}" for ins in late))
    print(f"load_order: {flagged} kernel(s) with a load after the first use of loaded data")
    return 0


if __name__ == "__main__":
    sys.exit(main())
