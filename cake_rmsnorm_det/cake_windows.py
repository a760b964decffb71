"""Measured window edges of the routes, each with the evidence it rests on.

Edges are row counts: a window ``(lo, hi]`` of rows runs one program in one form with one
engine. Backward has three forms per width: ``fused`` (one-row chunks only: one launch of row
CTAs for dx beside column-tile CTAs that sum dw from the inputs), ``single`` (chunked partials,
the last CTA to arrive reduces) and ``pair`` (chunked partials, a separate reduce kernel). All
three give the same bits for the same partition (``cake_jit.dw_partition``, a function of rows
and H alone), so their edges only move time: the fused edge (at most where the partition stops
being one-row chunks) and the single/pair edge are tuned per arch and width; each edge's evidence
says who measured it and how, or that nobody has. The engine edge (ENGINE_EDGES) splits a width's token range between the two engines of
its program: backward ``direct`` (rows a row ahead in registers) below, ``ring`` (bulk copies into
a shared-memory ring) above; forward ``regs`` (weights in registers) below, ``l1`` (weights
re-read from L1) above. Engines compute the same bits; the edge only moves time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable


@dataclass(frozen=True)
class Evidence:
    """What put an edge where it is."""

    measured: bool
    note: str
    gpu: str = ""
    sms: int = 0
    date: str = ""
    below: str = ""     # program + form timed just below the edge
    above: str = ""     # program + form timed just above the edge
    ratio: str = ""     # e.g. "single/pair = 0.93 at 128 rows, 1.07 at 256 rows"

    def line(self) -> str:
        """One line for explain_route: where and what was measured, or why nothing was."""
        if not self.measured:
            return f"unmeasured: {self.note}"
        return (f"measured on {self.gpu} ({self.sms} SMs) {self.date}: {self.below} | {self.above}; "
                f"{self.ratio}. {self.note}")


def unmeasured(note: str) -> Evidence:
    """Evidence of a rule, not a measurement (what the note says)."""
    return Evidence(measured=False, note=note)


# The single/pair edge: the single form's last CTA sweeps the chunks x H FP64 partials alone,
# 512 columns at a time, paying one L2 round trip per chunk (the compensated sums run in chunk
# order); the pair form's reduce kernel spreads the same sums over H/32 CTAs. So the single form
# only pays while chunks x ceil(H/512) round trips stay few: SINGLE_FORM_ROUND_TRIPS. cake_jit
# derives the row count from the dw partition. Measured edges go in MEASURED_SINGLE_PAIR_EDGES.
#
# What the rule rests on (H200, 132 SMs, 2026-12-02, bench --quick, two runs of one build
# family): [256 rows, H 256] backward, 64 chunks of 4 rows (64 round trips), took 22.8 us in the
# single form and 6.8 us in the pair form (bwd_h256). The edge rows themselves are not measured.
SINGLE_FORM_ROUND_TRIPS = 8

QUALIFIED_WIDTHS = (256, 512, 1536, 2048, 4096, 5120, 6144)
H200 = "NVIDIA H200"
H100 = "NVIDIA H100 80GB HBM3"  # where an H200 could not be had; each such edge says so

# The fused form's edge. Its tile CTAs walk every row of their columns (dw_block_len(T) rows per
# warp), so it pays while rows are few; the rule, where nothing is measured, keeps it to 160 rows:
# with 64-column tiles it beat the pair form there at every width measured, the seven qualified
# widths (docs/bench/2026-12-03-h200-r16-fused-edges.json) and the generic widths 1000, 3072, 8192,
# 16384 (bench/partition.py --fused, -r16-fused-generic.json): [128,3072] 9.09 us against 13.23
# (the pair form on the old partition's two-row chunks), [160,3072] 11.06 against 14.00 (two-row
# chunks) / 16.50 (DW_CHUNKS' three-row chunks), [128,8192] 11.71 against 22.62, [160,16384] 24.32
# against 36.02, [160,1000] 8.26 against 9.76. Nothing past 160 rows was timed at generic widths.
FUSED_RULE_ROWS = 160


def fused_rule_evidence(arch: str) -> Evidence:
    """Why the fused form takes one-row chunks up to FUSED_RULE_ROWS rows where no edge was measured."""
    if arch == "sm_90a":
        return unmeasured(f"rule: the fused form up to {FUSED_RULE_ROWS} rows of one-row chunks (it won there at "
                          "every width measured: the qualified ones and H 1000 / 3072 / 8192 / 16384)")
    return unmeasured(f"Blackwell build: compiled, never measured; the rule of {FUSED_RULE_ROWS} rows")


def _combine(hidden: int, at: int, ratio: str) -> tuple[int, Evidence]:
    """An edge re-measured on the H200 after the pair form's combine got cheaper (dw_reduce.cuh:
    8/16/32-column tiles, level-1 blocks of at least 8 multi-row chunks), against the pair form on
    the width's DW_CHUNKS class partition."""
    return at, Evidence(
        measured=True, gpu=H200, sms=132, date="2026-12-06", below=f"bwd_h{hidden} fused (split tiles)",
        above=f"bwd_h{hidden} pair (DW_CHUNKS)", ratio=ratio,
        note="bench/partition.py --fused --pair-class --chunk-rows 1 at T = 384 .. 1024 (CUPTI kernel-active, cold "
             "L2, median of 30; fused and pair bits equal on one-row chunks; docs/bench/2026-12-06-h200-r29-fused-edges.json, "
             "and an H100 of 132 SMs at 320 .. 768, -h100-r29-fused-edges.json); the one-row reach (DW_ONE_ROW_ROWS) "
             "ends at the edge, between the two measured row counts; a tie on the H200 (within 2%) takes the "
             "H100's ranking (one partition serves every device), a tie on both the pair form")


# (arch, H) -> (last row count of the fused form, evidence). First measured with bench/engines.py
# --forms at T = 1 .. 264 (docs/bench/2026-12-03-h200-r13-forms.json): the fused form won at every
# row count of one-row chunks at H >= 1536 (1.9-2.6x at T <= 16). Re-measured with the fused
# kernel of one work item per CTA (backward_fused.cuh), which moved every edge out: bench/partition.py
# --fused at T = 128 .. 1024 (docs/bench/2026-12-03-h200-r19-fused-reach.json), and with each dw tile
# split over a cluster of CTAs at H <= 2048 (-r21-tile-clusters.json), which moved those out again.
# Re-measured once the combine got cheaper, first on an H100 (-r28-fused-edges.json: the pair form
# gained 0.3-1.0 us at 448-896 rows and the edges of H 256, 512, 1536, 2048 and 5120 moved in),
# then on the H200 (-r29-fused-edges.json, the evidence below), where the pair form gained more:
# pair/fused below 0.98 one row count earlier at H 512 (0.975 at 768) and 6144 (0.956 at 576), so
# their edges moved to 640 and 512; ties at [384,1536], [640,4096], [512,5120] and [512,6144], where
# the H100 (its run of the same round, -h100-r29-fused-edges.json) puts the fused form 3-7% ahead.
# H -> (last row count of the fused form, pair/fused about it on the H200, the same on the H100);
# H 4096's and H 5120's edges, re-measured in rounds 40 and 42, follow. MEASURED_FUSED_EDGES is the one source of both
# the sm_90a edges and the partition's one-row reach (DW_ONE_ROW_ROWS).
_FUSED_EDGE_RUNS: dict[int, tuple[int, str, str]] = {
    256: (768, "1.064 at T=768 (6.91 vs 6.49 us), 0.948 at T=896 (6.94 vs 7.33)", "(round 28) 1.040 / 0.940"),
    512: (640, "1.040 at T=640 (6.62 vs 6.37 us), 0.975 at T=768 (6.80 vs 6.98)", "1.057 / 1.013"),
    1536: (384, "1.019 at T=384 (7.60 vs 7.46 us, a tie), 0.943 at T=448 (7.47 vs 7.92)",
           "1.029 / 0.961, 1.18-1.19 at 320 / 352"),
    2048: (768, "1.060 at T=768 (9.95 vs 9.39 us), 0.991 at T=896 (10.45 vs 10.54, a tie)", "(round 28) 1.071 / 1.009"),
    6144: (512, "1.063 at T=448 (14.91 vs 14.03 us), 0.992 at T=512 (15.76 vs 15.89, a tie), 0.956 at T=576 "
                "(16.74 vs 17.50)", "1.132 / 1.074 / 1.023"),
}


def _h100_fused_edge(hidden: int, at: int, *, rows: str, span: str, rnd: str, ratio: str, win: str, h200_gain: str,
                     step: str) -> tuple[int, Evidence]:
    """A fused edge re-measured on an H100 (no H200 could be had) after the fused form's row CTAs
    changed (`rows`), on every kind of row, against the pair form on its DW_CHUNKS partition: timed
    at T = `span` in round `rnd`, `ratio` the pair/fused times, `win` how the edge's row count won,
    `h200_gain` how much more the pair form gained on the H200 in round 29, `step` the
    bench/pending.sh step that re-times it there."""
    return at, Evidence(
        measured=True, gpu=H100, sms=132, date="2026-12-07", below=f"bwd_h{hidden} fused ({rows})",
        above=f"bwd_h{hidden} pair (DW_CHUNKS)", ratio=ratio,
        note=f"bench/partition.py --fused --pair-class --chunk-rows 1 at T = {span} (CUPTI kernel-active, cold L2, "
             f"median of 30; fused and pair bits equal on one-row chunks; docs/bench/2026-12-07-h100-{rnd}-fused-edge-"
             f"h{hidden}-bf16.json); the last row count where the fused form won on every kind of row{win}. On the "
             f"H200 the pair form gained {h200_gain} more against the fused one at this width in round 29: to re-time "
             f"there (bench/pending.sh {step})")


# H 4096's edge once its fused row CTAs hold two rows from 384 rows (layout.cuh fused_rows_per_cta,
# 5-10% off the fused form at 448-640 rows), re-measured on an H100 (no H200 could be had; the
# H200's run of the same command is pending: bench/pending.sh edge4096): bench/partition.py --fused
# --pair-class --chunk-rows 1 --max-chunks 4096 at T = 640 .. 1280, BF16 and FP32 weight and the
# residual (docs/bench/2026-12-07-h100-r40-fused-edge-h4096-{bf16,fp32,residual}.json). Before it
# (round 29, one-row CTAs) the edge was 640: pair/fused = 0.981 at 640 and 0.932 at 768 on the
# H200, 1.034 / 0.973 on the H100.
_FUSED_EDGE_H4096 = _h100_fused_edge(
    4096, 896, rows="two-row row CTAs", span="640 .. 1280", rnd="r40",
    ratio="pair/fused = 1.097 at T=768 (16.10 vs 14.67 us), 1.045 at T=896 (17.33 vs 16.58), 0.993 at T=1024 (18.18 vs "
    "18.30, a tie), 0.895 at T=1280; FP32 weight 1.092 / 1.051 / 0.976, residual 1.135 / 1.094 / 1.088 / 0.969",
    win="", h200_gain="~5%", step="edge4096")

# H 5120's edge once its fused row CTAs hold two rows from 320 rows without the residual (layout.cuh
# fused_group_rows, 3-10% off the fused form at 320-512 rows on an H100), re-measured on an H100 (no
# H200 could be had; bench/pending.sh groups times it again there): bench/partition.py --fused
# --pair-class --chunk-rows 1 --max-chunks 4096 at T = 512 .. 896, BF16 and FP32 weight and the
# residual (docs/bench/2026-12-07-h100-r42-fused-edge-h5120-*.json). Before it (round 29, one-row
# CTAs) the edge was 512: pair/fused = 1.011 at 512 (a tie) and 0.955 at 576 on the H200, 1.065 /
# 0.998 on the H100. The residual rows keep one row a group (two lost up to 5% there in round 40).
_FUSED_EDGE_H5120 = _h100_fused_edge(
    5120, 640, rows="two-row row groups", span="512 .. 896", rnd="r42",
    ratio="pair/fused = 1.093 at T=576 (16.67 vs 15.25 us), 1.024 at T=640 (17.07 vs 16.67), 1.026 at T=704 (18.35 vs "
    "17.89), 0.984 at T=736 (18.24 vs 18.54); FP32 weight 1.113 / 1.041 / 1.044 / 0.993, residual 1.021 / 1.019 / "
    "1.004 (a tie) / 0.950 at T=768",
    win=" by more than a tie (the residual rows tie at 704)", h200_gain="~4.5%", step="groups")

MEASURED_FUSED_EDGES: dict[tuple[str, int], tuple[int, Evidence]] = {
    **{("sm_90a", h): _combine(h, at, f"pair/fused = {h200}; on the H100 {h100}")
       for h, (at, h200, h100) in _FUSED_EDGE_RUNS.items()},
    ("sm_90a", 4096): _FUSED_EDGE_H4096,
    ("sm_90a", 5120): _FUSED_EDGE_H5120,
}

# The dw partition's chunk counts (cake_jit.dw_partition): (last row count, chunks) windows, the
# last open. The partition fixes dw's bits, so these are part of the bit contract: a function of
# (rows, H) only, whatever the device. Measured on the H200 (132 SMs, 2026-12-03) with
# bench/partition.py: every qualified width at T = 2 .. 4096, chunks of 1, 2, 4, 8, 16, 32 rows
# against the previous rule (chunks of >= 4 rows, about 264 of them), BF16 weight, pair form
# (docs/bench/2026-12-03-h200-partition.json). What it showed:
# - up to 64 rows, one row per chunk wins at every width: [16,4096] 8.21 -> 6.27 us,
#   [16,6144] 10.40 -> 7.73, [16,512] 6.11 -> 4.10, [64,4096] 8.83 -> 7.71;
# - widths whose CTA holds >= 4 rows (H <= 1024: "narrow") keep one-row chunks up to 264 rows
#   ([256,256] 6.03 -> 5.54, [256,512] 6.50 -> 6.05);
# - wider rows want about 64 chunks up to 256 rows and 128 up to 1024 (H >= 5120: up to 4096),
#   where 192-264 chunks put two CTAs on some SMs: [1024,4096] 18.03 (256 chunks) -> 17.02 (128),
#   [1024,6144] 28.58 -> 24.22, [768,5120] 25.78 (192) -> 20.06 (96), [4096,6144] 60.64 (256)
#   -> 56.35 (128), [4096,4096] 38.19 (256) against 41.74 (128): H 4096 goes back to 264 above 1024.
# Above the last edge the old rule's 264 chunks (bandwidth: a chunk's partial costs 8/(6*rows)
# of its rows' bytes) stand: nothing past T = 4096 was timed with other counts.
# Re-measured at 1024-4096 rows once the combine got cheaper (dw_reduce.cuh's narrow tiles and
# blocks of at least 8 chunks; an H100 of 132 SMs, 2026-12-05, chunks of 4 / 8 / 16 / 32 rows,
# docs/bench/2026-12-05-h100-r28-partition.json): narrow widths want far fewer than 264 chunks
# ([1024,512] 8.67 us on 256 chunks -> 7.55 on 64 (7.30 on 128), [896,512] 8.45 on 224 -> 7.39 on
# 64, [2048,512] 9.86 -> 8.64 on 128, [4096,512] 11.44 -> 11.02 on 128; rows of one warp, "warp"
# below: [2048,256] 9.73 -> 7.55 on 64 (7.30 on 128), [4096,256] 9.65 -> 8.64 on 128), and mid
# widths 128 chunks up to 2048 rows ([2048,1536] 14.37 ->
# 14.08, [2048,2048] 17.74 -> 16.51, [2048,4096] 30.03 -> 27.63; at 4096 rows 256 chunks still win:
# [4096,1536] 20.85 against 23.39 on 128, [4096,4096] 47.12 against 50.72).
# Re-timed on the H200 (2026-12-06, same chunk sizes, docs/bench/2026-12-06-h200-r29-partition.json):
# the H100's ranking held but at two row counts where both GPUs put 128 chunks ahead of the shipped
# 64: [2048,256] 7.20 -> 6.80 us (H100 7.55 -> 7.30), [1024,512] 7.07 -> 6.91 (H100 7.55 -> 7.30);
# so "warp" takes 128 chunks (of 16 rows) from 2048 rows and "narrow" 128 (of 8) from 1024. The rest
# held within 1.3% ([2048,1536] 12.77 shipped against 12.62 on 256 chunks, [1024,2048] 10.77 / 10.70).
DW_CHUNK_TARGET = 264
# The ring engine's windows (H 1536, 5120, 6144 past their engine edges, ENGINE_EDGES): one chunk
# per ring CTA of a 132-SM device (the ring runs one CTA an SM at those widths), where 264 chunks
# gave each CTA two chunks in turn. Every ring row count timed on the H200 gained (2026-12-06,
# bench/partition.py, docs/bench/2026-12-06-h200-r33-partition-ring.json; 264 chunks -> 132):
# [65536,1536] 160.70 -> 156.75 us, [65536,5120] 524.86 -> 507.26, [65536,6144] 628.94 -> 614.37,
# [32768,*] 0.963-0.980, [16384,5120] 145.42 -> 138.83, [8192,5120] 81.52 -> 76.30, [8192,6144]
# 96.59 -> 90.35. The direct engine runs two CTAs an SM and loses with 132 (1.11-1.27x slower at
# [65536,256-4096] and [16384,256-4096]), so its windows keep their counts. A constant, not the
# device's SM count: the partition fixes dw's bits on every device.
DW_RING_CHUNKS = 132
# The backward CTA of two 512-thread rows (H 4096, layout.cuh bwd_rows_per_cta: one CTA an SM) takes
# one chunk a resident CTA too where its class had DW_CHUNK_TARGET (from 2049 rows): half the FP64
# partials to write and reduce. Measured on an H100 (2026-12-07, bench/variants.py --old-only: the
# shipped programs beside the previous tree, one-row CTAs on 264 chunks, --old-chunks 264; BF16 /
# FP32 weight / residual, shipped / previous; docs/bench/2026-12-07-h100-r39-h4096-vs-head-*.json):
# [2049,4096] 0.892 / 0.889 / 0.931, [3072,4096] 0.927 / 0.924 / 0.939, [4096,4096] 0.944 / 0.944 /
# 0.974, [8192,4096] 0.983 / 0.985 / 0.996, 16384 and 65536 rows 0.998-1.004. Below, on the class's
# 128 chunks, the two-row CTAs tie at 1536-2048 rows (0.967-1.029) and cost 1.5% at [1024,4096]
# (3.9% with the residual). H 2048's four-row CTAs won 3% on 132 chunks at 2304-4096 rows but lost
# 2-16% on its 128 at 256-2048 (-r39-cta1024mid-*.json), H 1536's five-row CTAs lost 5-11% at
# 640-2048 rows and 20-34% in the ring window (-r39-bwdcta1536-*.json): they keep their CTAs.
DW_PAIRED_ROWS_CHUNKS = DW_RING_CHUNKS
DW_NARROW_ROWS_PER_CTA = 4
DW_WARP_ROWS_PER_CTA = 16
DW_WIDE_HIDDEN = 5120
# "warp": rows of one warp (H <= 256: 16 row groups a CTA). There, chunks of fewer rows than the
# CTA's groups but 4 lost ([1024,256] on 128 chunks of 8 rows 8.38 us against 7.41 on 256 of 4,
# [896,256] on 64 chunks of 14 rows 9.49 against 7.25 on 224 of 4), while chunks of 16 and 32 rows
# won (-r28-partition.json: [1024,256] 6.50 on 64 chunks of 16): 4-row chunks up to 960 rows, then
# counts that give chunks of 16 rows or more (64 chunks from 961 rows hold 16, 128 from 2048).
DW_CHUNKS = {
    "warp": ((960, DW_CHUNK_TARGET), (2047, 64), (4096, 128), (None, DW_CHUNK_TARGET)),
    "narrow": ((1023, 64), (4096, 128), (None, DW_CHUNK_TARGET)),
    "mid": ((256, 64), (2048, 128), (None, DW_CHUNK_TARGET)),
    "wide": ((256, 64), (4096, 128), (None, DW_CHUNK_TARGET)),
}
# Widths whose one-row chunks reach past their DW_CHUNKS class: H -> the last row count of one-row
# chunks (before DW_CHUNKS applies), which is the width's fused edge (_FUSED_EDGE_RUNS). Those rows
# run the fused form (one launch: its tile CTAs sum dw straight from g, x and rstd, so one-row
# chunks cost no partials), which beat or tied the pair form on the DW_CHUNKS partition there and
# loses or ties one measured row count further (a tile's FP64 sums grow with the rows). Exact widths
# only (the generic widths take the rule's reach below); the pair form on one-row chunks is slower
# there ([512,4096] 21.55 us against 12.88 on DW_CHUNKS' 128, -r19-fused-reach.json), so a reach is
# a fused window.
DW_ONE_ROW_ROWS: dict[int, int] = {h: at for (_, h), (at, _) in MEASURED_FUSED_EDGES.items()}
# The one-row reach of the widths DW_ONE_ROW_ROWS does not list (generic widths whose CTA holds
# fewer than DW_NARROW_ROWS_PER_CTA rows; narrower ones keep one-row chunks to 264 rows anyway):
# the fused rule's rows, so that the rule's window is all one-row chunks.
DW_RULE_ONE_ROW_ROWS = FUSED_RULE_ROWS

SPEC_ARCHS = ("sm_90a", "sm_100a", "sm_103a")

# (arch, H) -> (last row count of the single form, evidence); 0: no single window. On sm_90a the
# single form lost wherever the old rule gave it a window (bench/partition.py, 2026-12-03: the
# single form on the old partition against the pair form on one-row chunks): [12,512] 5.86 us
# (3 chunks of 4) against 3.94 (12 chunks of 1), [8,1536] 8.26 against 4.61, [32,256] 7.57 against
# 4.42 (16 chunks of 2); and on the same partition (the "single" column of bench/partition.py).
_PAIR_EVERYWHERE = Evidence(
    measured=True, gpu=H200, sms=132, date="2026-12-03", below="single form (rule's window)",
    above="pair form", ratio="single (old partition) / pair (new) = 1.49 at [12,512], 1.79 at [8,1536], 1.71 at [32,256]",
    note="bench/partition.py (CUPTI kernel-active, cold L2, median of 30): the pair form from the "
         "first row past the fused form")
MEASURED_SINGLE_PAIR_EDGES: dict[tuple[str, int], tuple[int, Evidence]] = {
    ("sm_90a", h): (0, _PAIR_EVERYWHERE) for h in QUALIFIED_WIDTHS}


# The two engines of each pass, first (below an engine edge) and second (above it).
ENGINES = {"fwd": ("regs", "l1"), "bwd": ("direct", "ring")}


def _bracket(pass_: str, hidden: int, low: str, high: str, note: str, date: str = "2026-12-02") -> Evidence:
    return Evidence(measured=True, gpu=H200, sms=132, date=date,
                    below=f"{pass_}_h{hidden} {low}", above=f"{pass_}_h{hidden} {high}", ratio=note,
                    note="bench/engines.py (CUPTI kernel-active, cold L2, median of 30); the edge lies "
                         "between the two measured token counts")


# (arch, pass, H, weight) -> (last row count of the first engine, evidence). Keys absent here run
# one engine: backward direct, forward regs (generic forward: l1). Measured with bench/engines.py:
# both engines at T = 512 .. 65536 (bwd) and 256 .. 65536 (fwd); docs/bench/2026-12-02-h200-engines.json
# (BF16 weight) and -engines-fp32.json (FP32 weight, forward: FP32 slices take twice the registers).
# The edges were measured on the plain rows and serve the residual rows too (not measured apart,
# but at H 5120: its residual rows ran the direct engine until the ring's items held two rows there,
# and the ring then timed 1.028 / 0.963 / 0.920 of the direct engine at 4096 / 16384 / 65536 rows,
# docs/bench/2026-12-04-h200-r26-ring-depth2-h5120.json); a backward width whose ring slots do not
# fit a CTA with the residual runs direct throughout (cake_jit).
def _edge(pass_: str, hidden: int, at: int, below: str, above: str, weight: str = "bf16",
          date: str = "2026-12-02") -> tuple[int, Evidence]:
    first, second = ENGINES[pass_]
    return at, _bracket(pass_, hidden, first, second, f"{weight} weight: {second}/{first} = {below} at T={at}, "
                        f"{above} at the next token count measured", date)


# H 2048 and 4096 run the direct engine throughout since its rows are read into L1 at many rows
# (MEASURED_L1_LOADS): with them the ring loses at every row count timed, ring/direct 1.065 / 1.039 /
# 1.026 at T = 8192 / 16384 / 65536 (H 2048), 1.048 / 1.057 / 1.012 (H 4096) (bench/engines.py
# --reads l1, docs/bench/2026-12-04-h200-r23-engines-bwd-l1.json); with streamed reads their edges
# were 16384 (ring/direct 1.016 there, 0.990 at 32768) and 8192 (1.020, 0.978 at 16384). H 1536,
# 5120 and 6144 keep the ring (ring/direct with L1 reads 0.937 at [65536,1536], 0.87-0.93 at H 5120
# / 6144 from 8192 rows). Re-timed with the ring on its own 132 chunks (DW_RING_CHUNKS) and the direct
# engine on 264 (bench/partition.py --chunks 132 --engine ring, 2026-12-06, docs/bench/2026-12-06-h200-
# r34-ringwide.json, -r34-ringedge-h1536.json): H 2048 / 4096 ring/direct 1.001-1.033 from 8192 rows
# (FP32 weight 0.997-1.056, residual 0.988-1.065), so still direct; H 1536 1.048 / 1.021 / 1.013 at
# 8192 / 12288 / 16384 (FP32 weight and residual alike), so its edge holds.
_BWD = {  # the backward's edges, measured with BF16 weight; its FP32-weight rows time alike (<= 1.07x)
    1536: _edge("bwd", 1536, 16384, "1.037 (51.79 vs 49.95 us)", "0.975 (89.22 vs 91.52 us, T=32768)"),
    # re-timed with the ring at two rows an item (backward_ring.cuh bwd_row_depth; it was 2048 at
    # four): ring/direct 1.046 at 2048 and 1.014 at 3072 on the route's chunk order (FP32 weight
    # 1.040 / 1.007), 1.018 at 3072 and 0.991 / 0.963 at 4096 / 5120 with both engines on
    # contiguous chunks, 1.010 at 4096 on strided ones (docs/bench/2026-12-05-h200-r27-engines-h5120.json)
    # (the plain rows' ring has run three rows an item since 2026-12-06, 1-2.5% faster from 4096 rows:
    # the edge may lie lower now, not re-timed)
    5120: _edge("bwd", 5120, 3072, "1.018 (37.14 vs 36.50 us)", "0.991 (45.55 vs 45.98 us, T=4096; "
                "contiguous dw chunks for both engines)", date="2026-12-05"),
    # H 6144 re-measured with the dw partition of cake_windows.DW_CHUNKS (128 chunks up to 4096 rows
    # at H >= 5120; docs/bench/2026-12-03-h200-r12-engines-bwd.json); the other edges still hold there
    6144: _edge("bwd", 6144, 4096, "1.014 (56.30 vs 55.54 us)", "0.956 (98.74 vs 103.23 us, T=8192)"),
}
_FWD = {
    "bf16": {
        512: _edge("fwd", 512, 256, "1.007 (2.46 vs 2.45 us)", "0.934 (2.46 vs 2.64 us, T=512)"),
        1536: _edge("fwd", 1536, 2048, "1.011 (6.02 vs 5.95 us)", "0.995 (10.21 vs 10.26 us, T=4096)"),
        4096: _edge("fwd", 4096, 2048, "1.057 (12.86 vs 12.18 us)", "0.931 (19.76 vs 21.22 us, T=4096)"),
        # re-measured with rows per CTA by token count (docs/bench/2026-12-02-h200-r11-engines-fwd.json):
        # at T = 1024 (512 CTAs of 2 rows) every CTA is resident at once with weights in L1 (4 per SM)
        # and not with weights in registers (3 per SM)
        5120: _edge("fwd", 5120, 512, "1.011 (5.73 vs 5.66 us)", "0.973 (6.86 vs 7.06 us, T=768)"),
        # re-measured with the L1 kernel held to 40 registers (forward.cuh fwd_min_ctas;
        # docs/bench/2026-12-03-h200-r15-engines-fwd.json): l1/regs 0.777 at T=768, 0.791 at 1024
        # (H 5120's edge held there: l1/regs 0.994 at 512, 0.991 at 768, both weights' edges at 512)
        6144: _edge("fwd", 6144, 256, "1.110 (5.18 vs 4.67 us)", "0.975 (6.21 vs 6.37 us, T=512)", date="2026-12-03"),
    },
    "fp32": {
        # 512, 1536 and 5120 re-measured with rows per CTA by token count
        # (docs/bench/2026-12-02-h200-r11-engines-fwd-fp32.json); the others still hold there
        512: _edge("fwd", 512, 1024, "1.012 (2.59 vs 2.56 us)", "0.908 (3.17 vs 3.49 us, T=2048)", "fp32"),
        1536: _edge("fwd", 1536, 2048, "1.033 (5.98 vs 5.79 us)", "0.849 (8.48 vs 9.98 us, T=4096)", "fp32"),
        # re-measured on the H200 (docs/bench/2026-12-06-h200-r29-engines-fwd-fp32.json) after round
        # 11's 0.785 at 2048 had turned on an H100 (regs ahead at 2048 / 4096, -r28-engines-fwd-fp32.json):
        # regs ahead at 1024 (1.004), 2048 (1.038) and 4096, a tie at 16384
        2048: _edge("fwd", 2048, 4096, "1.173 (12.14 vs 10.35 us)", "1.014 (34.74 vs 34.27 us, T=16384: a tie)",
                    "fp32", date="2026-12-06"),
        4096: _edge("fwd", 4096, 512, "1.058 (5.57 vs 5.26 us)", "0.792 (7.07 vs 8.93 us, T=1024)", "fp32"),
        5120: _edge("fwd", 5120, 512, "1.028 (5.79 vs 5.63 us)", "0.810 (7.78 vs 9.60 us, T=1024)", "fp32"),
        # re-measured with the L1 kernel held to 40 registers (-r15-engines-fwd.json)
        6144: _edge("fwd", 6144, 512, "1.020 (6.59 vs 6.46 us)", "0.845 (8.11 vs 9.60 us, T=768)", "fp32",
                    date="2026-12-03"),
    },
}
ENGINE_EDGES: dict[tuple[str, str, int, str], tuple[int, Evidence]] = {
    **{("sm_90a", "bwd", h, w): e for h, e in _BWD.items() for w in ("bf16", "fp32")},
    **{("sm_90a", "fwd", h, w): e for w, t in _FWD.items() for h, e in t.items()},
}


def _blackwell(what: str, ev: Evidence) -> Evidence:
    """What a Blackwell arch's copy of an sm_90a measurement rests on: nothing measured there."""
    return unmeasured(f"Blackwell build: compiled, never measured; the sm_90a {what} ({ev.ratio})")


def _on_arch(table: dict, arch: str, rest: tuple, what: str, mark: Callable | None = None):
    """table[(arch, *rest)]: measured on sm_90a; Blackwell archs take the sm_90a entry, marked
    unmeasured (`mark(entry, what)`; by default an entry is a (value, evidence) pair)."""
    hit = table.get((arch, *rest))
    if hit is not None or arch == "sm_90a":
        return hit
    base = table.get(("sm_90a", *rest))
    if base is None:
        return None
    return mark(base, what) if mark else (base[0], _blackwell(what, base[1]))


def engine_edge(arch: str, pass_: str, hidden: int, weight: str = "bf16") -> tuple[int, Evidence] | None:
    """The engine edge of a route: measured on sm_90a; Blackwell archs take the sm_90a edge,
    marked unmeasured."""
    return _on_arch(ENGINE_EDGES, arch, (pass_, hidden, weight), "engine edge")


# Rows per forward CTA by row count: (arch, H) -> steps in rising row count, each a CtaStep (rows
# per CTA from its row count on, up to the next step's; 0 rows: the rule's CTAs again). Below the
# first step (and for widths absent) the rule of cake_jit.fwd_cta_rows: the spread of few rows,
# full CTAs past FWD_SPREAD_WAVES of them per SM. A CTA's rows share its barrier, so a row of
# 64-192 threads waits for the slowest of its CTA-mates' loads; smaller CTAs free them row by row.
# Rows of one warp (H 256) want full CTAs: 64-thread CTAs there cost 1.09-1.11x (CTA launch rate).
# The launch changes no bit, only time, so one size serves every weight and the residual: a step
# starts at the first row count timed where it won or tied on the plain, FP32-weight and residual
# rows alike (the later steps: on the plain rows, the others taking the same size).
@dataclass(frozen=True)
class CtaStep:
    """Rows per forward CTA from a row count on (0: the rule's CTAs), with what it rests on."""

    rows: int
    start: int
    evidence: Evidence

    def size(self) -> str:
        """The CTA size in words."""
        return _cta_size(self.rows)


def _cta_size(rows: int) -> str:
    return f"{rows} row(s) per CTA" if rows else "the rule's CTAs"


CTA_METHOD_H200 = ("bench/fwd_launch.py --cta-rows 1,2 (CUPTI kernel-active, cold L2, median of 30; bits equal; "
                   "docs/bench/2026-12-03-h200-r14-fwd-launch.json, -large-t.json)")
CTA_METHOD_H100 = ("bench/fwd_launch.py --cta-rows 1,2 --variant plain|fp32w|residual (CUPTI kernel-active, cold L2, "
                   "median of 30; bits equal; docs/bench/2026-12-06-h100-r31-fwd-launch-{plain,fp32w,residual}.json, "
                   "the steps as routed against the rule's CTAs: -r31-fwd-launch-shipped-*.json)")
CTA_METHOD_H200_R33 = ("bench/fwd_launch.py --cta-rows 1,2 --variant plain|fp32w|residual (CUPTI kernel-active, cold "
                       "L2, median of 30; bits equal; docs/bench/2026-12-06-h200-r33-fwd-launch-{plain,fp32w,residual}"
                       ".json at 1024-16384 rows and -r33-fwd-launch-steps-*.json at 1024-2048, two processes)")


def _step(hidden: int, rows: int, start: int, ratio: str, gpu: str = H200, date: str = "2026-12-03",
          method: str = CTA_METHOD_H200, why: str = "the size lost at the row count below the start") -> CtaStep:
    """A CTA-size step measured with bench/fwd_launch.py (by default in round 14, on the H200)."""
    return CtaStep(rows, start, Evidence(measured=True, gpu=gpu, sms=132, date=date,
                                         below=f"fwd_h{hidden} {'the rule' if rows else 'the step before'}'s CTAs",
                                         above=f"fwd_h{hidden} {_cta_size(rows)} from {start} rows", ratio=ratio,
                                         note=f"{method}; {why}"))


def _variants_step(gpu: str, method: str) -> Callable[[int, int, int, str], CtaStep]:
    """Steps measured on the plain, FP32-weight and residual rows alike (2026-12-06, on `gpu`)."""
    return lambda hidden, rows, start, ratio: _step(
        hidden, rows, start, ratio, gpu=gpu, date="2026-12-06", method=method,
        why="the size lost on one of the three at the row count below the start")


# Round 33, on the H200 (where round 31's H100 put the start one or two row counts later); round 31, on an H100.
_h200_step = _variants_step(H200, CTA_METHOD_H200_R33)
_h100_step = _variants_step(H100, CTA_METHOD_H100)


MEASURED_FWD_CTA_ROWS: dict[tuple[str, int], tuple[CtaStep, ...]] = {
    ("sm_90a", 512): (
        _step(512, 2, 16384, "2 rows / 16 = 0.968 at T=16384 (11.01 vs 11.38 us), 0.979 at 65536 (35.87 vs 36.64); "
                             "1.15 at 4096"),),
    ("sm_90a", 1536): (
        _h200_step(1536, 2, 1280, "2 rows / the rule's 5-7: plain / FP32 weight / residual 0.977 / 0.982 / 1.000 at "
                                  "T=1280 (4.06 vs 4.16 us plain, one process), 0.965 / 0.969 / 0.974 and "
                                  "0.979 / 0.972 / 0.978 at 1536 (two processes), 0.968 / 0.968 / 0.957 at 1792; "
                                  "1.008-1.009 / 0.983 / 1.026-1.036 at 1024. The H100 (round 31): 0.961 / 0.965 / "
                                  "0.966 at 2048, 0.979 / 0.982 / 0.985 at 3072, 0.988 / 0.978 / 0.980 at 4096, "
                                  "0.988 / 0.979 / 0.991 at 8192, 0.979 / 0.988 / 1.049 at 1536; 1 row loses 7-8% "
                                  "at 3072-4096"),
        _step(1536, 1, 16384, "1 row / 8 = 0.975 at T=16384 (26.98 vs 27.66 us), 0.978 at 65536 (100.53 vs 102.83); "
                              "1.11 at 4096")),
    ("sm_90a", 2048): (
        _h200_step(2048, 1, 1280, "1 row / the rule's 5-7: plain / FP32 weight / residual 0.955 / 0.947 / 0.991 at "
                                  "T=1280 (4.70 vs 4.93 us plain, one process), 0.936 / 0.939 / 0.955 and 0.962 / "
                                  "0.941 / 0.960 at 1536 (two processes), 0.959 / 0.958 / 0.974 at 1792; "
                                  "1.012-1.036 / 0.989-1.004 / 1.019-1.071 at 1024. The H100 (round 31): 0.940 / "
                                  "0.940 / 0.975 at 2048, 0.927 / 0.939 / 1.008 at 3072, 0.965 / 0.961 / 1.039 at "
                                  "1536"),
        _step(2048, 1, 4096, "1 row / 8 = 0.908 at T=4096 (10.86 vs 11.97 us), 0.945 at 16384 (35.20 vs 37.23), "
                             "0.973 at 65536 (131.33 vs 134.94)")),
    ("sm_90a", 4096): (
        _h100_step(4096, 1, 1024, "1 row / the rule's 4: plain / FP32 weight / residual 0.933 / 1.000 / 0.976 at "
                                  "T=1024 (7.10 vs 7.62 us plain), 0.939 / 0.991 / 0.977 at 1536, 0.969 / 0.917 / "
                                  "0.988 at 2048, 0.992 / 0.954 / 1.003 at 3072, 0.977 / 0.962 / 0.991 at 4096, "
                                  "0.992 / 0.983 / 1.004 at 8192; 0.944 / 1.017 / 1.053 at 768; on the H200 "
                                  "(round 14) 0.963 at 1024, 0.977 at 4096"),
        _step(4096, 0, 16384, "1 row / 4 = 0.999 at T=16384, 1.008 at 65536 (the H200's round 14): the rule's "
                              "full CTAs again",
              why="one row no longer ahead from this row count on")),
    ("sm_90a", 5120): (
        _h100_step(5120, 2, 1536, "2 rows / the rule's 3: plain / FP32 weight / residual 0.965 / 0.953 / 0.983 at "
                                  "T=1536 (13.95 vs 14.46 us plain); 1 row there 0.968 / 0.936 / 1.062; 1.002 / "
                                  "0.996 / 1.007 at 1024"),
        _h100_step(5120, 1, 2048, "1 row / the rule's 3: plain / FP32 weight / residual 0.977 / 0.962 / 0.973 at "
                                  "T=2048 (16.11 vs 16.50 us plain), 1.039 / 0.969 / 0.982 at 3072"),
        _step(5120, 1, 4096, "1 row / 3 = 0.916 at T=4096 (23.55 vs 25.71 us), 0.973 at 16384 (85.33 vs 87.71), "
                             "0.983 at 65536 (329.84 vs 335.50); 1.01 at 1024"),),
    ("sm_90a", 6144): (
        _step(6144, 1, 1024, "1 row / 2 = 0.973 at T=1024 (10.34 vs 10.62 us), 0.983 at 4096 (28.18 vs 28.66), "
                             "0.992 at 16384, 0.988 at 65536 (398.43 vs 403.21)"),),
}


# Packed forward rows from a measured row count on: (arch, H) -> ((pack, from rows), evidence). A
# thread then holds `pack` canonical threads of a one-warp row (forward.cuh, has_pack): twice the
# loads in flight per thread, the row's rsqrt and address shared by twice the elements, the bits
# the canonical row's. Below `from rows` (and for widths absent) the canonical rows. Measured on the
# plain rows with BF16 weight, beside the FP32-weight and residual rows at 4096 / 65536 / 262144.
MEASURED_FWD_PACKS: dict[tuple[str, int], tuple[tuple[int, int], Evidence]] = {
    ("sm_90a", 256): ((2, 32768), Evidence(
        measured=True, gpu=H200, sms=132, date="2026-12-04", below="fwd_h256 canonical rows (16 a CTA)",
        above="fwd_h256 packed rows (2 canonical threads a thread, 32 rows a CTA) from 32768 rows",
        ratio="packed / canonical = 0.958 at T=32768 (10.61 vs 11.07 us; 0.999, 10.90 vs 10.91, in a third "
              "run), 0.976 at 65536 (19.18 vs 19.65; 0.959 in the third), "
              "0.964 at 131072 (35.18 vs 36.50), 0.952 at 262144 (68.61 vs 72.06); in a first run 0.962 / 0.954 / "
              "0.956 at 65536 / 131072 / 262144, FP32 weight 0.958 and residual 0.991 at 65536; 1.000 at 16384 "
              "(6.35 us at 8 rows a CTA, 1.06 at the rule's 25), 1.03-1.12 at 256-4096",
        note="bench/fwd_launch.py --packed (CUPTI kernel-active, cold L2, median of 30; bits equal; "
             "docs/bench/2026-12-04-h200-r22-fwd-packed.json, three runs); the first measured row count where packed "
             "rows win or tie")),
}


# Rows read through L1 from a measured row count on: (arch, pass, H) -> (from rows, evidence). The
# rows' reads then allocate in L1 (vec.cuh load_cached, args.cuh RowLoads) instead of streaming past
# it: the same bits, the reads of many rows complete sooner. Forward: the narrow canonical rows' x
# (and residual); backward: the direct engine's g, x (and g_residual). Below `from rows`, at the
# forward's packed and wide rows, the ring's and fused form's rows and for widths absent, the
# streaming reads. Measured on the plain rows with BF16 weight (L1_LOADS_NOTE), the quick table's
# FP32-weight and residual rows beside them.
L1_LOADS_NOTE = ("bench/fwd_launch.py --l1-loads (forward) and bench/variants.py (a tree whose row reads all "
                 "allocate in L1, beside the routed programs; both passes) (CUPTI kernel-active, cold L2, median "
                 "of 30; bits equal; docs/bench/2026-12-04-h200-r23-fwd-l1-loads.json, -r23-load-variants.json); "
                 "the first measured row count from which L1 reads win or tie at every row count timed")


def _from_rows(frm: int, below: str, above: str, ratio: str, note: str) -> tuple[int, Evidence]:
    """(from rows, evidence) of a choice measured on the H200 that holds from a row count on."""
    return frm, Evidence(measured=True, gpu=H200, sms=132, date="2026-12-04", below=below,
                         above=f"{above} from {frm} rows", ratio=ratio, note=note)


def _l1_loads(frm: int, ratio: str) -> tuple[int, Evidence]:
    return _from_rows(frm, "streaming row reads (ld.global.nc.L1::no_allocate)",
                      "row reads allocating in L1 (ld.global.nc)", ratio, L1_LOADS_NOTE)


MEASURED_L1_LOADS: dict[tuple[str, str, int], tuple[int, Evidence]] = {
    ("sm_90a", "fwd", 1536): _l1_loads(16384, "L1 / streaming = 0.986 at T=16384 (26.50 vs 26.88 us), 0.979 at 32768, "
                                       "0.979 at 65536 (97.62 vs 99.73); 1.022 at 4096, 1.031 at 8192; whole trees "
                                       "1.005 / 0.970 / 0.978 at 16384, 0.976-0.978 at 65536"),
    ("sm_90a", "fwd", 2048): _l1_loads(16384, "L1 / streaming = 0.990 at T=16384 (33.92 vs 34.26 us), 0.980 at 32768, "
                                       "0.978 at 65536 (127.78 vs 130.59); 0.992 at 4096, 1.003 at 8192; whole trees "
                                       "0.979-0.989 at 16384, 0.972-0.979 at 65536"),
    ("sm_90a", "fwd", 4096): _l1_loads(4096, "L1 / streaming = 1.001 at T=4096 (19.71 vs 19.70 us), 0.970 at 8192 and "
                                       "16384, 0.959 at 65536 (259.38 vs 270.35); 1.013 at 2048; whole trees "
                                       "0.990-0.992 at 4096, 0.958-0.965 at 16384, 0.952-0.954 at 65536, 1.000-1.005 "
                                       "at 1024"),
    ("sm_90a", "fwd", 5120): _l1_loads(4096, "L1 / streaming = 0.995 at T=4096 (23.23 vs 23.35 us), 0.981 at 8192, "
                                       "0.967 at 65536 (320.58 vs 331.58); 1.019 at 2048, 1.023 at 1024; whole trees "
                                       "0.979-0.988 at 4096"),
    ("sm_90a", "fwd", 6144): _l1_loads(4096, "L1 / streaming = 0.988 at T=4096 (26.90 vs 27.22 us), 0.973 at 8192, "
                                       "0.965 at 65536 (384.51 vs 398.32); 1.037 at 2048, 1.018 at 1024; whole trees "
                                       "0.973-0.978 at 4096"),
    ("sm_90a", "bwd", 256): _l1_loads(98304, "whole trees, L1 / streaming = 0.982 / 0.987 at 98304 rows (the query view "
                                      "of 4096 tokens, 47.01 vs 47.86 us), 0.986 / 0.972 at 131072, 0.952 / 0.963 at "
                                      "262144, 0.945 / 0.950 at 1572864 (the query view of 65536 tokens, 594.7 vs "
                                      "629.3); 1.011 / 0.999 at 65536, 1.016 at 16384"),
    ("sm_90a", "bwd", 512): _l1_loads(65536, "whole trees, L1 / streaming = 0.987 at T=65536 (61.44 vs 62.24 us; 0.989 "
                                      "/ 0.991 in an earlier run), 0.958 at 131072, 0.947 at 262144; 1.030 at 16384"),
    # H 2048 / 4096: the direct engine with L1 reads also beats the ring past its old edges (ENGINE_EDGES)
    ("sm_90a", "bwd", 2048): _l1_loads(16384, "whole trees, L1 / streaming (direct) = 0.993 / 0.994 at T=16384, "
                                       "1.011 / 1.019 at 4096; the direct engine with L1 reads against the ring: "
                                       "ring / direct = 1.039 at 16384 (61.42 vs 63.82 us), 1.026 at 65536 (208.59 "
                                       "vs 214.11)"),
    ("sm_90a", "bwd", 4096): _l1_loads(4096, "whole trees, L1 / streaming (direct) = 0.985 / 0.983 at T=4096 (37.95 "
                                       "vs 38.53 us), 1.028 / 1.030 at 1024; the direct engine with L1 reads against "
                                       "the ring: ring / direct = 1.048 at 8192 (62.74 vs 65.73 us), 1.057 at 16384, "
                                       "1.012 at 65536 (413.63 vs 418.49)"),
}


# Strided dw chunks from a measured row count on: H -> (from rows, evidence). A chunk then takes
# row blocks in turn with the others (args.cuh ChunkOrder) instead of one contiguous band, so the
# CTAs of the direct engine walk one dense band of rows together: 2-6% faster on the rows below,
# and every dw bit of those calls changes (the partition is still a function of (T, H) alone, so no
# bit depends on the grid). These are the direct engine's windows, where the chunks hold at least a
# full CTA's row groups; the ring's are MEASURED_STRIDED_RING. Not at H 5120 (the one
# direct row count timed, 1024, lost 1%), nor below the rows listed (H 256 loses 1-5% at 1024-16384
# rows, H 512 3% at 1024).
STRIDED_NOTE = ("bench/variants.py --old-only (a tree whose direct engine walks strided chunks, beside the routed "
                "programs; CUPTI kernel-active, cold L2, median of 30; docs/bench/2026-12-04-h200-r25-bwd-walk-"
                "variants.json), then bench/split.py --chunk-orders on the final programs (-r25-chunk-order-"
                "split.json); the first measured row count from which strided chunks win at every row count timed")


def _strided(frm: int, ratio: str) -> tuple[int, Evidence]:
    return _from_rows(frm, "contiguous dw chunks", "strided dw chunks", ratio, STRIDED_NOTE)


MEASURED_STRIDED_CHUNKS: dict[tuple[str, int], tuple[int, Evidence]] = {
    ("sm_90a", 256): _strided(65536, "strided / contiguous = 0.977 at T=65536 (34.00 vs 34.80 us), 0.985 at "
                                     "[32768,4,256], 0.976 at [16384,24,256]; 1.035 at 16384, 1.046 at 4096"),
    ("sm_90a", 512): _strided(4096, "strided / contiguous = 0.978 at T=4096 (10.89 vs 11.14 us), 0.991 at 16384, "
                                    "0.964 at 65536; 1.028 at 1024"),
    ("sm_90a", 1536): _strided(1024, "strided / contiguous = 0.985 at T=1024 (10.37 vs 10.53 us), 0.991 at 4096, "
                                     "0.969 at 16384 (the ring above 16384 rows)"),
    ("sm_90a", 2048): _strided(1024, "strided / contiguous = 0.959 at T=1024 (11.15 vs 11.63 us), 0.940 at 4096, "
                                     "0.964 at 16384, 0.977 at 65536 (205.07 vs 209.97)"),
    ("sm_90a", 4096): _strided(1024, "strided / contiguous = 0.970 at T=1024 (16.42 vs 16.93 us), 0.984 at 4096, "
                                     "0.971 at 16384, 0.978 at 65536 (404.38 vs 413.40)"),
    ("sm_90a", 6144): _strided(4096, "strided / contiguous = 0.942 at T=4096 (53.84 vs 57.17 us; the ring above "
                                     "4096 rows); 1.002 at 1024"),
}


# The ring engine's windows (_BWD: H 1536, 5120 and 6144 at many rows) walk strided chunks from a
# measured row count on where they won or tied on every weight and residual row timed: H 1536 and
# 6144 from the first ring row (the engine edge + 1), H 5120 from 4096 rows. (At H 5120, with four
# rows an item, strided chunks won on BF16-weight rows, 0.973 at 16384, and lost on FP32-weight ones,
# 1.039, where that ring spilled; with two rows an item they win or tie on both. The order must be
# the same for both weights: the partition is a function of (T, H).) bench/split.py --chunk-orders,
# docs/bench/2026-12-04-h200-r26-ring-chunk-orders.json, -r26-chunk-order-edges.json,
# -r26-ring-depth2-h5120.json.
RING_STRIDED_NOTE = ("bench/split.py --no-baselines --chunk-orders with BF16 weight, FP32 weight and the residual "
                     "(CUPTI kernel-active, cold L2, median of 30; docs/bench/2026-12-04-h200-r26-ring-chunk-orders"
                     ".json, -r26-chunk-order-edges.json, -r26-ring-depth2-h5120.json); the first measured ring "
                     "row count from which strided chunks win or tie (within 1%) on every row timed")


def _ring_strided(frm: int, ratio: str) -> tuple[int, Evidence]:
    return _from_rows(frm, "the ring engine on contiguous dw chunks", "the ring engine on strided dw chunks", ratio,
                      RING_STRIDED_NOTE)


MEASURED_STRIDED_RING: dict[tuple[str, int], tuple[int, Evidence]] = {
    ("sm_90a", 1536): _ring_strided(16385, "strided / contiguous = 0.989 at T=16385 (51.10 vs 51.70 us), 0.995 at "
                                           "24576, 0.984 at 32768, 0.992 at 65536; FP32 weight 0.995 / 0.990 / "
                                           "0.983 / 0.998; residual 1.006 / 0.985 / 0.998 / 0.996"),
    ("sm_90a", 5120): _ring_strided(4096, "strided / contiguous = 0.962 at T=4096 (46.90 vs 48.77 us), 1.000 at "
                                          "16384, 1.001 at 65536; FP32 weight 0.987 / 0.992 / 1.000; residual "
                                          "0.987 / 0.979 / 0.999 (the ring of two rows an item)"),
    ("sm_90a", 6144): _ring_strided(4097, "strided / contiguous = 0.998 at T=4097 (59.42 vs 59.52 us), 0.988 at "
                                          "6144, 0.966 at 8192, 0.991 at 65536; FP32 weight 0.994 / 0.998 / 0.968 / "
                                          "0.991; residual 0.961 / 0.970 / 0.945 / 0.958"),
}


def measured_strided_chunks(arch: str, hidden: int, engine: str = "direct") -> tuple[int, Evidence] | None:
    """(from rows, evidence) of the backward's strided dw chunks on `engine`'s windows where measured
    (None: contiguous). Blackwell archs take the sm_90a value, marked unmeasured."""
    table = MEASURED_STRIDED_CHUNKS if engine == "direct" else MEASURED_STRIDED_RING
    return _on_arch(table, arch, (hidden,), f"strided-chunk edge ({engine} engine)")


def measured_l1_loads(arch: str, pass_: str, hidden: int) -> tuple[int, Evidence] | None:
    """(from rows, evidence) of a pass's rows read through L1 where measured (None: streaming reads).
    Blackwell archs take the sm_90a value, marked unmeasured."""
    return _on_arch(MEASURED_L1_LOADS, arch, (pass_, hidden), "L1-load edge")


def fwd_measured_pack(arch: str, hidden: int) -> tuple[tuple[int, int], Evidence] | None:
    """((pack, from rows), evidence) where measured (None: canonical rows). Blackwell archs take the
    sm_90a value, marked unmeasured."""
    return _on_arch(MEASURED_FWD_PACKS, arch, (hidden,), "pack")


def fwd_measured_cta_rows(arch: str, hidden: int) -> tuple[CtaStep, ...] | None:
    """The measured CTA-size steps of a width (None: the rule's CTAs throughout). Blackwell archs
    take the sm_90a steps, marked unmeasured."""
    return _on_arch(MEASURED_FWD_CTA_ROWS, arch, (hidden,), "CTA size",
                    lambda steps, what: tuple(replace(s, evidence=_blackwell(what, s.evidence)) for s in steps))


def fwd_cta_step(arch: str, hidden: int, rows: int) -> CtaStep | None:
    """The measured CTA-size step that holds `rows` rows: the last one starting at or below it."""
    hit = None
    for step in fwd_measured_cta_rows(arch, hidden) or ():
        if step.start <= rows:
            hit = step
    return hit


def rule_evidence(arch: str) -> Evidence:
    """Why the single / pair edge is where the byte rule puts it (no measured edge)."""
    if arch == "sm_90a":
        return unmeasured("latency rule: single while chunks*ceil(H/512) <= 8 L2 round trips in the last "
                          "CTA; single lost 22.8 us vs 6.8 us (pair) at 64 round trips")
    return unmeasured("Blackwell build: compiled, never measured; the sm_90a byte rule")
