"""The route registry: (arch, pass, H, weight dtype, residual) -> windows of rows -> program + launch rule.

Every key of every supported arch is routed: the qualified widths to their specialised programs,
any other width (a multiple of 8 up to 16384) to the generic program of its pass. Windows of one
key cover (0, inf) without gap or overlap; the edges and their evidence live in cake_windows.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import ceil

from . import cake_windows as cw
from . import layout
from .programs import SUPPORTED_ARCHS, Program, program_by_key

PASSES = ("fwd", "bwd")
ENGINES = cw.ENGINES
WEIGHTS = ("bf16", "fp32")
QUALIFIED_WIDTHS = cw.QUALIFIED_WIDTHS
MAX_HIDDEN = 16384
INF = None  # an open upper edge

# dw row partition (a function of rows and H alone: never of the device, grid or program). The
# rows split into chunks of ceil(rows / dw_max_chunks(rows, H)) rows: a chunk is one CTA's serial
# walk (each row a chain of dependent steps), and each chunk writes and the reduce reads an FP64
# partial row of H. Few rows: one-row chunks (the rows run side by side, and the fused form sums
# their partials without writing them); more rows: fewer, longer chunks. The counts are measured
# (cake_windows.DW_CHUNKS, bench/partition.py).
CHUNK_TARGET = max(cw.DW_CHUNK_TARGET, cw.DW_RULE_ONE_ROW_ROWS, *cw.DW_ONE_ROW_ROWS.values())  # the most chunks of any partition


def _is_narrow(hidden: int) -> bool:
    return layout.bwd_row_groups(hidden) >= cw.DW_NARROW_ROWS_PER_CTA


def dw_class_windows(hidden: int) -> tuple[tuple[int | None, int], ...]:
    """The (last rows, chunks) windows of width `hidden`'s DW_CHUNKS class, without its one-row reach
    (what a row count past the fused window runs: bench/partition.py --pair-class). The class goes
    by the backward CTA's row groups (rows of one warp, narrow), else by the width (mid, wide); a CTA
    of two 512-thread rows ends on DW_PAIRED_ROWS_CHUNKS; past the width's ring edge, DW_RING_CHUNKS."""
    if layout.bwd_row_groups(hidden) >= cw.DW_WARP_ROWS_PER_CTA:
        cls = "warp"
    else:
        cls = "narrow" if _is_narrow(hidden) else "wide" if hidden >= cw.DW_WIDE_HIDDEN else "mid"
    windows = cw.DW_CHUNKS[cls]
    if layout.bwd_pairs_rows(hidden):  # CTAs of two rows: one chunk a resident CTA
        windows = windows[:-1] + ((None, cw.DW_PAIRED_ROWS_CHUNKS),)
    edge = ring_edge(hidden)
    if edge is None:
        return windows
    below = tuple((last, chunks) for last, chunks in windows if last is not None and last < edge)
    at_edge = next(chunks for last, chunks in windows if last is None or last >= edge)
    return below + ((edge, at_edge), (None, cw.DW_RING_CHUNKS))


def ring_edge(hidden: int) -> int | None:
    """The last row count before the backward's ring engine, where it has one (None: the direct
    engine throughout). The sm_90a edge, whatever the arch (Blackwell archs take it too), and only
    where the ring fits with and without the residual: the partition is a function of (T, H) alone,
    so the ring's chunk count must not fall on rows that a residual call would run direct."""
    hit = cw.engine_edge("sm_90a", "bwd", hidden)
    if hit is None or not (layout.ring_fits(hidden, False) and layout.ring_fits(hidden, True)):
        return None
    return hit[0]


@lru_cache(maxsize=None)
def _dw_chunk_windows(hidden: int) -> tuple[tuple[int | None, int], ...]:
    """The (last rows, chunks) windows of width `hidden` (a function of H alone; the partition runs
    every call): its DW_CHUNKS class, led by a window of `reach` chunks up to `reach` rows (one-row
    chunks, since ceil(rows / ceil(rows / reach)) = rows there): DW_ONE_ROW_ROWS' reach, else
    DW_RULE_ONE_ROW_ROWS (narrow widths: their class's DW_CHUNK_TARGET one-row chunks)."""
    windows = dw_class_windows(hidden)
    reach = cw.DW_ONE_ROW_ROWS.get(hidden, cw.DW_CHUNK_TARGET if _is_narrow(hidden) else cw.DW_RULE_ONE_ROW_ROWS)
    return ((reach, reach),) + tuple(w for w in windows if w[0] is None or w[0] > reach)


def dw_max_chunks(rows: int, hidden: int) -> int:
    """The chunk count the partition aims at for `rows` rows of width `hidden` (cake_windows.DW_CHUNKS,
    and DW_ONE_ROW_ROWS' one-row reach)."""
    for last, chunks in _dw_chunk_windows(hidden):
        if last is None or rows <= last:
            return chunks
    raise AssertionError("DW_CHUNKS ends with an open window")


def dw_partition(rows: int, hidden: int) -> tuple[int, int]:
    """(chunk_rows, chunks) of the dw reduction for `rows` rows of width `hidden`.

    A function of (rows, hidden) alone: never of the device, grid, stream or program, so dw's
    bits are too: at most dw_max_chunks(rows, H) chunks of equal rows (the last may be shorter)."""
    if rows <= 0:
        return 1, 0
    chunk_rows = ceil(rows / dw_max_chunks(rows, hidden))
    return chunk_rows, ceil(rows / chunk_rows)


@lru_cache(maxsize=None)
def one_row_chunks(hidden: int) -> int:
    """The largest row count whose partition is all one-row chunks (the fused form's reach)."""
    rows = 1
    while dw_partition(rows + 1, hidden)[0] == 1:
        rows += 1
    return rows


@lru_cache(maxsize=None)
def fused_edge(arch: str, hidden: int) -> tuple[int, cw.Evidence]:
    """The last row count of the fused form, and why: measured where cake_windows has it, else the
    rule's min(FUSED_RULE_ROWS, one_row_chunks(H))."""
    hit = cw.MEASURED_FUSED_EDGES.get((arch, hidden))
    if hit is not None:
        return hit
    return min(cw.FUSED_RULE_ROWS, one_row_chunks(hidden)), cw.fused_rule_evidence(arch)


WORKSPACE_HEADER = 256  # bytes: the single form's arrival ticket (kept at zero between calls)


def workspace_bytes_for(chunks: int, hidden: int) -> int:
    """Bytes of backward workspace for a partition of `chunks` chunks of width `hidden`."""
    return WORKSPACE_HEADER + chunks * hidden * 8


def max_chunks_up_to(rows: int, hidden: int) -> int:
    """An upper bound on the chunks of the partition of any row count up to `rows` (the chunk
    count is not monotone in the rows: 160 one-row chunks at 160 rows, 54 of three rows at 161)."""
    most = 0
    start = 0
    for last, chunks in _dw_chunk_windows(hidden):
        if rows > start:
            most = max(most, min(rows, chunks))
        if last is None:
            break
        start = last
    return most


def workspace_bytes(rows: int, hidden: int) -> int:
    """Bytes of backward workspace for any row count up to `rows` of width `hidden`."""
    return workspace_bytes_for(max_chunks_up_to(rows, hidden), hidden)


@dataclass(frozen=True)
class RouteKey:
    arch: str
    pass_: str
    hidden: int
    weight: str
    residual: bool

    def __str__(self) -> str:
        return (f"({self.arch}, {self.pass_}, H={self.hidden}, w={self.weight}, "
                f"residual={'yes' if self.residual else 'no'})")


@dataclass(frozen=True)
class Window:
    lo: int                 # exclusive
    hi: int | None          # inclusive; None = no upper edge
    program_key: str
    form: str               # fwd: "rows"; bwd: "fused" | "single" | "pair"
    evidence: str           # why the upper edge is where it is
    engine: str = "direct"  # fwd: "regs" | "l1"; bwd: "direct" | "ring"

    def contains(self, rows: int) -> bool:
        """Whether a call of `rows` rows falls in this window (lo, hi]."""
        return rows > self.lo and (self.hi is None or rows <= self.hi)

    def text(self) -> str:
        """The window as "(lo, hi]" ("inf" for no upper edge)."""
        return f"({self.lo}, {'inf' if self.hi is None else self.hi}]"


def check_key(arch: str, pass_: str, hidden: int, weight: str, residual: bool) -> RouteKey:
    """The route key of these arguments, or a ValueError that names the accepted values."""
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"arch {arch!r} is not supported; supported: {', '.join(SUPPORTED_ARCHS)}")
    if pass_ not in PASSES:
        raise ValueError(f"pass must be one of {PASSES}, got {pass_!r}")
    if weight not in WEIGHTS:
        raise ValueError(f"weight dtype must be one of {WEIGHTS}, got {weight!r}")
    if not isinstance(hidden, int) or hidden <= 0 or hidden % 8 or hidden > MAX_HIDDEN:
        raise ValueError(f"hidden size must be a multiple of 8 in [8, {MAX_HIDDEN}], got {hidden}")
    return RouteKey(arch, pass_, hidden, weight, bool(residual))


def program_key_for(pass_: str, hidden: int) -> str:
    """The program of a pass and width: the width's tuned program, else the pass's generic one."""
    return f"{pass_}_h{hidden}" if hidden in QUALIFIED_WIDTHS else f"{pass_}_generic"


def windows(key: RouteKey) -> list[Window]:
    """The sorted windows of one route key."""
    prog = program_key_for(key.pass_, key.hidden)
    if key.pass_ == "fwd":
        first = "regs" if key.hidden in QUALIFIED_WIDTHS else "l1"
        return _split_engines(key, [Window(0, INF, prog, "rows", "one form: the forward has no dw reduction to "
                                           "split", first)], first)
    fused, fev = fused_edge(key.arch, key.hidden)
    edge, ev = single_pair_edge(key.arch, key.hidden)
    out = [Window(0, fused, prog, "fused", fev.line())]
    if edge is None:
        out.append(Window(fused, INF, prog, "single", "open edge: " + ev.line()))
    elif edge > fused:
        out.append(Window(fused, edge, prog, "single", ev.line()))
        out.append(Window(edge, INF, prog, "pair", "open edge"))
    else:
        out.append(Window(fused, INF, prog, "pair", ev.line()))
    return _split_engines(key, out, "direct")


def _split_engines(key: RouteKey, ws: list[Window], first: str) -> list[Window]:
    """Cut the windows at the key's engine edge: `first` up to it, the pass's other engine above."""
    hit = cw.engine_edge(key.arch, key.pass_, key.hidden, key.weight)
    if hit is not None and key.pass_ == "bwd" and not layout.ring_fits(key.hidden, key.residual):
        hit = None  # two ring slots exceed a CTA's shared memory: the direct engine throughout
    if hit is None:
        return [Window(w.lo, w.hi, w.program_key, w.form, w.evidence, first) for w in ws]
    edge, ev = hit
    second = ENGINES[key.pass_][1]
    out = []
    for w in ws:
        if w.hi is not None and w.hi <= edge:
            out.append(Window(w.lo, w.hi, w.program_key, w.form, w.evidence, first))
        elif w.lo >= edge:
            out.append(Window(w.lo, w.hi, w.program_key, w.form, w.evidence, second))
        else:
            out.append(Window(w.lo, edge, w.program_key, w.form, "engine edge: " + ev.line(), first))
            out.append(Window(edge, w.hi, w.program_key, w.form, w.evidence if w.hi is not None else "open edge",
                              second))
    return out


@lru_cache(maxsize=None)
def single_pair_edge(arch: str, hidden: int) -> tuple[int | None, cw.Evidence]:
    """The last row count of the single form (None: it runs every larger row count), and why."""
    hit = cw.MEASURED_SINGLE_PAIR_EDGES.get((arch, hidden))
    if hit is not None:
        return hit
    max_chunks = cw.SINGLE_FORM_ROUND_TRIPS // ceil(hidden / 512)
    # the largest row count whose partition has at most max_chunks chunks
    rows = 1
    while dw_partition(rows + 1, hidden)[1] <= max_chunks:
        rows += 1
    return rows, cw.rule_evidence(arch)


# The forward's launch (forward.cuh): rows per CTA, and narrow or wide rows. Neither changes a
# bit, so both follow the device.
# Rows per CTA: below FWD_SPREAD_WAVES CTAs per SM at full size, a CTA takes the number of rows
# that minimises the rows of the busiest SM (ties: the larger CTA): a few rows then spread over
# many SMs instead of queueing in the row groups of a few CTAs. Measured CTA sizes
# (cake_windows.MEASURED_FWD_CTA_ROWS, steps by row count) take over where measured.
# Wide rows (one 16-byte slice per thread, a row on threads * vpt threads, one row per CTA)
# shorten each thread's chain of dependent instructions, which is what sets the time while an SM
# holds few rows. The launcher picks them (it knows the wide kernel's occupancy): while every row
# is resident at once and an SM holds at most 8 of them (forward.cuh, kWideRowsPerSm). They exist
# for the fixed widths of more than one slice per thread and hold their weights in registers.
FWD_SPREAD_WAVES = 4


def fwd_has_wide(hidden: int) -> bool:
    """Whether the forward program of `hidden` has wide rows (forward.cuh, has_wide)."""
    return hidden in QUALIFIED_WIDTHS and layout.fwd_row_span(hidden, True) > layout.fwd_row_span(hidden, False)


def fwd_pack(hidden: int, rows: int, arch: str = "sm_90a") -> int:
    """Canonical threads per thread of the forward's rows for `rows` rows: the measured pack from its
    row count on (cake_windows.MEASURED_FWD_PACKS), else 1 (the canonical rows). Packed rows change
    no bit (forward.cuh), only the threads a row takes."""
    if hidden not in QUALIFIED_WIDTHS:
        return 1
    measured = cw.fwd_measured_pack(arch, hidden)
    return measured[0][0] if measured and rows >= measured[0][1] else 1


def chunk_order(arch: str, hidden: int, rows: int, engine: str, chunk_rows: int) -> int:
    """Which rows the backward's dw chunks hold (layout.CONTIGUOUS / STRIDED, args.cuh ChunkOrder): strided
    from the row count measured for the window's engine on (cake_windows.MEASURED_STRIDED_CHUNKS for the
    direct engine, MEASURED_STRIDED_RING for the ring) where a chunk holds at least a full CTA's row groups;
    else contiguous. A function of (T, H) (the window's engine is), so a forced engine or form leaves it,
    and every dw bit, as it is."""
    measured = cw.measured_strided_chunks(arch, hidden, engine)
    if measured is None or rows < measured[0] or not layout.strided_fits(hidden, chunk_rows):
        return layout.CONTIGUOUS
    return layout.STRIDED


def row_loads(pass_: str, hidden: int, rows: int, arch: str = "sm_90a", pack: int = 1, wide: bool = False) -> int:
    """How a pass reads its rows for `rows` rows: layout.L1_LOADS (allocating in L1) from the measured
    row count on (cake_windows.MEASURED_L1_LOADS), else layout.STREAM_LOADS. The forward's packed and
    wide rows always stream (so do the backward's ring and fused form, whatever this says: the
    launcher applies it to the direct engine only). The read path changes no bit, only time."""
    if hidden not in QUALIFIED_WIDTHS or pack > 1 or wide:
        return layout.STREAM_LOADS
    measured = cw.measured_l1_loads(arch, pass_, hidden)
    return layout.L1_LOADS if measured and rows >= measured[0] else layout.STREAM_LOADS


@lru_cache(maxsize=4096)
def fwd_cta_rows(hidden: int, rows: int, sms: int, wide: bool = False, arch: str = "sm_90a", pack: int = 1) -> int:
    """Rows side by side in one forward CTA for `rows` rows on a device of `sms` SMs: narrow
    canonical rows take the measured CTA size of their row count's step
    (cake_windows.MEASURED_FWD_CTA_ROWS); else the rule (fwd_rule_cta_rows)."""
    rpc = layout.rows_per_cta(layout.fwd_row_span(hidden, wide, pack))
    step = None if wide or pack > 1 or sms <= 0 else cw.fwd_cta_step(arch, hidden, rows)  # steps start at >= 1
    if step is not None and step.rows:
        return min(step.rows, rpc)
    return fwd_rule_cta_rows(rpc, rows, sms)


def fwd_rule_cta_rows(rpc: int, rows: int, sms: int) -> int:
    """The rule's rows per CTA of `rpc` full: while rows are few (at most FWD_SPREAD_WAVES full CTAs
    per SM) the size that puts the fewest rows on the busiest SM, ties to the larger CTA; full CTAs
    past them."""
    if rows <= 0 or sms <= 0 or rows > FWD_SPREAD_WAVES * sms * rpc:
        return rpc

    def busiest(r: int) -> int:
        """Rows of the busiest SM with r rows a CTA."""
        return ceil(ceil(rows / r) / sms) * r

    best = rpc
    for r in range(rpc - 1, 0, -1):
        if busiest(r) < busiest(best):
            best = r
    return best


@dataclass(frozen=True)
class Route:
    key: RouteKey
    rows: int
    window: Window
    program: Program
    chunk_rows: int
    chunks: int
    chunk_order: int = layout.CONTIGUOUS


@lru_cache(maxsize=1024)
def _call_windows(key: RouteKey) -> tuple[Window, ...]:
    """windows(key), built once a key: every call's route walks them (building them took 4-7 us of
    host time a call)."""
    return tuple(windows(key))


def forget_routes() -> None:
    """Drop every value this module keeps from its rules and tables (the windows route() walks, the
    edges, the dw chunk windows, the forward's CTA sizes): after replacing, at run time, a function
    or table they come from (program_key_for, an edge: tests and benchmarks do), so that the next
    call routes anew."""
    for cached in (_call_windows, _dw_chunk_windows, one_row_chunks, fused_edge, single_pair_edge, fwd_cta_rows):
        cached.cache_clear()


def route(arch: str, pass_: str, hidden: int, weight: str, residual: bool, rows: int) -> Route:
    """The window, program and dw partition that run `rows` rows under one key."""
    key = check_key(arch, pass_, hidden, weight, residual)
    r = max(rows, 1)
    for w in _call_windows(key):
        if w.contains(r):
            chunk_rows, chunks = dw_partition(rows, hidden) if pass_ == "bwd" else (0, 0)
            order = chunk_order(arch, hidden, rows, w.engine, chunk_rows) if pass_ == "bwd" else layout.CONTIGUOUS
            return Route(key, rows, w, program_by_key(w.program_key), chunk_rows, chunks, order)
    raise AssertionError(f"no window of {key} holds {rows} rows")  # the tests rule this out


def all_keys(arch: str, widths: tuple[int, ...] = QUALIFIED_WIDTHS) -> list[RouteKey]:
    """Every route key of `arch` at `widths`: each pass, weight dtype, with and without the residual."""
    return [RouteKey(arch, p, h, w, r) for p in PASSES for h in widths for w in WEIGHTS for r in (False, True)]
