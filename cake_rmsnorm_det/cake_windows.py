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


# The single/pair edge: the single form's last CTA sweeps chunks x H FP64 partials alone, the
# pair form's reduce kernel spreads them over H/32 CTAs. Until measured, the edge sits where the
# partials reach 256 KiB (read from L2 by one SM); cake_jit derives the row count from the
# dw partition. Measured edges, when they exist, go in MEASURED_SINGLE_PAIR_EDGES.
SINGLE_FORM_PARTIALS = 32768

QUALIFIED_WIDTHS = (256, 512, 1536, 2048, 4096, 5120, 6144)
SPEC_ARCHS = ("sm_90a", "sm_100a", "sm_103a")

# (arch, H) -> (last row count of the single form, evidence). Nothing is measured yet.
MEASURED_SINGLE_PAIR_EDGES: dict[tuple[str, int], tuple[int, Evidence]] = {}


def rule_evidence(arch: str) -> Evidence:
    if arch == "sm_90a":
        return unmeasured("byte rule: single while chunks*H <= 32768 FP64 partials (256 KiB)")
    return unmeasured("Blackwell build: compiled, never measured; the sm_90a byte rule")
