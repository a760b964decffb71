"""The canonical row layout of csrc/include/cake/layout.cuh, mirrored for route inspection.

Kept beside the header it mirrors; tests compare both on every qualified width."""

from __future__ import annotations

from math import ceil

MAX_VEC_PER_THREAD = 2
MAX_ROW_THREADS = 1024
CTA_THREADS = 512


def row_layout(hidden: int) -> tuple[int, int]:
    """(threads per row, 16-byte vectors per thread) for width `hidden`."""
    vecs = (hidden + 7) // 8
    for vpt in range(1, MAX_VEC_PER_THREAD + 1):
        if vecs % vpt == 0 and (vecs // vpt) % 32 == 0 and vecs // vpt <= MAX_ROW_THREADS:
            return vecs // vpt, vpt
    threads = 32 if vecs < 32 else (MAX_ROW_THREADS if vecs >= MAX_ROW_THREADS else (vecs + 31) // 32 * 32)
    return threads, ceil(vecs / threads)


FWD_MAX_VEC_PER_THREAD = 4
FWD_MAX_ROW_THREADS = 512


def fwd_row_layout(hidden: int) -> tuple[int, int]:
    """The forward's (threads per row, vectors per thread): up to 4 vectors, 512 threads."""
    vecs = (hidden + 7) // 8
    for vpt in range(FWD_MAX_VEC_PER_THREAD, 0, -1):
        if vecs % vpt == 0 and (vecs // vpt) % 32 == 0 and vecs // vpt <= FWD_MAX_ROW_THREADS:
            return vecs // vpt, vpt
    if vecs < 32:
        threads = 32
    elif vecs >= 4 * FWD_MAX_ROW_THREADS:
        threads = FWD_MAX_ROW_THREADS
    else:
        threads = ((vecs + 3) // 4 + 31) // 32 * 32
    return threads, ceil(vecs / threads)


FWD_PACK = 2  # args.cuh kFwdPack: canonical threads per thread of packed forward rows
FWD_MAX_PACK_SLICES = 2  # args.cuh kFwdMaxPackSlices


STREAM_LOADS, L1_LOADS = 0, 1  # args.cuh RowLoads: rows read past L1 or into it
CONTIGUOUS, STRIDED = 0, 1  # args.cuh ChunkOrder: which rows a dw chunk holds


def fwd_has_pack(hidden: int) -> bool:
    """Whether a fixed-width forward program of `hidden` builds packed rows (forward.cuh, has_pack):
    its canonical row is one warp, tiled exactly, and a packed thread holds at most
    FWD_MAX_PACK_SLICES slices. (The generic program has none.)"""
    threads, vpt = fwd_row_layout(hidden)
    return threads == 32 and threads * vpt * 8 == hidden and FWD_PACK * vpt <= FWD_MAX_PACK_SLICES


def fwd_row_span(hidden: int, wide: bool, pack: int = 1) -> int:
    """Threads of one forward row: the layout's threads, times its vectors per thread when wide,
    over `pack` when packed (a thread holding `pack` canonical threads)."""
    threads, vpt = fwd_row_layout(hidden)
    return threads * vpt if wide else threads // pack


def rows_per_cta(row_threads: int) -> int:
    """Rows side by side in a CTA of about CTA_THREADS threads (layout.cuh rows_per_cta)."""
    return 1 if row_threads >= CTA_THREADS else CTA_THREADS // row_threads


def bwd_rows_per_cta(row_threads: int) -> int:
    """Rows side by side in a CTA of the backward's chunked forms (layout.cuh bwd_rows_per_cta):
    rows_per_cta, but two rows of CTA_THREADS threads (H 4096) to a CTA of twice that."""
    return 2 if row_threads == CTA_THREADS else rows_per_cta(row_threads)


FUSED_PAIR_MIN_ROWS = 384  # layout.cuh, kFusedPairMinRows


def fused_rows_per_cta(row_threads: int, rows: int) -> int:
    """Rows of a row CTA of the fused backward form at `rows` rows (layout.cuh fused_rows_per_cta):
    rows_per_cta, but bwd_rows_per_cta from FUSED_PAIR_MIN_ROWS rows (its dx bits are the row's)."""
    return bwd_rows_per_cta(row_threads) if rows >= FUSED_PAIR_MIN_ROWS else rows_per_cta(row_threads)


FUSED_GROUP_MIN_ROWS = 320  # layout.cuh, kFusedGroupMinRows


def fused_group_rows(hidden: int, residual: bool, rows: int) -> int:
    """Rows a row group of the fused backward form's row CTAs takes at once at `rows` rows (layout.cuh
    fused_group_rows: from FUSED_GROUP_MIN_ROWS rows, else one; the widths it names are qualified, so
    always their own program's). No bit depends on it."""
    if rows < FUSED_GROUP_MIN_ROWS:
        return 1
    return 4 if hidden == 1536 else 2 if hidden == 5120 and not residual else 1


def bwd_pairs_rows(hidden: int) -> bool:
    """Whether the backward CTA of width `hidden` holds more rows than rows_per_cta (two rows of
    CTA_THREADS threads: H 4096), which the dw partition follows (cake_jit.dw_class_windows)."""
    threads = row_layout(hidden)[0]
    return bwd_rows_per_cta(threads) > rows_per_cta(threads)


def bwd_row_groups(hidden: int) -> int:
    """Row groups of a full backward CTA of width `hidden` (bwd_rows_per_cta of row_layout's
    threads): the block of a strided dw chunk (args.cuh ChunkOrder), part of dw's bits."""
    return bwd_rows_per_cta(row_layout(hidden)[0])


def strided_fits(hidden: int, chunk_rows: int) -> bool:
    """Whether chunks of `chunk_rows` rows can be strided: each holds a full CTA's row groups, so no
    form cuts a CTA's groups (binding.cuh checks the same)."""
    return chunk_rows >= bwd_row_groups(hidden)


def ring_row_depth(hidden: int, residual: bool = False) -> int:
    """The backward ring engine's rows per row group per item for the plain or the residual rows
    (backward_ring.cuh, bwd_row_depth)."""
    if hidden >= 6144 or (hidden >= 5120 and residual):
        return 2
    if hidden >= 5120:
        return 3
    return 2 if hidden >= 4096 or bwd_row_groups(hidden) * 4 > 32 else 4


ONE_ROW_MAX_HIDDEN = 1536  # backward_fused.cuh, kOneRowMaxHidden: one row of up to this width runs one CTA
FUSED_TILE_COLS = 64  # backward_fused.cuh, kTileCols: dw columns per tile CTA of the fused form (32 lanes x 2)
# backward_fused.cuh's split-tile rule (kSplitMinRows, kSplitTileCtas; args.cuh kMaxTileCluster)
FUSED_SPLIT_MIN_ROWS = 128
FUSED_SPLIT_TILE_CTAS = 96
MAX_TILE_CLUSTER = 8


def fused_tile_cluster(rows: int, hidden: int) -> int:
    """CTAs per dw tile of the fused form at a qualified width (backward_fused.cuh, fused_tile_cluster):
    the most, up to MAX_TILE_CLUSTER, that leave each CTA >= 32 of the tile's rows and the tiles' CTAs
    <= FUSED_SPLIT_TILE_CTAS; none below FUSED_SPLIT_MIN_ROWS rows or at <= 4 rows per tile. The split
    changes no bit (the same sums in the same order), only which SMs run them."""
    tiles = ceil(hidden / FUSED_TILE_COLS)
    if rows < FUSED_SPLIT_MIN_ROWS or rows <= 4 * tiles:
        return 1
    c = 1
    while c < MAX_TILE_CLUSTER and 2 * c * 32 <= rows and 2 * c * tiles <= FUSED_SPLIT_TILE_CTAS:
        c *= 2
    return c


REDUCE_TILE, MAX_BLOCKS, MIN_BLOCK_CHUNKS = 32, 32, 8  # dw_reduce.cuh kReduceTile, kMaxBlocks, kMinBlockChunks
H200_SMS = 132  # the launch rules are shown for it where no GPU is present


def dw_block_len(chunks: int, one_row: bool) -> int:
    """Chunks per level-1 block of the dw combine (dw_reduce.cuh): ceil(C / 32), and at least
    min(C, MIN_BLOCK_CHUNKS) where the chunks hold several rows. Part of dw's canonical order."""
    least = 1 if one_row else min(chunks, MIN_BLOCK_CHUNKS)
    return max(ceil(chunks / MAX_BLOCKS), least)


def dw_reduce_tile(hidden: int, sms: int) -> int:
    """Columns per CTA of the pair form's reduce kernel (dw_reduce.cuh, dw_reduce_tile): the
    narrowest of 8 and 16 whose tiles fit one an SM, else 32. No bit depends on it."""
    for tile in (8, 16):
        if ceil(hidden / tile) <= sms:
            return tile
    return REDUCE_TILE


RING_SMEM_BUDGET = 232448 - 1024  # sm_90a / sm_100a per-CTA opt-in limit, less ring_stages' reserve


def ring_fits(hidden: int, residual: bool) -> bool:
    """Whether two ring slots fit one CTA (backward_ring.cuh, ring_stages); where they do not, the
    launcher runs the direct engine (same bits), and the routes say so."""
    rpc = bwd_row_groups(hidden)
    item = rpc * ring_row_depth(hidden, residual)
    stage = (3 if residual else 2) * item * hidden * 2 + ceil(item * 4 / 16) * 16
    return (rpc - 1) * hidden * 8 + 2 * (stage + 8) <= RING_SMEM_BUDGET


def launch_config(pass_: str, hidden: int, rows: int, form: str, chunk_rows: int, chunks: int,
                  engine: str = "direct", cta_rows: int = 0, sms: int = 0, wide: bool = False,
                  split_tiles: bool = False, pack: int = 1, loads: int = STREAM_LOADS,
                  order: int = CONTIGUOUS, residual: bool = False) -> str:
    """A one-line description of the launch a route makes (grid sizes are capped at run time by
    occupancy x SM count). `cta_rows`: the forward's rows per CTA on `sms` SMs (0: full CTAs);
    `wide`: whether the width's forward program has wide rows (the launcher picks them by occupancy);
    `split_tiles`: whether the program splits the fused form's dw tiles by fused_tile_cluster;
    `pack`: the forward's canonical threads per thread (packed rows, cake_jit.fwd_pack);
    `loads`: how the forward's narrow rows and the backward's direct engine read their rows
    (cake_jit.row_loads); `order`: which rows the backward's dw chunks hold (cake_jit.chunk_order);
    `residual`: whether the call adds the residual's gradient (the fused form's rows a row group)."""
    threads, vpt = fwd_row_layout(hidden) if pass_ == "fwd" else row_layout(hidden)
    rpc = (rows_per_cta(threads) if pass_ == "fwd" else fused_rows_per_cta(threads, rows) if form == "fused"
           else bwd_rows_per_cta(threads))
    if pass_ == "fwd":
        span = threads // pack
        cta_rows = cta_rows or rows_per_cta(span)
        wl = "weights in registers" if engine == "regs" else "weights re-read from L1"
        if loads == L1_LOADS:
            wl += "; rows read into L1 (cake_jit.row_loads)"
        on = f" on {sms} SMs" if sms else ""
        packed = "" if pack == 1 else f" ({pack} canonical threads each: packed rows, cake_jit.fwd_pack)"
        text = (f"forward_kernel: {span * cta_rows} threads/CTA = {cta_rows} row(s) x {span} threads{packed} x "
                f"{vpt * pack} vec16 (rows per CTA{on}: cake_jit.fwd_cta_rows); {wl}; grid ceil(rows/{cta_rows})")
        if wide:
            text += (f"; or, while every row is resident at once and at most 8 per SM (the launcher's "
                     f"occupancy query), wide rows: 1 row x {threads * vpt} threads x 1 vec16 per CTA, "
                     f"weights in registers")
        return text
    if form == "fused" and rows == 1 and hidden <= ONE_ROW_MAX_HIDDEN:
        return (f"backward_row_kernel, one CTA of {threads} threads x {vpt} vec16: the row's dx and dw "
                f"(g*x*rstd rounded once, the tiles' bits) with no tiles beside it")
    if form == "fused":
        groups = min(rpc, max(rows, 1))
        tiles = ceil(hidden / FUSED_TILE_COLS)
        csize = fused_tile_cluster(rows, hidden) if split_tiles else 1
        split = "" if csize == 1 else (f", each tile over a cluster of {csize} CTAs (level 1 spread over them, "
                                       "level 2 in the first)")
        k = fused_group_rows(hidden, residual, rows)
        shape = f"{groups} row(s)" if k == 1 else f"{groups} row group(s) of {k} rows"
        return (f"backward_fused_kernel, one launch: {tiles * csize} dw tile CTAs ({FUSED_TILE_COLS} columns a tile, "
                f"the reduce's order from g, x, rstd{split}) first; {ceil(max(rows, 1) / (groups * k))} row CTA(s) of "
                f"{shape} x {threads} threads x {vpt} vec16 (dx); {chunks} one-row chunk(s)")
    if engine == "ring":
        plain, res = rpc * ring_row_depth(hidden), rpc * ring_row_depth(hidden, True)
        items = f"{plain}-row items" + ("" if plain == res else f", {res} with the residual,")
        kernel = f"backward_ring_kernel ({items} through a shared-memory ring of bulk copies)"
    else:
        kernel = "backward_direct_kernel (rows a row ahead in registers" + (
            "; rows read into L1, cake_jit.row_loads)" if loads == L1_LOADS else ")")
        if form != "single":  # no row groups past a chunk's rows (the single form's tail keeps them)
            rpc = min(rpc, max(chunk_rows, 1))
    cta = f"{threads * rpc} threads/CTA = {rpc} row(s) x {threads} threads x {vpt} vec16"
    part = f"dw partition {chunks} {'strided' if order == STRIDED else 'contiguous'} chunk(s) of {chunk_rows} row(s)"
    if form == "single":
        return f"{kernel}: {cta}; grid min({chunks}, resident CTAs); {part}; last CTA reduces"
    tile = dw_reduce_tile(hidden, sms or H200_SMS)
    return (f"{kernel}: {cta}; grid min({chunks}, resident CTAs); {part}; "
            f"dw_reduce_kernel {ceil(hidden / tile)} CTAs of {tile} columns, level-1 blocks of "
            f"{dw_block_len(chunks, chunk_rows == 1)} chunk(s)")
