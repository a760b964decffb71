"""Whether a source change moves any kernel's machine code (CPU, nvcc): each program of two trees is
compiled to a cubin and the kernels' `.text` sections (their SASS bytes) are compared one by one.

    python bench/sass_identity.py OLD [--new DIR] [--keys bwd_h256,bwd_h4096] [--arch sm_90a]
        [--rename 'Lb([01])ELi1EEEv=Lb\\1EEEv']

OLD / --new: a tree of bench/experiment_tree.py (build.json, the program files, include/) or the
repository root (csrc/); --new defaults to the repository. Programs are matched by key, kernels by
their mangled names; --rename REGEX=REPLACEMENT rewrites the new tree's names first (a template
argument added with a default value renames every kernel it leaves alone). A kernel whose bytes
match ran the same code in every GPU run of the old tree, so a refactor that reports no "differ"
and no "gone" needs no new timing. Exits 1 if a kernel differs or is gone.
"""

from __future__ import annotations

import argparse
import json
import re
import struct
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cake_rmsnorm_det.programs import find_nvcc  # noqa: E402


def text_sections(cubin: bytes) -> dict[str, bytes]:
    """The `.text.<kernel>` sections of an ELF64 cubin, by kernel name."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("not an ELF64 file")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    out = {}
    for name_off, _, _, _, offset, size, *_ in headers:
        start = names_at + name_off
        name = cubin[start:cubin.index(b"\0", start)].decode()
        if name.startswith(".text."):
            out[name[len(".text."):]] = cubin[offset:offset + size]
    return out


def tree_programs(tree: Path) -> tuple[Path, dict[str, tuple[Path, list[str]]]]:
    """(include dir, {program key: (kernel file, its build.json nvcc flags)}) of a repository or an
    experiment tree (whose program files sit at its top, beside include/)."""
    include = tree / "csrc" / "include" if (tree / "csrc" / "include").is_dir() else tree / "include"
    progs = {}
    for p in json.loads((tree / "build.json").read_text())["programs"]:
        kernel = tree / p["kernel"] if (tree / p["kernel"]).is_file() else tree / Path(p["kernel"]).name
        progs[p["key"]] = (kernel, p["nvcc_flags"])
    return include, progs


def compile_cubin(kernel: Path, flags: list[str], include: Path, arch: str, out: Path) -> bytes:
    """The program's kernel file compiled to a cubin with its build flags."""
    import tvm_ffi
    cmd = [str(find_nvcc()), "-std=c++17", f"-arch={arch}", "-cubin", "-O3", *flags, f"-I{include}",
           f"-I{Path(tvm_ffi.__file__).parent / 'include'}", str(kernel), "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"sass_identity: {kernel} did not compile:\n{r.stderr[-2000:]}")
    return out.read_bytes()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("--new", type=Path, default=ROOT)
    ap.add_argument("--keys", default="", help="program keys to compare, ','-separated (default: every common key)")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--rename", action="append", default=[], help="REGEX=REPLACEMENT for the new tree's kernel names")
    args = ap.parse_args(argv)
    renames = [tuple(r.split("=", 1)) for r in args.rename]
    old_inc, old_k = tree_programs(args.old)
    new_inc, new_k = tree_programs(args.new)
    keys = [k for k in (args.keys.split(",") if args.keys else sorted(old_k)) if k in old_k and k in new_k]
    if not keys:
        raise SystemExit("sass_identity: no program key in both trees")
    bad = 0
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=8) as pool:
        jobs = {(key, side): pool.submit(compile_cubin, *ks[key], inc, args.arch, Path(tmp) / f"{key}.{side}.cubin")
                for key in keys for side, ks, inc in (("old", old_k, old_inc), ("new", new_k, new_inc))}
        for key in keys:
            old = text_sections(jobs[key, "old"].result())
            new = {}
            for name, code in text_sections(jobs[key, "new"].result()).items():
                for pattern, repl in renames:
                    name = re.sub(pattern, repl, name)
                new[name] = code
            same = sum(1 for n in old if new.get(n) == old[n])
            differ = sorted(n for n in old if n in new and new[n] != old[n])
            gone = sorted(set(old) - set(new))
            print(f"{key}: {same} same, {len(differ)} differ, {len(gone)} gone, {len(set(new) - set(old))} new")
            for n in differ:
                print(f"  differ {n}")
            for n in gone:
                print(f"  gone   {n}")
            bad += len(differ) + len(gone)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
