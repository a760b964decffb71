"""The backward's dw partition, timed with other chunk sizes (GPU).

    python bench/partition.py [--widths 256,...] [--tokens 4,16,...] [--chunk-rows 1,2,4,8] [--chunks 132,...]
                              [--max-chunks N]
                              [--fused [--tile-clusters 1,2,4,8]] [--pair-class] [--no-single]
                              [--weight bf16|fp32] [--residual] [--engine direct|ring] [--out DIR]

The partition (cake_jit.dw_partition) fixes dw's bits, so a shipped rule cannot be tried by a
knob: this script swaps the rule for "chunks of C rows" in its own process and times backward with
the benchmark's method (CUPTI kernel-active time, cold L2, median of 30), in the pair form, beside
the shipped rule in its route's form (and the single form on the shipped partition, whose dw must
equal the shipped form's). Each rule's dw is run twice and compared bit for bit (a partition is a
rule, not a race). --fused adds the fused form on one-row chunks (column "fused"; its dw
must equal the pair form's on the same chunks): the form's reach past the shipped one-row window;
--tile-clusters adds it with each dw tile over clusters of k CTAs (columns "fused@k"; "fused" is the
launcher's rule). --pair-class adds the pair form on the width's DW_CHUNKS class partition (column
"pair@cls"): what the rows would run without a one-row reach, the other side of a fused edge.
--engine adds each chunk size again with that backward engine forced (columns "C=<rows>@<engine>"):
an engine edge timed with each engine on its own partition. --chunks adds partitions given by their chunk
count N (chunks of ceil(T / N) rows; columns "N=<count>", and "N=<count>@<engine>" with --engine), for one
list across token counts where the rows per chunk would differ at each.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from math import ceil
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cake_rmsnorm_det as crd  # noqa: E402
from cake_rmsnorm_det import bench, cake_jit  # noqa: E402


@contextlib.contextmanager
def chunks_of(rows_per_chunk: int, form: str = "pair"):
    """dw_partition replaced by fixed chunks of `rows_per_chunk` rows (in `form`) for the block."""
    shipped = cake_jit.dw_partition

    def rule(rows: int, hidden: int) -> tuple[int, int]:
        return (rows_per_chunk, ceil(rows / rows_per_chunk)) if rows > 0 else (1, 0)

    cake_jit.dw_partition = rule
    try:
        with crd.force_form(form):
            yield
    finally:
        cake_jit.dw_partition = shipped


def class_chunk_rows(rows: int, hidden: int) -> int:
    """Rows per chunk of the width's DW_CHUNKS class alone (no one-row reach of DW_ONE_ROW_ROWS)."""
    for last, chunks in cake_jit.dw_class_windows(hidden):
        if last is None or rows <= last:
            return ceil(rows / chunks)
    raise AssertionError("DW_CHUNKS ends with an open window")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--widths", default=",".join(map(str, cake_jit.QUALIFIED_WIDTHS)))
    ap.add_argument("--tokens", default="4,16,64,256,512,1024,2048")
    ap.add_argument("--chunk-rows", default="1,2,4,8")
    ap.add_argument("--chunks", default="", help="also partitions of these chunk counts (ceil(T / N) rows a chunk)")
    ap.add_argument("--max-chunks", type=int, default=cake_jit.CHUNK_TARGET,
                    help="skip chunk sizes that make more chunks (default: the most any shipped partition makes, "
                         "cake_jit.CHUNK_TARGET); a skipped size is said, and with it --fused's column")
    ap.add_argument("--fused", action="store_true", help="also the fused form on one-row chunks")
    ap.add_argument("--tile-clusters", default="",
                    help="with --fused: also the fused form with each dw tile over clusters of these CTA counts")
    ap.add_argument("--pair-class", action="store_true",
                    help="also the pair form on the width's DW_CHUNKS class partition (no one-row reach): what "
                         "a row count past the fused window would run")
    ap.add_argument("--no-single", action="store_true", help="skip the single form")
    ap.add_argument("--weight", default="bf16", choices=["bf16", "fp32"], help="the weight's dtype")
    ap.add_argument("--residual", action="store_true", help="the residual rows (a grad_residual added to dx)")
    ap.add_argument("--engine", choices=["direct", "ring"], help="also each chunk size with this engine forced")
    a = ap.parse_args(argv)
    dev = torch.device("cuda")
    timer = bench.Timer(dev)
    torch.manual_seed(0)
    sizes = bench.int_list(a.chunk_rows) if a.chunk_rows else []
    counts = bench.int_list(a.chunks) if a.chunks else []
    clusters = bench.int_list(a.tile_clusters) if a.fused and a.tile_clusters else []
    fused_cols = (["fused"] if a.fused else []) + [f"fused@{k}" for k in clusters] + (["pair@cls"] if a.pair_class else [])
    fused_cols += [f"C={c}@{a.engine}" for c in sizes] if a.engine else []
    fused_cols += [f"N={n}{e}" for n in counts for e in ([""] + ([f"@{a.engine}"] if a.engine else []))]
    rows_out = []
    print(f"{'shape':14s} {'shipped':>16s} {'single':>8s} " + " ".join(f"{'C=' + str(c):>8s}" for c in sizes)
          + "".join(f" {c:>8s}" for c in fused_cols), flush=True)
    for h in bench.int_list(a.widths):
        for t in bench.int_list(a.tokens):
            x = torch.randn(t, h, device=dev).to(torch.bfloat16)
            w = (torch.rand(h, device=dev) + 0.5).to(torch.bfloat16 if a.weight == "bf16" else torch.float32)
            g = torch.randn_like(x)
            gr = torch.randn_like(x) if a.residual else None
            rstd = crd.forward(x, w, 1e-6)[1]
            call = lambda: crd.backward(g, x, w, rstd, gr)  # noqa: E731
            cr, ch = cake_jit.dw_partition(t, h)
            us = {"shipped": timer(call)}
            same = {}
            if a.pair_class:
                with chunks_of(class_chunk_rows(t, h)):
                    us["pair@cls"] = timer(call)
            if ch > 1 and not a.no_single:  # the single form on the shipped partition (its bits are the pair form's)
                shipped_dw = call()[1]
                with crd.force_form("single"):
                    us["single"] = timer(call)
                    same["single"] = bool(torch.equal(call()[1], shipped_dw))
            def chunked(col: str, rows_per_chunk: int):
                """Time the pair form on chunks of `rows_per_chunk` rows (column `col`, and `col`@engine with
                --engine, whose dw must equal it: the engines give the same bits on one partition); its dw."""
                with chunks_of(rows_per_chunk):
                    us[col] = timer(call)
                    dw = call()[1]  # each call writes fresh outputs
                    same[col] = bool(torch.equal(call()[1], dw))
                    if a.engine:
                        with crd.force_engine(a.engine):
                            us[f"{col}@{a.engine}"] = timer(call)
                            same[f"{col}@{a.engine}"] = bool(torch.equal(call()[1], dw))
                return dw

            for c in sizes:
                if c > t:
                    continue
                if ceil(t / c) > a.max_chunks:
                    print(f"[{t},{h}]: C={c} skipped ({ceil(t / c)} chunks > --max-chunks {a.max_chunks})"
                          + (", and with it the fused columns" if a.fused and c == 1 else ""), flush=True)
                    continue
                dw = chunked(f"C={c}", c)
                if a.fused and c == 1:
                    with chunks_of(1, "fused"):
                        us["fused"] = timer(call)
                        same["fused"] = bool(torch.equal(call()[1], dw))
                    for k in clusters:
                        with chunks_of(1, "fused"), crd.force_tile_cluster(k):
                            us[f"fused@{k}"] = timer(call)
                            same[f"fused@{k}"] = bool(torch.equal(call()[1], dw))
            for n in counts:
                if n <= t:
                    chunked(f"N={n}", ceil(t / n))
            rows_out.append({"T": t, "H": h, "weight": a.weight, "residual": a.residual, "shipped_partition": [cr, ch],
                             "us": us, "dw_repeatable": same})
            cells = " ".join(f"{us[k]:8.2f}" if k in us else f"{'-':>8s}"
                             for k in [f"C={c}" for c in sizes] + fused_cols)
            single = f"{us['single']:8.2f}" if "single" in us else f"{'-':>8s}"
            print(f"[{t},{h}]{'':{max(0, 12 - len(str(t)) - len(str(h)))}s} {us['shipped']:7.2f} ({cr}x{ch}) "
                  f"{single} {cells}{'' if all(same.values()) else '  dw NOT repeatable (or fused / single != pair)'}", flush=True)
            del x, g, gr
    Path(a.out).mkdir(parents=True, exist_ok=True)
    name = f"partition{'' if a.weight == 'bf16' else '-fp32'}{'-residual' if a.residual else ''}.json"
    Path(a.out, name).write_text(json.dumps(rows_out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
