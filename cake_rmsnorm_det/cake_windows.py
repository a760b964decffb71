"""Measured window edges of the routes, each with the evidence it rests on.

Edges are row counts: a window ``(lo, hi]`` of rows runs one program in one form. Backward has
three forms per width: ``small`` (one chunk, one CTA, dw straight from registers), ``single``
(chunked partials, the last CTA to arrive reduces) and ``pair`` (chunked partials, a separate
reduce kernel). The small/single edge is not tuned: it is where the dw row partition
(``cake_jit.dw_partition``, a function of rows and H alone) stops being a single chunk. The
single/pair edge is tuned per arch and width; its evidence says who measured it and how, or that
nobody has.
"""

from __future__ import annotations

from dataclasses import dataclass


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
        if not self.measured:
            return f"unmeasured: {self.note}"
        return (f"measured on {self.gpu} ({self.sms} SMs) {self.date}: {self.below} | {self.above}; "
                f"{self.ratio}. {self.note}")


def unmeasured(note: str) -> Evidence:
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
SPEC_ARCHS = ("sm_90a", "sm_100a", "sm_103a")

# (arch, H) -> (last row count of the single form, evidence). Nothing is measured yet.
MEASURED_SINGLE_PAIR_EDGES: dict[tuple[str, int], tuple[int, Evidence]] = {}


def rule_evidence(arch: str) -> Evidence:
    if arch == "sm_90a":
        return unmeasured("latency rule: single while chunks*ceil(H/512) <= 8 L2 round trips in the last "
                          "CTA; single lost 22.8 us vs 6.8 us (pair) at 64 round trips")
    return unmeasured("Blackwell build: compiled, never measured; the sm_90a byte rule")
