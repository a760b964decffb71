"""Route registry, windows, the dw partition, route inspection and the layout mirror (CPU)."""

from __future__ import annotations

import subprocess
import sys
from math import ceil
from pathlib import Path

import pytest

import cake_rmsnorm_det as crd
from cake_rmsnorm_det import cake_jit, cake_windows, layout, routes
from cake_rmsnorm_det.programs import SUPPORTED_ARCHS, include_dir, program_by_key

ROOT = Path(__file__).resolve().parent.parent
WIDTHS = cake_jit.QUALIFIED_WIDTHS + (8, 24, 264, 1000, 3072, 7168, 8192, 16376, 16384)


@pytest.mark.parametrize("arch", sorted(SUPPORTED_ARCHS))
def test_windows_cover_all_rows_without_gap_or_overlap(arch):
    for pass_ in cake_jit.PASSES:
        for h in WIDTHS:
            for w in cake_jit.WEIGHTS:
                for res in (False, True):
                    key = cake_jit.check_key(arch, pass_, h, w, res)
                    ws = cake_jit.windows(key)
                    assert ws[0].lo == 0 and ws[-1].hi is None, key
                    for a, b in zip(ws, ws[1:]):
                        assert a.hi == b.lo and a.hi is not None and a.lo < a.hi, key
                    for win in ws:
                        program_by_key(win.program_key)  # exists in build.json
                        assert win.evidence
                    for rows in (1, 2, 3, 7, 64, 4096, 65536, 10**7):
                        hits = [x for x in ws if x.contains(rows)]
                        assert len(hits) == 1, (key, rows)


@pytest.mark.parametrize("arch", sorted(SUPPORTED_ARCHS))
def test_engine_windows(arch):
    """Each window names an engine of its pass; widths with an engine edge switch exactly there,
    once, and an edge on sm_90a is measured on both sides while other archs say they are not."""
    from cake_rmsnorm_det import cake_windows as cw
    for pass_, wname in ((p, w) for p in cake_jit.PASSES for w in cake_jit.WEIGHTS):
        first, second = cake_jit.ENGINES[pass_]
        for h in WIDTHS:
            key = cake_jit.check_key(arch, pass_, h, wname, False)
            ws = cake_jit.windows(key)
            engines = [w.engine for w in ws]
            assert set(engines) <= {first, second}, (key, engines)
            hit = cw.engine_edge(arch, pass_, h, wname)
            if hit is None:
                expect = "l1" if pass_ == "fwd" and h not in cake_jit.QUALIFIED_WIDTHS else first
                assert set(engines) == {expect}, (key, engines)
                continue
            edge, ev = hit
            assert ev.measured == (arch == "sm_90a"), key
            assert cake_jit.route(arch, pass_, h, wname, False, edge).window.engine == first
            assert cake_jit.route(arch, pass_, h, wname, False, edge + 1).window.engine == second
            switches = sum(a.engine != b.engine for a, b in zip(ws, ws[1:]))
            assert switches == 1 and engines[0] == first and engines[-1] == second, (key, engines)


def test_ring_that_does_not_fit_is_not_routed(monkeypatch):
    """Every qualified width's ring fits a CTA, with and without the residual (H 5120 since its ring
    items hold two rows: two 60 KB slots with the residual); where two slots would not fit, the
    routes run the direct engine throughout (as the launcher would)."""
    for h in cake_jit.QUALIFIED_WIDTHS:
        assert layout.ring_fits(h, False) and layout.ring_fits(h, True), h
    res = cake_jit.windows(cake_jit.check_key("sm_90a", "bwd", 5120, "bf16", True))
    assert res[-1].engine == "ring"
    # a width whose ring fits only without the residual
    monkeypatch.setattr(layout, "ring_fits", lambda hidden, residual: not residual)
    res = cake_jit.windows(cake_jit.check_key("sm_90a", "bwd", 5120, "bf16", True))
    plain = cake_jit.windows(cake_jit.check_key("sm_90a", "bwd", 5120, "bf16", False))
    assert {w.engine for w in res} == {"direct"} and plain[-1].engine == "ring"


def test_qualified_widths_route_to_their_own_programs():
    for h in cake_jit.QUALIFIED_WIDTHS:
        r = cake_jit.route("sm_90a", "bwd", h, "bf16", False, 65536)
        assert r.program.hidden == h and r.window.form == "pair"
    r = cake_jit.route("sm_90a", "fwd", 7168, "fp32", True, 10)
    assert r.program.key == "fwd_generic" and r.program.hidden is None


def test_fused_window_is_one_row_chunks():
    """The fused form runs only partitions of one-row chunks (its tiles sum rows, not chunks), from
    the first row up to its edge, and every route has it."""
    for h in WIDTHS:
        for arch in ("sm_90a", "sm_100a"):
            key = cake_jit.check_key(arch, "bwd", h, "bf16", False)
            ws = cake_jit.windows(key)
            edge = cake_jit.fused_edge(arch, h)[0]
            assert ws[0].form == "fused" and ws[0].lo == 0 and ws[0].hi == edge, (arch, h)
            assert 1 <= edge <= cake_jit.one_row_chunks(h), (arch, h, edge)
            for rows in list(range(1, 300)) + [1000, 4096]:
                r = cake_jit.route(arch, "bwd", h, "bf16", False, rows)
                assert (r.window.form == "fused") == (rows <= edge), (arch, h, rows)
                if r.window.form == "fused":
                    assert r.chunk_rows == 1 and r.chunks == rows, (arch, h, rows)


@pytest.mark.parametrize("hidden", WIDTHS)
def test_dw_partition_covers_rows_exactly(hidden):
    for rows in list(range(0, 600)) + [1023, 1024, 1025, 4097, 65535, 65536, 65537, 400000, 2**31 // hidden + 5]:
        cr, n = cake_jit.dw_partition(rows, hidden)
        if rows == 0:
            assert n == 0
            continue
        assert cr >= 1 and n >= 1
        assert n * cr >= rows and (n - 1) * cr < rows, (rows, cr, n)
        assert cake_jit.dw_partition(rows, hidden) == (cr, n)  # a pure function of (rows, H)
        assert cake_jit.workspace_bytes(rows, hidden) >= 256 + n * hidden * 8
        assert n <= max(cake_jit.CHUNK_TARGET, 1)


@pytest.mark.parametrize("hidden", WIDTHS)
def test_workspace_serves_every_smaller_row_count(hidden):
    """workspace(tokens, H) is documented as reusable for every row count up to tokens: its size
    bounds every smaller partition's partials, though chunk counts are not monotone in the rows."""
    most = 0
    for rows in range(0, 1500):
        most = max(most, cake_jit.dw_partition(rows, hidden)[1])
        assert cake_jit.workspace_bytes(rows, hidden) >= cake_jit.workspace_bytes_for(most, hidden), rows
        assert cake_jit.workspace_bytes(rows, hidden) <= cake_jit.workspace_bytes_for(cake_jit.CHUNK_TARGET, hidden)


@pytest.mark.parametrize("hidden", WIDTHS)
def test_dw_partition_follows_the_measured_chunk_counts(hidden):
    """The chunks are as many as cake_windows.DW_CHUNKS allows and no more: one-row chunks while
    rows fit that count, equal chunks (the last may be shorter) above."""
    for rows in list(range(1, 1200)) + [4095, 4096, 4097, 65536]:
        cr, n = cake_jit.dw_partition(rows, hidden)
        cap = cake_jit.dw_max_chunks(rows, hidden)
        assert n <= cap, (rows, cr, n, cap)
        if rows <= cap:
            assert cr == 1, (rows, cr, cap)
        else:
            assert cr == -(-rows // cap) and (cr - 1) * cap < rows, (rows, cr, cap)
    last = cake_jit.one_row_chunks(hidden)
    assert cake_jit.dw_partition(last, hidden) == (1, last) and cake_jit.dw_partition(last + 1, hidden)[0] >= 2


@pytest.mark.parametrize("hidden", WIDTHS)
def test_ring_windows_take_one_chunk_a_ring_cta(hidden):
    """Past a width's backward ring edge the partition is DW_RING_CHUNKS chunks, on every key of the
    width (both weights, with and without the residual: the partition cannot tell them apart, so
    each must run the ring there); below it, and at widths without a ring, the class's counts (which
    end on DW_PAIRED_ROWS_CHUNKS where the backward CTA holds two 512-thread rows)."""
    edge = cake_jit.ring_edge(hidden)
    if edge is None:
        paired = layout.bwd_pairs_rows(hidden)
        assert paired == (hidden == 4096)
        want = cake_windows.DW_PAIRED_ROWS_CHUNKS if paired else cake_windows.DW_CHUNK_TARGET
        assert cake_jit.dw_max_chunks(65536, hidden) == want
        assert cake_jit.dw_max_chunks(2048, hidden) < cake_windows.DW_RING_CHUNKS
        return
    assert cake_jit.dw_max_chunks(edge + 1, hidden) == cake_windows.DW_RING_CHUNKS
    assert cake_jit.dw_max_chunks(edge, hidden) != cake_windows.DW_RING_CHUNKS
    n = cake_windows.DW_RING_CHUNKS
    assert cake_jit.dw_partition(65536, hidden) == (-(-65536 // n), n)
    for arch in SUPPORTED_ARCHS:
        for weight in ("bf16", "fp32"):
            for residual in (False, True):
                for rows in (edge + 1, 2 * edge, 65536):
                    r = cake_jit.route(arch, "bwd", hidden, weight, residual, rows)
                    assert r.window.engine == "ring", (arch, weight, residual, rows)
                    assert r.chunks <= cake_windows.DW_RING_CHUNKS, (arch, weight, residual, rows)
                assert cake_jit.route(arch, "bwd", hidden, weight, residual, edge).window.engine == "direct"


def test_warp_rows_chunks_hold_the_cta_s_row_groups():
    """Rows of one warp (H <= 256: 16 row groups a CTA) lost on multi-row chunks of fewer rows than
    the CTA's groups but 4 (cake_windows.DW_CHUNKS, "warp"): past the 4-row window every chunk but
    the last holds at least 16 rows, and the count grows to 128 once 128 chunks hold 16."""
    for hidden in (8, 128, 256):
        assert cake_jit.dw_class_windows(hidden) == cake_windows.DW_CHUNKS["warp"]
        four_row_end = cake_windows.DW_CHUNKS["warp"][0][0]
        for rows in range(four_row_end + 1, 4097):
            cr, n = cake_jit.dw_partition(rows, hidden)
            assert cr >= cake_windows.DW_WARP_ROWS_PER_CTA, (hidden, rows, cr, n)
        assert cake_jit.dw_partition(2048, hidden) == (16, 128)
        assert cake_jit.dw_partition(2047, hidden)[1] <= 64


def test_one_row_reach_is_the_fused_form_s():
    """Widths whose one-row chunks reach past DW_CHUNKS' first window are exact, measured widths,
    and their fused window runs to that reach (the pair form on one-row chunks past 64 rows was
    slower than on DW_CHUNKS); generic widths take the rule's reach."""
    for h, reach in cake_windows.DW_ONE_ROW_ROWS.items():
        assert h in cake_jit.QUALIFIED_WIDTHS and reach > 64
        assert cake_jit.one_row_chunks(h) == reach
        edge, ev = cake_jit.fused_edge("sm_90a", h)
        assert edge == reach and ev.measured
        assert cake_jit.route("sm_90a", "bwd", h, "bf16", False, reach).window.form == "fused"
        assert cake_jit.route("sm_90a", "bwd", h, "bf16", False, reach + 1).window.form == "pair"
    for h in (3000, 8192, 16384):  # generic widths: the rule's reach, all of it the fused window
        assert cake_jit.one_row_chunks(h) == cake_windows.DW_RULE_ONE_ROW_ROWS
        assert cake_jit.fused_edge("sm_90a", h)[0] == cake_windows.FUSED_RULE_ROWS == cake_windows.DW_RULE_ONE_ROW_ROWS


def test_no_single_form_on_sm90a_qualified_routes():
    for h in cake_jit.QUALIFIED_WIDTHS:
        for w in ("bf16", "fp32"):
            ws = cake_jit.windows(cake_jit.check_key("sm_90a", "bwd", h, w, False))
            assert [x.form for x in ws if x.form == "single"] == [], (h, w)
            assert ws[0].form == "fused" and ws[0].hi == cake_jit.fused_edge("sm_90a", h)[0]


def test_bad_keys_raise_with_the_rule():
    with pytest.raises(ValueError, match="sm_90a"):
        cake_jit.check_key("sm_80", "bwd", 4096, "bf16", False)
    with pytest.raises(ValueError, match="multiple of 8"):
        cake_jit.check_key("sm_90a", "bwd", 4100, "bf16", False)
    with pytest.raises(ValueError, match="multiple of 8"):
        cake_jit.check_key("sm_90a", "bwd", 16392, "bf16", False)
    with pytest.raises(ValueError):
        cake_jit.check_key("sm_90a", "sideways", 4096, "bf16", False)


def test_explain_route_returns_a_typed_record():
    info = crd.explain_route("bwd", hidden=4096, tokens=65536, weight_dtype="bf16", arch="sm_90a")
    assert isinstance(info, routes.RouteInfo)
    assert info.form == "pair" and info.program == program_by_key("bwd_h4096").name
    assert "dw_reduce_kernel" in info.launch and "132 strided chunk" in info.launch
    assert "1024 threads/CTA = 2 row(s) x 512 threads" in info.launch
    assert isinstance(info.built, bool)
    q = crd.explain_route("bwd", hidden=256, tokens=16384, heads=24, weight_dtype="fp32", arch="sm_90a")
    assert q.rows == 16384 * 24
    assert "key" in str(info) and "evidence" in str(info)


@pytest.mark.parametrize("hidden", cake_jit.QUALIFIED_WIDTHS)
def test_routes_cli_answers_for_every_qualified_key(hidden, capsys):
    for pass_ in ("fwd", "bwd"):
        for w in ("bf16", "fp32"):
            for res in (False, True):
                argv = ["--arch", "sm_90a", "--hidden", str(hidden), "--tokens", "4097", "--weight", w,
                        "--pass", pass_] + (["--residual"] if res else [])
                assert routes._main(argv) == 0
                out = capsys.readouterr().out
                assert f"H={hidden}" in out and "program" in out and "cake_rmsnorm_det_" in out


def test_routes_cli_all_table():
    r = subprocess.run([sys.executable, "-m", "cake_rmsnorm_det.routes", "--arch", "sm_90a", "--all"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("(sm_90a")]
    n_windows = sum(len(cake_jit.windows(k)) for k in cake_jit.all_keys("sm_90a"))
    assert len(lines) == n_windows


_MIRROR = r"""
#include <cstdio>
#include "cake/backward_fused.cuh"
#include "cake/backward_ring.cuh"
#include "cake/dw_reduce.cuh"
#include "cake/forward.cuh"
#include "cake/layout.cuh"
template <int H>
void packs() {
  std::printf("pack %d %d %d %d\n", H, int(cake::has_pack<H>()), cake::kFwdPack, cake::kFwdMaxPackSlices);
}
int main() {
  std::printf("%d %d %d %d %d %d\n", cake::kOneRowMaxHidden, cake::kTileCols, cake::kStreamLoads, cake::kL1Loads,
              cake::kContiguous, cake::kStrided);
  packs<8>(); packs<200>(); packs<256>(); packs<512>(); packs<768>(); packs<1024>(); packs<1536>();
  packs<2048>(); packs<4096>(); packs<5120>(); packs<6144>();
  for (int h : {256, 512, 1536, 2048, 4096, 5120, 6144})
    std::printf("depth %d %d %d\n", h, cake::bwd_row_depth(h, false), cake::bwd_row_depth(h, true));
  const int cluster_rows[] = {1, 64, 127, 128, 129, 200, 256, 300, 383, 384, 512, 640, 896, 1024, 5000};
  const int cluster_hs[] = {256, 512, 1536, 2048, 4096, 6144};
  for (int h : cluster_hs)
    for (int r : cluster_rows)
      std::printf("cluster %d %d %d %d\n", r, h, cake::fused_tile_cluster(r, cake::fused_tiles(h)),
                  cake::fused_rows_per_cta(cake::row_layout(h).threads, r));
  for (int h : {0, 256, 512, 1536, 2048, 4096, 5120, 6144})
    for (bool res : {false, true})
      for (long long r : {1LL, 319LL, 320LL, 5000LL})
        std::printf("group %d %d %lld %d %lld\n", h, int(res), r, cake::fused_group_rows(h, res, r),
                    (long long)cake::kFusedGroupMinRows);
  const long long chunks[] = {1, 3, 7, 8, 9, 16, 31, 32, 33, 64, 100, 128, 255, 256, 257, 264, 512, 896, 1024};
  for (long long c : chunks)
    std::printf("block %lld %lld %lld\n", c, (long long)cake::dw_block_len(c, true), (long long)cake::dw_block_len(c, false));
  const int tile_hs[] = {8, 256, 512, 1000, 1024, 1536, 2048, 2112, 4096, 5120, 16384};
  for (int h : tile_hs)
    for (int sms : {8, 132, 148})
      std::printf("tile %d %d %d\n", h, sms, cake::dw_reduce_tile(h, sms));
  const int hs[] = {8, 16, 24, 200, 256, 264, 512, 1000, 1536, 2048, 3072, 4096, 5120, 6144, 7168, 8192, 16376, 16384};
  for (int h : hs) {
    auto b = cake::row_layout(h);
    auto f = cake::fwd_row_layout(h);
    std::printf("%d %d %d %d %d %d %d %d\n", h, b.threads, b.vpt, f.threads, f.vpt, cake::rows_per_cta(b.threads),
                cake::bwd_rows_per_cta(b.threads), cake::bwd_cta_threads(h));
  }
}
"""


def test_python_layout_mirrors_the_header(tmp_path):
    from cake_rmsnorm_det.programs import find_nvcc

    src = tmp_path / "mirror.cu"
    src.write_text(_MIRROR)
    exe = tmp_path / "mirror"
    subprocess.run([str(find_nvcc()), "-std=c++17", f"-I{include_dir()}", str(src), "-o", str(exe)],
                   check=True, capture_output=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    first, *lines = out.strip().splitlines()
    assert tuple(map(int, first.split())) == (layout.ONE_ROW_MAX_HIDDEN, layout.FUSED_TILE_COLS,
                                              layout.STREAM_LOADS, layout.L1_LOADS,
                                              layout.CONTIGUOUS, layout.STRIDED)
    blocks = [tuple(map(int, line.split()[1:])) for line in lines if line.startswith("block ")]
    assert blocks and any(one != multi for _, one, multi in blocks)
    for c, one, multi in blocks:
        assert (layout.dw_block_len(c, True), layout.dw_block_len(c, False)) == (one, multi), c
        assert ceil(c / multi) <= layout.MAX_BLOCKS and ceil(c / one) <= layout.MAX_BLOCKS, c
    tiles = [tuple(map(int, line.split()[1:])) for line in lines if line.startswith("tile ")]
    assert {t for _, _, t in tiles} == {8, 16, 32}
    for h, sms, t in tiles:
        assert layout.dw_reduce_tile(h, sms) == t, (h, sms)
    clusters = [line.split()[1:] for line in lines if line.startswith("cluster ")]
    packs = [tuple(map(int, line.split()[1:])) for line in lines if line.startswith("pack ")]
    depths = [tuple(map(int, line.split()[1:])) for line in lines if line.startswith("depth ")]
    groups = [tuple(map(int, line.split()[1:])) for line in lines if line.startswith("group ")]
    lines = [line for line in lines if not line.startswith(("cluster ", "pack ", "block ", "tile ", "depth ", "group "))]
    assert len(groups) == 64 and any(k > 1 for _, _, _, k, _ in groups)
    for h, res, r, k, least in groups:  # the fused form's rows a row group (layout.launch_config)
        assert (layout.fused_group_rows(h, bool(res), r), layout.FUSED_GROUP_MIN_ROWS) == (k, least), (h, res, r)
    assert len(depths) == 7 and any(plain != res for _, plain, res in depths)
    for h, plain, res in depths:  # the ring's row depths (layout.ring_fits sizes its slots by them)
        assert (layout.ring_row_depth(h), layout.ring_row_depth(h, True)) == (plain, res), h
    assert len(packs) == 11 and any(has for _, has, _, _ in packs)
    for h, has, pack, slices in packs:
        assert layout.fwd_has_pack(h) == bool(has) and (pack, slices) == (layout.FWD_PACK, layout.FWD_MAX_PACK_SLICES), h
    assert clusters and any(int(c) > 1 for _, _, c, _ in clusters)
    for r, h, c, frpc in map(lambda v: map(int, v), clusters):
        assert layout.fused_tile_cluster(r, h) == c, (r, h)
        threads = layout.row_layout(h)[0]
        assert layout.fused_rows_per_cta(threads, r) == frpc, (r, h)  # the fused form's row CTAs
        assert frpc == (layout.bwd_rows_per_cta(threads) if r >= layout.FUSED_PAIR_MIN_ROWS
                        else layout.rows_per_cta(threads)), (r, h)
    assert any(int(c[3]) == 2 and int(c[1]) == 4096 for c in clusters)  # H 4096's two-row row CTAs
    for line in lines:
        h, bt, bv, ft, fv, rpc, bwd_rpc, bwd_threads = map(int, line.split())
        assert layout.row_layout(h) == (bt, bv), h
        assert layout.fwd_row_layout(h) == (ft, fv), h
        assert layout.rows_per_cta(bt) == rpc, h
        assert layout.bwd_row_groups(h) == bwd_rpc and bwd_rpc * bt == bwd_threads <= 1024, h
        assert bwd_rpc == (2 if bt == layout.CTA_THREADS else rpc), h  # two 512-thread rows (H 4096) a CTA
        assert bt * bv * 8 >= h and ft * fv * 8 >= h and bt % 32 == 0 and ft % 32 == 0
        assert bv <= 2 and fv <= 4


@pytest.mark.parametrize("hidden", cake_jit.QUALIFIED_WIDTHS + (1000,))
def test_forward_cta_rows_rule(hidden):
    """Rows per CTA: within the layout's CTA; the measured step's size where one holds (else the
    rule: full CTAs at large token counts), and the rule never puts more rows on the busiest SM than
    full CTAs do."""
    rpc = layout.rows_per_cta(layout.fwd_row_layout(hidden)[0])
    for sms in (8, 132, 148):
        for rows in (1, 2, 15, 16, 100, 257, 1024, 2048, 5000, 16384, 65536, 10**6):
            cta_rows = cake_jit.fwd_cta_rows(hidden, rows, sms)
            assert 1 <= cta_rows <= rpc
            rule = cake_jit.fwd_rule_cta_rows(rpc, rows, sms)
            assert ceil(ceil(rows / rule) / sms) * rule <= ceil(ceil(rows / rpc) / sms) * rpc
            if rows > cake_jit.FWD_SPREAD_WAVES * sms * rpc:
                assert rule == rpc
            step = cake_windows.fwd_cta_step("sm_90a", hidden, rows)
            assert cta_rows == (step.rows if step and step.rows else rule)
    assert cake_jit.fwd_cta_rows(hidden, 1, 132) == 1  # one row: a one-row CTA


def test_forward_measured_cta_sizes():
    """Every measured CTA size fits its width's CTA and says how it was measured (the GPU named);
    steps rise in row count and each holds from its start to the next one's; a 0-row step is the
    rule's CTAs again; Blackwell archs take the sm_90a steps marked unmeasured; wide rows, packed
    rows and unlisted widths keep the rule; explain_route names the step that holds."""
    sms = 132
    for (arch, hidden), steps in cake_windows.MEASURED_FWD_CTA_ROWS.items():
        rpc = layout.rows_per_cta(layout.fwd_row_layout(hidden)[0])
        assert arch == "sm_90a" and steps
        starts = [s.start for s in steps]
        assert starts == sorted(set(starts)) and starts[0] >= 1
        assert cake_windows.fwd_cta_step(arch, hidden, starts[0] - 1) is None
        for i, step in enumerate(steps):
            assert 0 <= step.rows < rpc and step.evidence.measured and step.evidence.gpu
            assert "bench/fwd_launch.py" in step.evidence.line() and step.evidence.gpu in step.evidence.line()
            end = steps[i + 1].start - 1 if i + 1 < len(steps) else 10**6
            for t in {step.start, step.start + 1, end}:
                assert cake_windows.fwd_cta_step(arch, hidden, t) is step
                want = step.rows or cake_jit.fwd_rule_cta_rows(rpc, t, sms)
                assert cake_jit.fwd_cta_rows(hidden, t, sms) == want
                assert cake_jit.fwd_cta_rows(hidden, t, sms, True) == cake_jit.fwd_rule_cta_rows(
                    layout.rows_per_cta(layout.fwd_row_span(hidden, True)), t, sms)  # wide rows: the rule
            info = routes.explain_route("fwd", hidden, step.start, arch="sm_90a")
            assert f"from {step.start} rows: measured on {step.evidence.gpu}" in info.evidence
        for bw in ("sm_100a", "sm_103a"):
            got = cake_windows.fwd_measured_cta_rows(bw, hidden)
            assert [(s.rows, s.start) for s in got] == [(s.rows, s.start) for s in steps]
            assert all(not s.evidence.measured and "never measured" in s.evidence.line() for s in got)
            if steps[0].rows:
                assert cake_jit.fwd_cta_rows(hidden, steps[0].start, 148, arch=bw) == steps[0].rows
    for hidden in (256, 1000):
        assert cake_windows.fwd_measured_cta_rows("sm_90a", hidden) is None
        assert cake_jit.fwd_cta_rows(hidden, 10**6, sms) == layout.rows_per_cta(layout.fwd_row_layout(hidden)[0])
        assert "narrow rows:" not in routes.explain_route("fwd", hidden, 4096, arch="sm_90a").evidence


def test_forward_packed_rows_rule():
    """Packed rows run from their measured row count on, only where the program builds them (a
    qualified width), with CTAs of packed rows; Blackwell archs take the sm_90a edge marked
    unmeasured, and explain_route names the packed launch and its evidence."""
    assert cake_windows.MEASURED_FWD_PACKS, "H 256's packed rows are measured"
    for (arch, hidden), ((pack, start), ev) in cake_windows.MEASURED_FWD_PACKS.items():
        assert arch == "sm_90a" and pack == layout.FWD_PACK and layout.fwd_has_pack(hidden)
        assert hidden in cake_jit.QUALIFIED_WIDTHS and ev.measured and "bench/fwd_launch.py" in ev.line()
        assert cake_jit.fwd_pack(hidden, start - 1) == 1 and cake_jit.fwd_pack(hidden, start) == pack
        assert cake_jit.fwd_pack(hidden, 10**7) == pack
        prpc = layout.rows_per_cta(layout.fwd_row_span(hidden, False, pack))
        assert prpc == 2 * layout.rows_per_cta(layout.fwd_row_span(hidden, False))
        assert cake_jit.fwd_cta_rows(hidden, 10**6, 132, pack=pack) == prpc
        for bw in ("sm_100a", "sm_103a"):
            got = cake_windows.fwd_measured_pack(bw, hidden)
            assert got[0] == (pack, start) and not got[1].measured and "never measured" in got[1].line()
        info = routes.explain_route("fwd", hidden, start, arch="sm_90a")
        assert "packed rows" in info.launch and f"packed rows from {start} rows" in info.evidence
        assert "packed rows" not in routes.explain_route("fwd", hidden, start - 1, arch="sm_90a").launch
    for hidden in cake_jit.QUALIFIED_WIDTHS + (1000,):
        if cake_windows.fwd_measured_pack("sm_90a", hidden) is None:
            assert cake_jit.fwd_pack(hidden, 10**7) == 1


def test_l1_loads_rule():
    """Rows read into L1 from their measured row count on, at qualified widths only and never the
    forward's packed or wide rows; Blackwell archs take the sm_90a edge marked unmeasured;
    explain_route says so and why, for that pass only."""
    L1, STREAM = layout.L1_LOADS, layout.STREAM_LOADS
    assert {p for _, p, _ in cake_windows.MEASURED_L1_LOADS} == {"fwd", "bwd"}, "both passes measured"
    for (arch, pass_, hidden), (start, ev) in cake_windows.MEASURED_L1_LOADS.items():
        assert arch == "sm_90a" and hidden in cake_jit.QUALIFIED_WIDTHS and ev.measured and start >= 1
        assert "bench/variants.py" in ev.line()
        assert cake_jit.row_loads(pass_, hidden, start - 1) == STREAM and cake_jit.row_loads(pass_, hidden, start) == L1
        assert cake_jit.row_loads(pass_, hidden, 10**7) == L1
        assert cake_jit.row_loads(pass_, hidden, 10**7, wide=True) == STREAM
        assert cake_jit.row_loads(pass_, hidden, 10**7, pack=layout.FWD_PACK) == STREAM
        for bw in ("sm_100a", "sm_103a"):
            got = cake_windows.measured_l1_loads(bw, pass_, hidden)
            assert got[0] == start and not got[1].measured and "never measured" in got[1].line()
            assert cake_jit.row_loads(pass_, hidden, start, bw) == L1
        info = routes.explain_route(pass_, hidden, start, arch="sm_90a")
        assert "rows read into L1" in info.launch and f"rows read into L1 from {start} rows" in info.evidence
        assert "rows read into L1" not in routes.explain_route(pass_, hidden, start - 1, arch="sm_90a").launch
        if cake_windows.measured_l1_loads("sm_90a", "fwd" if pass_ == "bwd" else "bwd", hidden) is None:
            other = "fwd" if pass_ == "bwd" else "bwd"
            assert "rows read into L1" not in routes.explain_route(other, hidden, start, arch="sm_90a").evidence
    for pass_ in ("fwd", "bwd"):
        for hidden in cake_jit.QUALIFIED_WIDTHS + (1000, 8192):
            if cake_windows.measured_l1_loads("sm_90a", pass_, hidden) is None:
                assert cake_jit.row_loads(pass_, hidden, 10**7) == STREAM


def _strided_chunk_rows(rows: int, hidden: int, chunk_rows: int, chunks: int) -> list[list[int]]:
    """The rows each strided dw chunk sums, in walk order, as args.cuh ChunkOrder / ChunkWalk define them:
    block j of chunk c is the b rows from (j * chunks + c) * b, b a full CTA's row groups."""
    b = layout.bwd_row_groups(hidden)
    steps = -(-chunk_rows // b)
    return [[r for j in range(steps) for g in range(b) if (r := (j * chunks + c) * b + g) < rows]
            for c in range(chunks)]


def test_strided_chunks_rule():
    """Strided dw chunks from the row count measured for the window's engine on (the direct engine's
    table, the ring's), where a chunk holds a full CTA's row groups; contiguous elsewhere (generic
    widths, unmeasured engines, fewer rows); Blackwell archs take the sm_90a edges marked unmeasured;
    explain_route says which and why."""
    C, S = layout.CONTIGUOUS, layout.STRIDED
    tables = {"direct": (cake_windows.MEASURED_STRIDED_CHUNKS, "bench/variants.py"),
              "ring": (cake_windows.MEASURED_STRIDED_RING, "bench/split.py")}
    for engine, (table, tool) in tables.items():
        assert table, f"measured somewhere ({engine})"
        for (arch, hidden), (start, ev) in table.items():
            assert arch == "sm_90a" and hidden in cake_jit.QUALIFIED_WIDTHS and ev.measured
            assert tool in ev.line()
            assert cake_windows.measured_strided_chunks(arch, hidden, engine)[0] == start
            for bw in ("sm_100a", "sm_103a"):
                got = cake_windows.measured_strided_chunks(bw, hidden, engine)
                assert got[0] == start and not got[1].measured and "never measured" in got[1].line()
    assert cake_jit.route("sm_90a", "bwd", 1536, "bf16", False, 65536).window.engine == "ring"
    for hidden in cake_jit.QUALIFIED_WIDTHS + (1000, 8192):
        edges = sorted({0, *(e[0] for t, _ in tables.values() for (a, h), e in t.items() if h == hidden)})
        for rows in sorted({1, 100, 1000, 5000, 70000, 10**6, *(e + d for e in edges for d in (-1, 0, 1) if e + d > 0)}):
            r = cake_jit.route("sm_90a", "bwd", hidden, "bf16", False, rows)
            hit = cake_windows.measured_strided_chunks("sm_90a", hidden, r.window.engine)
            groups = layout.bwd_row_groups(hidden)
            want = S if hit is not None and rows >= hit[0] and r.chunk_rows >= groups else C
            assert r.chunk_order == want, (hidden, rows)
            for wname, res in (("fp32", False), ("bf16", True)):  # the partition is the key's, not the weight's
                assert cake_jit.route("sm_90a", "bwd", hidden, wname, res, rows).chunk_order == want
            assert cake_jit.route("sm_90a", "fwd", hidden, "bf16", False, rows).chunk_order == C
            if hidden in cake_jit.QUALIFIED_WIDTHS:
                info = routes.explain_route("bwd", hidden, rows, arch="sm_90a")
                assert ("strided chunk(s)" in info.launch) == (want == S)
                assert (f"strided dw chunks on the {r.window.engine} engine from" in info.evidence) == (want == S)
    for hidden, (start, _) in ((h, e) for (_, h), e in cake_windows.MEASURED_STRIDED_CHUNKS.items()):
        assert cake_jit.route("sm_90a", "bwd", hidden, "bf16", False, start).chunk_order == S, hidden


@pytest.mark.parametrize("hidden", [256, 512, 1536, 2048, 4096, 6144])
def test_strided_chunks_cover_rows_exactly(hidden):
    """Every row in exactly one strided chunk, each chunk at most ceil(chunk_rows / b) blocks of b rows."""
    start = cake_windows.measured_strided_chunks("sm_90a", hidden)[0]
    b = layout.bwd_row_groups(hidden)
    for rows in (start, start + 1, start + 997, 4 * start + 3):
        chunk_rows, chunks = cake_jit.dw_partition(rows, hidden)
        if chunk_rows < b:
            continue
        parts = _strided_chunk_rows(rows, hidden, chunk_rows, chunks)
        flat = [r for p in parts for r in p]
        assert sorted(flat) == list(range(rows)), (hidden, rows)
        assert max(len(p) for p in parts) <= -(-chunk_rows // b) * b


@pytest.mark.parametrize("hidden", cake_jit.QUALIFIED_WIDTHS + (1000,))
def test_forward_wide_rows_where_built(hidden):
    """Wide rows exist for the fixed widths whose narrow threads hold more than one slice and whose
    wide row fits one CTA; explain_route says so where they do, and their CTA sizes fit a wide row."""
    threads, vpt = layout.fwd_row_layout(hidden)
    has = cake_jit.fwd_has_wide(hidden)
    assert has == (hidden in cake_jit.QUALIFIED_WIDTHS and vpt > 1 and threads * vpt <= 1024)
    info = routes.explain_route("fwd", hidden, 16, arch="sm_90a")
    assert ("wide rows" in info.launch) == has
    for rows in (1, 16, 1000):
        assert 1 <= cake_jit.fwd_cta_rows(hidden, rows, 132, has) <= layout.rows_per_cta(layout.fwd_row_span(hidden, has))


def test_a_warm_route_touches_no_file(monkeypatch):
    """Every call routes itself: once its key has been routed, the lookup is memory only (resolving
    and stat-ing build.json's path on each call cost 70-90 us of host time a call)."""
    import os

    calls = [(arch, p, h, w, res) for arch in ("sm_90a", "sm_100a") for p in cake_jit.PASSES
             for h in (256, 4096, 7168) for w in cake_jit.WEIGHTS for res in (False, True)]
    for c in calls:
        cake_jit.route(*c, 1)

    def no_file(*args, **kwargs):
        raise AssertionError("a warm route touched the file system")

    for name in ("stat", "resolve", "exists", "read_text", "open"):
        monkeypatch.setattr(Path, name, no_file)
    monkeypatch.setattr(os, "stat", no_file)
    for c in calls:
        for rows in (1, 3, 640, 4096, 65536, 1 << 20):
            r = cake_jit.route(*c, rows)
            assert r.program.key == cake_jit.program_key_for(c[1], c[2]) and r.window.contains(rows)


def test_forget_routes_takes_a_replaced_rule(monkeypatch):
    """Routes keep their key's windows; a rule replaced at run time (tests, benchmarks) takes effect
    once they are forgotten, and the shipped rule again after."""
    assert cake_jit.route("sm_90a", "bwd", 4096, "bf16", False, 3000).program.key == "bwd_h4096"
    monkeypatch.setattr(cake_jit, "program_key_for", lambda p, h: f"{p}_generic")
    cake_jit.forget_routes()
    assert cake_jit.route("sm_90a", "bwd", 4096, "bf16", False, 3000).program.key == "bwd_generic"
    monkeypatch.undo()
    cake_jit.forget_routes()
    assert cake_jit.route("sm_90a", "bwd", 4096, "bf16", False, 3000).program.key == "bwd_h4096"
