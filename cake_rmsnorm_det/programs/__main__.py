"""The programs' command line: ``python -m cake_rmsnorm_det.programs verify | rehash | list |
register`` (see the package's docstring). A module of its own: the package imports the programs'
registry, so a command line inside it would run a second copy of the registry's module."""

from __future__ import annotations

import argparse
from pathlib import Path

from cake_rmsnorm_det.programs import __doc__ as _DOC
from cake_rmsnorm_det.programs import problems, programs, register, rehash


def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cake_rmsnorm_det.programs", description=_DOC,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("verify", help="check names, hashes and build.json agree")
    sub.add_parser("rehash", help="rename programs whose content changed")
    sub.add_parser("list", help="list the programs")
    r = sub.add_parser("register", help="name a new program from its content and record it")
    r.add_argument("--key", required=True)
    r.add_argument("--pass", dest="pass_", required=True, choices=["fwd", "bwd"])
    r.add_argument("--hidden", type=int, default=None)
    r.add_argument("kernel", type=Path)
    r.add_argument("binding", type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "verify":
        bad = problems()
        for b in bad:
            print("MISMATCH", b)
        print(f"{len(programs())} programs, {len(bad)} problems")
        return 1 if bad else 0
    if a.cmd == "rehash":
        for key, old, new in rehash():
            print(f"{key}: {old} -> {new}")
        return 0
    if a.cmd == "list":
        for p in programs():
            print(f"{p.key:14s} {p.name}  {p.kernel}")
        return 0
    p = register(a.key, a.pass_, a.hidden, a.kernel, a.binding)
    print(f"registered {p.key} as {p.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
