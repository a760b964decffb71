"""Build a source tree for ``bench/variants.py --old``: the routed sources with experiment patches (CPU).

    python bench/experiment_tree.py OUT PATCH [PATCH ...]

OUT receives build.json, the program files of csrc/ and csrc/include/, then each patch (a
``git diff`` of csrc/, paths from the repository root; text before the first diff is its
description) applied in order. Each patch is tried first (``patch --dry-run``), so a patch that
does not apply leaves OUT without the half-applied change and the command fails naming it.
variants.py times the tree's programs as ``<key>@<OUT's name>`` beside the routed ones and reports
whether their bits equal the routed programs' (an experiment that keeps the bits must show
"same" on every row).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cake_rmsnorm_det import programs  # noqa: E402


def make_tree(out: Path, patches: list[Path]) -> None:
    """Copy the routed sources into `out` (replacing it) and apply `patches` in order."""
    if shutil.which("patch") is None:
        raise SystemExit("experiment_tree: GNU patch is not on PATH (install it, or build the tree elsewhere "
                         "and carry it)")
    for p in patches:
        if not p.is_file():
            raise SystemExit(f"experiment_tree: no patch file {p}")
        outside = sorted({ln.split()[1] for ln in p.read_text().splitlines()
                          if ln.startswith(("--- a/", "+++ b/")) and not ln.split()[1][2:].startswith("csrc/")})
        if outside:
            raise SystemExit(f"experiment_tree: {p} patches files outside csrc/ ({', '.join(outside)}): "
                             "an experiment tree holds the program sources only")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    root = programs.source_root()
    shutil.copy2(programs.build_json_path(), out / "build.json")
    for prog in programs.programs():
        for f in (prog.kernel, prog.binding):
            shutil.copy2(root / f, out / Path(f).name)
    shutil.copytree(programs.include_dir(), out / "include")
    for p in patches:
        # -p2 strips "a/csrc/": the tree's root is csrc/'s copy.
        args = ["patch", "--batch", "--forward", "--silent", "-p2", "-d", str(out), "-i", str(p.resolve())]
        if subprocess.run(args + ["--dry-run"]).returncode != 0:
            shutil.rmtree(out)
            raise SystemExit(f"experiment_tree: {p} does not apply on top of the ones before it; {out} removed")
        subprocess.run(args, check=True)
        print(f"{out}: applied {p.name}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="the tree to (re)create, e.g. .variants/one_row_dw_first")
    ap.add_argument("patches", type=Path, nargs="+", help="patches of csrc/, applied in order")
    a = ap.parse_args(argv)
    make_tree(a.out, a.patches)
    return 0


if __name__ == "__main__":
    sys.exit(main())
