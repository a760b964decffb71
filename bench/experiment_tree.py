"""Build a source tree for ``bench/variants.py --old``: the routed sources with experiment patches (CPU).

    python bench/experiment_tree.py OUT PATCH [PATCH ...]
    python bench/experiment_tree.py OUT --rev REV [PATCH ...]

OUT receives build.json, the program files of csrc/ and csrc/include/ (the working tree's, or
commit REV's with --rev: the programs before a change, to time the change against), then each patch (a
``git diff`` of csrc/, paths from the repository root; text before the first diff is its
description) applied in order. Each patch is tried first (``patch --dry-run``), so a patch that
does not apply leaves OUT without the half-applied change and the command fails naming it.
variants.py times the tree's programs as ``<key>@<OUT's name>`` beside the routed ones and reports
whether their bits equal the routed programs' (an experiment that keeps the bits must show
"same" on every row).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cake_rmsnorm_det import programs  # noqa: E402


def _copy_sources(out: Path, root: Path) -> None:
    """build.json, its programs' files and csrc/include/ of the checkout at `root` into `out`."""
    shutil.copy2(root / "build.json", out / "build.json")
    for prog in json.loads((root / "build.json").read_text())["programs"]:
        for f in (prog["kernel"], prog["binding"]):
            shutil.copy2(root / f, out / Path(f).name)
    shutil.copytree(root / "csrc" / "include", out / "include")


def make_tree(out: Path, patches: list[Path], rev: str | None = None) -> None:
    """Copy the routed sources (commit `rev`'s, if given) into `out` (replacing it) and apply
    `patches` in order."""
    if patches and shutil.which("patch") is None:
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
    root = programs.source_root()
    with tempfile.TemporaryDirectory() as tmp:
        if rev is not None:  # the commit's build.json and csrc/, read from git without a checkout
            archive = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", rev, "build.json", "csrc"],
                                     capture_output=True)
            if archive.returncode != 0:
                raise SystemExit(f"experiment_tree: git archive of {rev} failed: "
                                 f"{archive.stderr.decode(errors='replace').strip()}")
            subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        _copy_sources(out, Path(tmp) if rev is not None else root)
    if rev is not None:
        print(f"{out}: the programs of {rev}")
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
    ap.add_argument("patches", type=Path, nargs="*", help="patches of csrc/, applied in order")
    ap.add_argument("--rev", help="start from this commit's programs instead of the working tree's")
    a = ap.parse_args(argv)
    if not a.patches and a.rev is None:
        ap.error("name a patch, or --rev (a commit's programs), or both")
    make_tree(a.out, a.patches, a.rev)
    return 0


if __name__ == "__main__":
    sys.exit(main())
