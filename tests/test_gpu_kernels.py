"""Kernel correctness, accuracy, determinism and batch invariance on every route (GPU)."""

from __future__ import annotations

import contextlib

import pytest
import torch

import cake_rmsnorm_det as crd
from cake_rmsnorm_det import cake_jit, cake_windows, layout, reference as ref
from cake_rmsnorm_det.programs import current_arch

from helpers import QUALIFIED, assert_close_bf16, assert_dx_close, bits_equal, make, run_backward, run_forward

pytestmark = pytest.mark.gpu
EPS = 1e-6
T_LIST = (1, 2, 3, 7, 64, 127, 128, 129, 1000, 4096, 4097, 65536, 65537)


def _edges(hidden: int, wname: str, residual: bool) -> list[int]:
    key = cake_jit.check_key(current_arch(), "bwd", hidden, wname, residual)
    out = []
    for w in cake_jit.windows(key)[:-1]:
        out += [w.hi, w.hi + 1]
    return out


def _check_case(rows, hidden, wdtype, residual, device, seed=0):
    x, r, w, g, gr = make(rows, hidden, wdtype, residual, device, seed)
    y, h, rstd = run_forward(x, w, EPS, r)
    xin = h if residual else x
    if residual:
        h_ref = (x.float() + r.float()).to(torch.bfloat16)
        assert bits_equal(h, h_ref), "h_new is not BF16(x + residual)"
    rstd64 = ref.rstd_fp64(xin, EPS)
    ulp = ref.fp32_ulp_distance(rstd, rstd64.float())
    assert int(ulp.max()) <= 1, f"rstd {int(ulp.max())} FP32 ulps from FP64"
    y64 = xin.double() * rstd.double().unsqueeze(-1) * w.double()
    assert_close_bf16(y, y64, "y")
    dx, dw = run_backward(g, xin, w, rstd, gr)
    dx64, dw64 = ref.backward_fp64(g, xin, w, rstd, gr)
    assert_dx_close(dx, g, xin, w, rstd, gr)
    assert not torch.isnan(dw).any(), "dw has NaN (unwritten?)"
    ratio = ref.dw_error_ratio(dw, dw64)
    assert ratio <= 1e-3, f"dw error ratio {ratio} above 0.001 of the budget"
    return dw, dw64


@pytest.mark.parametrize("hidden", QUALIFIED)
@pytest.mark.parametrize("wdtype", [torch.bfloat16, torch.float32], ids=["wbf16", "wfp32"])
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "res"])
def test_every_route_matches_reference(hidden, wdtype, residual, device):
    wname = "bf16" if wdtype == torch.bfloat16 else "fp32"
    ts = sorted(set(T_LIST) | set(_edges(hidden, wname, residual)))
    for rows in ts:
        if rows * hidden > 65537 * 2048 and rows not in (65536, 65537):
            continue
        _check_case(rows, hidden, wdtype, residual, device, seed=rows)


@pytest.mark.parametrize("hidden", [8, 24, 200, 264, 1000, 3072, 3904, 7168, 8192, 16384, 16376])
def test_generic_widths(hidden, device):
    """Generic widths against the FP64 reference (3904: rows of 512 threads, two to a backward CTA)."""
    for rows in (1, 5, 300, 3000):
        for residual in (False, True):
            _check_case(rows, hidden, torch.float32 if rows % 2 else torch.bfloat16, residual, device, seed=hidden)


def test_views_read_in_place(device):
    """[T,4,256] key view and the strided [T,24,256] query view of a [T,24,512] buffer."""
    for T in (1, 33, 1024):
        buf = torch.randn(T, 24, 512, device=device).to(torch.bfloat16)
        q = buf[:, :, :256]
        k = torch.randn(T, 4, 256, device=device).to(torch.bfloat16)
        w = torch.rand(256, device=device) + 0.5
        for x in (q, k):
            y, rstd = crd.forward(x, w, EPS)
            y2, rstd2 = crd.forward(x.contiguous(), w, EPS)
            assert bits_equal(y, y2) and bits_equal(rstd, rstd2)
            g = torch.randn_like(x, dtype=torch.float32).to(torch.bfloat16)
            dx, dw = crd.backward(g, x, w, rstd)
            dx2, dw2 = crd.backward(g.contiguous(), x.contiguous(), w, rstd)
            assert bits_equal(dx, dx2) and bits_equal(dw, dw2)
            assert dx.shape == x.shape and dx.is_contiguous()


def test_two_level_views(device):
    """A [T,24,256] slice of a [T,32,512] buffer does not collapse to one row stride: it is read in
    place as a two-level view, backward by the pair form (the fused form reads one-level views), and
    a capped forward splits its launches on whole groups of 24 rows. Into poisoned outputs, every
    output has the contiguous copy's bits, with and without the residual."""
    from cake_rmsnorm_det import api

    w = torch.rand(256, device=device) + 0.5
    for T in (2, 5, 40):  # 48 rows (one-row chunks, the fused window), 120, 960
        x = torch.randn(T, 32, 512, device=device).to(torch.bfloat16)[:, :24, :256]
        r = torch.randn(T, 32, 512, device=device).to(torch.bfloat16)[:, :24, :256]
        g = torch.randn(T, 32, 512, device=device).to(torch.bfloat16)[:, :24, :256]
        assert api._rows_view(x).d1 == 24
        y2, h2, rstd2 = run_forward(x.contiguous(), w, EPS, r.contiguous())
        dx2, dw2 = run_backward(g.contiguous(), h2, w, rstd2, g.contiguous())
        for cap in (0, 1, 3):
            with crd.cap_ctas(cap) if cap else contextlib.nullcontext():
                y, h, rstd = run_forward(x, w, EPS, r)
                dx, dw = run_backward(g, h, w, rstd, g)
            assert bits_equal(y, y2) and bits_equal(h, h2) and bits_equal(rstd, rstd2), (T, cap)
            assert bits_equal(dx, dx2) and bits_equal(dw, dw2), (T, cap)
        if T == 2:
            _, _, rstd = run_forward(x, w, EPS)
            with crd.force_form("fused"), pytest.raises(ValueError, match="one-level"):
                crd.backward(g, x, w, rstd)


def test_misaligned_views_are_materialized(device):
    base = torch.randn(64, 1032, device=device).to(torch.bfloat16)
    x = base[:, 1:1025]                       # base offset of one element: not 16-byte aligned
    w = torch.rand(1024, device=device)
    y, rstd = crd.forward(x, w, EPS)
    y2, rstd2 = crd.forward(x.contiguous(), w, EPS)
    assert bits_equal(y, y2) and bits_equal(rstd, rstd2)
    odd = torch.randn(64, 1027, device=device).to(torch.bfloat16)[:, :1024]   # row stride 1027
    y3, _ = crd.forward(odd, w, EPS)
    y4, _ = crd.forward(odd.contiguous(), w, EPS)
    assert bits_equal(y3, y4)
    # contiguous but one element off 16 bytes: .contiguous() would hand back the same pointer
    flat = torch.randn(64 * 1024 + 1, device=device).to(torch.bfloat16)
    xc = flat[1:].view(64, 1024)
    assert xc.is_contiguous() and xc.data_ptr() % 16
    y5, rstd5 = crd.forward(xc, w, EPS)
    g = torch.randn(64 * 1024 + 1, device=device).to(torch.bfloat16)[1:].view(64, 1024)
    dx5, dw5 = crd.backward(g, xc, w, rstd5)
    dx6, dw6 = crd.backward(g.clone(), xc.clone(), w, rstd5)
    torch.cuda.synchronize()
    assert bits_equal(y5, crd.forward(xc.clone(), w, EPS)[0])
    assert bits_equal(dx5, dx6) and bits_equal(dw5, dw6)


@pytest.mark.parametrize("hidden", [256, 4096, 6144])
def test_dw_bits_independent_of_grid(hidden, device):
    for rows in (7, 129, 4097, 20000) + ((65600,) if hidden == 256 else ()):  # 65600 x 256: strided chunks
        x, _, w, g, _ = make(rows, hidden, torch.bfloat16, False, device, seed=rows)
        _, rstd = crd.forward(x, w, EPS)
        base_dx, base_dw = run_backward(g, x, w, rstd)
        again_dx, again_dw = run_backward(g, x, w, rstd)
        assert bits_equal(base_dx, again_dx) and bits_equal(base_dw, again_dw), "two runs differ"
        for cap in (1, 7, 66, 132):
            with crd.cap_ctas(cap):
                dx, dw = run_backward(g, x, w, rstd)
                y, rs = crd.forward(x, w, EPS)
            assert bits_equal(dx, base_dx), f"dx bits change with {cap} CTAs"
            assert bits_equal(dw, base_dw), f"dw bits change with {cap} CTAs"
            assert bits_equal(rs, rstd), f"rstd bits change with {cap} CTAs"


@pytest.mark.parametrize("hidden", [256, 512, 1536, 2048, 4096, 5120, 6144])
def test_pair_and_single_agree(hidden, device):
    """The forms give the same bits: the pair form's reduce on tiles of 8 (H 256 / 512), 16 (1536 /
    2048) or 32 columns (4096-6144 on 132 SMs) against the single form's one CTA over every column; at
    H 5120 / 6144 the pair form's reduce runs half as many warps per tile (each taking two level-1
    blocks) wherever the partition has more than 16 blocks; 1024 rows hold 128 or 256 chunks of several
    rows, in level-1 blocks of 8; 33 rows (33 one-row chunks, blocks of 2) and 2049 rows (121 chunks
    at most widths, blocks of 8) end on a level-1 block of one chunk."""
    for rows in (1, 3, 20, 33, 600, 1024, 2049, 5000):
        x, _, w, g, _ = make(rows, hidden, torch.float32, False, device, seed=rows)
        _, rstd = crd.forward(x, w, EPS)
        outs = {}
        forms = ["pair", "single"] + (["fused"] if cake_jit.dw_partition(rows, hidden)[0] == 1 else [])
        for form in forms:
            with crd.force_form(form):
                outs[form] = run_backward(g, x, w, rstd)
        for form in forms[1:]:
            assert bits_equal(outs[form][1], outs["pair"][1]), f"dw of {form} differs from pair at {rows} rows"
            assert bits_equal(outs[form][0], outs["pair"][0]), f"dx of {form} differs from pair at {rows} rows"


@pytest.mark.parametrize("hidden", [256, 512, 2048, 4096, 6144])
def test_strided_chunks(hidden, device):
    """Strided dw chunks (the route's order from their measured row count on) against contiguous ones
    of the same partition: dx bits equal (dx never depends on the partition), both dw within 0.001 of
    the FP64 budget, each into a poisoned output; strided bits the same in both forms and under CTA
    caps; too-short chunks and a bad order refused."""
    start = cake_windows.measured_strided_chunks(current_arch(), hidden)[0]
    for rows in (start, start + 131):
        x, _, w, g, _ = make(rows, hidden, torch.bfloat16, False, device, seed=rows + hidden)
        _, rstd = crd.forward(x, w, EPS)
        _, dw64 = ref.backward_fp64(g, x, w, rstd, None)
        outs = {}
        for order in ("contiguous", "strided"):
            with crd.force_chunk_order(order), crd.force_engine("direct"):
                outs[order] = run_backward(g, x, w, rstd)
            assert ref.dw_error_ratio(outs[order][1], dw64) <= 1e-3, f"{order} dw above 0.001 of the budget"
        assert bits_equal(outs["strided"][0], outs["contiguous"][0]), "dx depends on the chunk order"
        r = cake_jit.route(current_arch(), "bwd", hidden, "bf16", False, rows)
        routed = run_backward(g, x, w, rstd)
        assert bits_equal(routed[1], outs["strided" if r.chunk_order == layout.STRIDED else "contiguous"][1])
        for form, cap in (("pair", 0), ("single", 0), ("pair", 7), ("single", 66)):
            with crd.force_chunk_order("strided"), crd.force_form(form), \
                    (crd.cap_ctas(cap) if cap else contextlib.nullcontext()):
                dx, dw = run_backward(g, x, w, rstd)
            assert bits_equal(dw, outs["strided"][1]), f"strided dw bits change in the {form} form, cap {cap}"
            assert bits_equal(dx, outs["strided"][0])
    with crd.force_chunk_order("strided"):  # H 256 / 512 at 1024 rows: chunks of 4 rows, fewer than a CTA's groups
        x, _, w, g, _ = make(1024, hidden, torch.bfloat16, False, device)
        _, rstd = crd.forward(x, w, EPS)
        if cake_jit.dw_partition(1024, hidden)[0] < layout.bwd_row_groups(hidden):
            with pytest.raises(ValueError, match="strided dw chunks need"):
                crd.backward(g, x, w, rstd)
    with pytest.raises(ValueError, match="chunk order"):
        crd.force_chunk_order("zigzag")


@pytest.mark.parametrize("variant", ["plain", "res_fp32w", "query_view", "two_level"])
@pytest.mark.parametrize("hidden", [256, 1536, 5120, 6144, 1000])
def test_ring_walks_strided_chunks(hidden, variant, device):
    """The ring engine stages strided dw chunks row block by row block (one bulk copy a block of a
    one-level view, one a row of a two-level view) and gives the direct engine's dx and dw bits on
    them, into poisoned outputs: in the pair and single forms, under CTA caps (a CTA then takes
    several chunks), and at row counts whose last blocks lie partly or wholly past the rows. Its
    contiguous chunks keep their bits too."""
    checked = 0
    for n in (700, 5003, 9000):
        x, r, w, g, gr = _agreement_case(n, hidden, variant, device, seed=n + hidden + 5)
        rows = x.numel() // hidden
        if not layout.strided_fits(hidden, cake_jit.dw_partition(rows, hidden)[0]):
            continue
        _, h, rstd = run_forward(x, w, EPS, r)
        xin = h if r is not None else x
        for order in ("strided", "contiguous"):
            with crd.force_chunk_order(order), crd.force_engine("direct"), crd.force_form("pair"):
                base = run_backward(g, xin, w, rstd, gr)
            for form, cap in (("pair", 0), ("single", 0), ("pair", 7), ("single", 5)):
                with crd.force_chunk_order(order), crd.force_engine("ring"), crd.force_form(form), \
                        (crd.cap_ctas(cap) if cap else contextlib.nullcontext()):
                    out = run_backward(g, xin, w, rstd, gr)
                for name, a, b in zip(("dx", "dw"), base, out):
                    assert bits_equal(a, b), f"{name}: ring {order} {form} cap {cap} at {rows} rows ({variant})"
            checked += 1
    assert checked > 0, "no row count of this test has a strided partition"


@pytest.mark.parametrize("hidden", QUALIFIED + (1000, 16384))
@pytest.mark.parametrize("variant", ["plain", "res_fp32w", "query_view"])
def test_fused_form_matches_pair(hidden, variant, device):
    """The fused form (one launch: row CTAs for dx, tile CTAs summing dw from g, x and rstd) gives
    the pair form's bits on every partition of one-row chunks, into poisoned outputs, also on a
    capped grid (successive launches) and with each dw tile split over a cluster of CTAs; past
    one-row chunks it refuses to run. 320 / 321 and 383 / 385 rows are the steps of the row CTAs'
    rows a group (layout.cuh fused_group_rows) and rows a CTA (fused_rows_per_cta), odd counts
    leaving the last row CTA part-filled."""
    residual = variant == "res_fp32w"
    wdtype = torch.float32 if residual else torch.bfloat16
    if variant == "query_view" and hidden != 256:
        pytest.skip("the strided view is a width-256 layout")
    last = cake_jit.one_row_chunks(hidden)
    counts = (1, 2, 11) if variant == "query_view" else (1, 2, 3, 31, 32, 33, 64, 100, 150, 257, 320, 321, 383, 385, 500, last)
    for n in sorted(set(counts)):
        rows = n * 24 if variant == "query_view" else n
        if rows > last:
            continue
        x, r, w, g, gr = make(rows, hidden, wdtype, residual, device, seed=rows + hidden)
        if variant == "query_view":
            x = torch.randn(n, 24, 512, device=device).to(torch.bfloat16)[:, :, :256]
            g = torch.randn(x.shape, device=device).to(torch.bfloat16)
        y, h, rstd = run_forward(x, w, EPS, r)
        xin = h if residual else x
        with crd.force_form("pair"):
            base = run_backward(g, xin, w, rstd, gr)
        # caps: successive launches; tile clusters: a tile's blocks over 2-8 CTAs (with cap 3, a
        # cluster of 2 in launches of 2 CTAs, or one CTA a tile where 4 / 8 do not fit the cap)
        for cap, cluster in ((0, 0), (1, 0), (3, 0), (0, 2), (0, 4), (0, 8), (3, 2), (3, 8)):
            with crd.force_form("fused"), (crd.cap_ctas(cap) if cap else contextlib.nullcontext()), \
                    (crd.force_tile_cluster(cluster) if cluster else contextlib.nullcontext()):
                out = run_backward(g, xin, w, rstd, gr)
            assert bits_equal(out[0], base[0]), f"dx of the fused form differs at {rows} rows (cap {cap}, cluster {cluster})"
            assert bits_equal(out[1], base[1]), f"dw of the fused form differs at {rows} rows (cap {cap}, cluster {cluster})"
    x, _, w, g, _ = make(last + 1, hidden, torch.bfloat16, False, device)
    _, rstd = crd.forward(x, w, EPS)
    with crd.force_form("fused"), pytest.raises(ValueError, match="one-row chunks"):
        crd.backward(g, x, w, rstd)


@pytest.mark.parametrize("hidden", (256, 512, 1536, 1000))
@pytest.mark.parametrize("wdtype", [torch.bfloat16, torch.float32], ids=["wbf16", "wfp32"])
def test_one_row_dw_edge_values(hidden, wdtype, device):
    """A call of one row writes dw as its row's g*x*rstd rounded once in FP32 (backward_row_kernel);
    the pair form sums the same product in FP64. Their bits agree where the two roundings could
    part: signed zeros (a -0.0 product is +0.0 in both), products that underflow to zero or to FP32
    subnormals, huge products, infinities in g (NaN in the sums), a NaN in g."""
    x, _, w, g, _ = make(1, hidden, wdtype, False, device, seed=hidden)
    tiny = [1e-20, -1e-21, 3e-22, -2e-23, 1e-24, 5e-20, -4e-21, 2e-19, -1e-20]
    g_special = [0.0, -0.0, 1e-30, -1e-30, 3e-20, -2e-25, 1e30, -1e36, float("inf")]
    if hidden == 1000:
        g_special[0] = float("nan")
    x_special = [-0.0, 0.0, -1e-30, 1e-22, -5e-24, 1e-25, 2e-21, -1e-19, 7e-23]

    def bf16(v):
        return torch.tensor(v, device=device).to(torch.bfloat16)

    k = len(tiny)
    g[0, :k] = bf16(g_special)
    g[0, k:2 * k] = bf16(g_special).neg()
    x[0, 2 * k:3 * k] = bf16(x_special)
    g[0, 3 * k:4 * k] = bf16(tiny)
    x[0, 3 * k:4 * k] = bf16(x_special).flip(0)
    _, rstd = crd.forward(x, w, EPS)
    with crd.force_form("pair"):
        base = run_backward(g, x, w, rstd, None)
    out = run_backward(g, x, w, rstd, None)  # the routed fused form: one row, backward_row_kernel
    assert "backward_row_kernel" in str(crd.explain_route("bwd", hidden, 1))
    assert bits_equal(out[1], base[1]), "dw of one row differs from the pair form's"
    assert bits_equal(out[0], base[0]), "dx of one row differs from the pair form's"


@pytest.mark.parametrize("hidden", QUALIFIED + (1000,))
@pytest.mark.parametrize("variant", ["plain", "res_fp32w", "query_view"])
def test_engines_agree(hidden, variant, device):
    """Both engines of a pass give the same bits (the routes switch engines at token edges),
    each into poisoned outputs, on the routed form of each token count and on a view."""
    residual = variant == "res_fp32w"
    wdtype = torch.float32 if residual else torch.bfloat16
    if variant == "query_view" and hidden != 256:
        pytest.skip("the strided view is a width-256 layout")
    for rows in (1, 5, 300, 5000, 20000):
        x, r, w, g, gr = make(rows, hidden, wdtype, residual, device, seed=rows + hidden)
        if variant == "query_view":
            buf = torch.randn(rows, 3, 512, device=device).to(torch.bfloat16)
            x = buf[:, :, :256]
            g = torch.randn(x.shape, device=device).to(torch.bfloat16)
        outs = {}
        for fe, be in (("regs", "direct"), ("l1", "ring")):
            with crd.force_engine(fe):
                y, h, rstd = run_forward(x, w, EPS, r)
            with crd.force_engine(be):
                dx, dw = run_backward(g, h if residual else x, w, rstd, gr)
            outs[be] = (y, rstd, dx, dw)
            assert not torch.isnan(dw).any() and not torch.isnan(rstd).any(), f"{be}: unwritten output"
        for name, a, b in zip(("y", "rstd", "dx", "dw"), outs["direct"], outs["ring"]):
            assert bits_equal(a, b), f"{name} differs between engines at {rows} rows ({variant})"


@pytest.mark.parametrize("hidden", QUALIFIED + (1000,))
@pytest.mark.parametrize("variant", ["plain", "res_fp32w", "query_view"])
def test_forward_cta_sizes_agree(hidden, variant, device):
    """Rows per CTA and wide rows move time, never bits: every CTA size of narrow and of wide rows
    (where built) and the launcher's own choice give the narrow rule's y, h_new and rstd, into
    poisoned outputs, also under a CTA cap (grid stride)."""
    residual = variant == "res_fp32w"
    wdtype = torch.float32 if residual else torch.bfloat16
    if variant == "query_view" and hidden != 256:
        pytest.skip("the strided view is a width-256 layout")
    wides = (False, True) if cake_jit.fwd_has_wide(hidden) else (False,)
    for rows in (1, 5, 300, 5001):
        x, r, w, _, _ = make(rows, hidden, wdtype, residual, device, seed=rows + hidden)
        if variant == "query_view":
            x = torch.randn(rows, 3, 512, device=device).to(torch.bfloat16)[:, :, :256]
        with crd.force_wide(False):
            base = run_forward(x, w, EPS, r)
        auto = run_forward(x, w, EPS, r)  # the launcher's choice
        for name, a, b in zip(("y", "h_new", "rstd"), base, auto):
            assert a is None or bits_equal(a, b), f"{name} differs at {rows} rows: launcher's choice"
        for wide in wides:
            rpc = layout.rows_per_cta(layout.fwd_row_span(hidden, wide))
            for cta_rows in sorted({1, max(1, rpc // 2), max(1, rpc - 1), rpc}):
                for cap in (0, 3):
                    with crd.force_cta_rows(cta_rows), crd.force_wide(wide), crd.force_engine("regs"), \
                            (crd.cap_ctas(cap) if cap else contextlib.nullcontext()):
                        out = run_forward(x, w, EPS, r)
                    for name, a, b in zip(("y", "h_new", "rstd"), base, out):
                        assert a is None or bits_equal(a, b), \
                            f"{name} differs at {rows} rows: {cta_rows} rows/CTA, wide {wide}, cap {cap}"


def _agreement_case(rows: int, hidden: int, variant: str, device, seed: int):
    """x, residual, w, g, g_residual of an agreement case: plain rows, FP32 weight with the residual
    (res_fp32w), a strided view ([rows, 3, H] of [rows, 3, 2H]) or a two-level one ([rows, 3, H] of
    [rows, 4, H]); a view's g has its shape."""
    residual = variant == "res_fp32w"
    x, r, w, g, gr = make(rows, hidden, torch.float32 if residual else torch.bfloat16, residual, device, seed=seed)
    if variant == "query_view":
        x = torch.randn(rows, 3, 2 * hidden, device=device).to(torch.bfloat16)[:, :, :hidden]
    elif variant == "two_level":
        x = torch.randn(rows, 4, hidden, device=device).to(torch.bfloat16)[:, :3]
    if variant in ("query_view", "two_level"):
        g = torch.randn(x.shape, device=device).to(torch.bfloat16)
    return x, r, w, g, gr


def _assert_forward_launches_agree(x, w, r, base_knobs, knobs, rpc: int, what: str):
    """The forward under `knobs` (a callable giving the knobs' contexts) gives the bits of the forward
    under `base_knobs`, into poisoned outputs: as routed, then on both weight engines with full,
    partial and one-row CTAs and under a cap of 3 CTAs."""
    rows = x.numel() // x.shape[-1]
    with contextlib.ExitStack() as st:
        for c in base_knobs():
            st.enter_context(c)
        base = run_forward(x, w, EPS, r)
    routed = run_forward(x, w, EPS, r)
    for name, a, b in zip(("y", "h_new", "rstd"), base, routed):
        assert a is None or bits_equal(a, b), f"{name} differs at {rows} rows: the route's launch"
    for engine in ("regs", "l1"):
        for cta_rows, cap in ((rpc, 0), (max(1, rpc // 2 - 1), 0), (1, 0), (rpc, 3)):
            with contextlib.ExitStack() as st:
                for c in knobs() + (crd.force_engine(engine), crd.force_cta_rows(cta_rows)):
                    st.enter_context(c)
                if cap:
                    st.enter_context(crd.cap_ctas(cap))
                out = run_forward(x, w, EPS, r)
            for name, a, b in zip(("y", "h_new", "rstd"), base, out):
                assert a is None or bits_equal(a, b), \
                    f"{name} differs at {rows} rows: {what}, {engine}, {cta_rows} rows/CTA, cap {cap}"


@pytest.mark.parametrize("variant", ["plain", "res_fp32w", "query_view", "two_level"])
def test_forward_packed_rows_agree(variant, device):
    """Packed rows (a thread holding two canonical threads of an H 256 row) give the canonical rows'
    y, h_new and rstd bits, into poisoned outputs: both weight engines, full and partial CTAs, under
    a CTA cap, on a strided view, on a two-level view (a [T, 3, 256] slice of [T, 4, 256]), with rows
    past the last CTA's end, and as the route takes them past its edge."""
    hidden, pack = 256, layout.FWD_PACK
    assert layout.fwd_has_pack(hidden) and cake_jit.fwd_pack(hidden, 10**6) == pack
    edge = cake_windows.fwd_measured_pack(current_arch(), hidden)[0][1]
    rpc = layout.rows_per_cta(layout.fwd_row_span(hidden, False, pack))
    for rows in (1, 37, 300, 4099, edge + 5):
        x, r, w, _, _ = _agreement_case(rows, hidden, variant, device, seed=rows + hidden + 1)
        _assert_forward_launches_agree(x, w, r, lambda: (crd.force_pack(1), crd.force_wide(False)),
                                       lambda: (crd.force_pack(pack),), rpc, "packed")


@pytest.mark.parametrize("variant", ["plain", "res_fp32w", "query_view", "two_level"])
@pytest.mark.parametrize("hidden", [512, 4096, 6144, 1000])
def test_forward_l1_loads_agree(hidden, variant, device):
    """Rows read into L1 give the streamed rows' y, h_new and rstd bits, into poisoned outputs: both
    weight engines (the generic program's one), full, partial and one-row CTAs, under a CTA cap, on
    a strided view and a two-level one, with rows past the last CTA's end, and as the route takes
    them past its measured edge."""
    edge = cake_windows.measured_l1_loads(current_arch(), "fwd", hidden)
    rpc = layout.rows_per_cta(layout.fwd_row_span(hidden, False))
    for rows in (1, 37, 300) + ((edge[0] + 3,) if edge else ()):
        x, r, w, _, _ = _agreement_case(rows, hidden, variant, device, seed=rows + hidden + 2)
        _assert_forward_launches_agree(x, w, r, lambda: (crd.force_l1_loads(False), crd.force_wide(False)),
                                       lambda: (crd.force_l1_loads(True), crd.force_wide(False)), rpc, "L1 reads")


@pytest.mark.parametrize("variant", ["plain", "res_fp32w", "query_view", "two_level"])
@pytest.mark.parametrize("hidden", [256, 512, 4096, 1000])
def test_backward_l1_loads_agree(hidden, variant, device):
    """The direct engine's rows read into L1 give the streamed rows' dx and dw bits, into poisoned
    outputs: the pair and single forms, cut and full row groups, under a CTA cap, on a strided and a
    two-level view, and as the route takes them past its measured edge (H 256 / 512); the ring and
    the fused form, which stream whatever is asked, keep their bits too."""
    edge = cake_windows.measured_l1_loads(current_arch(), "bwd", hidden)
    sizes = (1, 3, 300, 5000) + ((edge[0] + 5,) if edge and variant == "plain" else ())
    for rows in sizes:
        x, r, w, g, gr = _agreement_case(rows, hidden, variant, device, seed=rows + hidden + 3)
        _, h, rstd = run_forward(x, w, EPS, r)
        xin = h if r is not None else x
        with crd.force_l1_loads(False), crd.force_engine("direct"), crd.force_form("pair"):
            base = run_backward(g, xin, w, rstd, gr)
        routed = run_backward(g, xin, w, rstd, gr)
        assert bits_equal(routed[0], base[0]) and bits_equal(routed[1], base[1]), f"the route at {rows} rows"
        cases = [("direct", "pair", 0), ("direct", "single", 0), ("direct", "pair", 3), ("ring", "pair", 0)]
        if cake_jit.dw_partition(xin.numel() // hidden, hidden)[0] == 1 and variant != "two_level":
            cases.append(("direct", "fused", 0))  # (two-level views run the pair form)
        for engine, form, cap in cases:
            with crd.force_l1_loads(True), crd.force_engine(engine), crd.force_form(form), \
                    (crd.cap_ctas(cap) if cap else contextlib.nullcontext()):
                out = run_backward(g, xin, w, rstd, gr)
            for name, a, b in zip(("dx", "dw"), base, out):
                assert bits_equal(a, b), f"{name} differs at {rows} rows: L1 reads, {engine}, {form}, cap {cap}"


def test_forward_cta_size_is_checked(device):
    x = torch.randn(4, 256, device=device).to(torch.bfloat16)
    w = torch.ones(256, device=device, dtype=torch.bfloat16)
    with crd.force_cta_rows(17), pytest.raises(RuntimeError, match="forward launch"):
        crd.forward(x, w, EPS)  # 16 rows of H 256 fill a CTA
    x = torch.randn(4, 4096, device=device).to(torch.bfloat16)
    w = torch.ones(4096, device=device, dtype=torch.bfloat16)
    with crd.force_wide(True), crd.force_cta_rows(2), pytest.raises(RuntimeError, match="forward launch"):
        crd.forward(x, w, EPS)  # a wide row of H 4096 fills a CTA
    for hidden, engine in ((256, "regs"), (4096, "l1"), (1000, "regs")):  # no wide rows built there
        x = torch.randn(4, hidden, device=device).to(torch.bfloat16)
        w = torch.ones(hidden, device=device, dtype=torch.bfloat16)
        with crd.force_wide(True), crd.force_engine(engine), pytest.raises(RuntimeError, match="forward launch"):
            crd.forward(x, w, EPS)
    for hidden in (512, 4096, 1000):  # no packed rows built there
        assert not layout.fwd_has_pack(hidden)
        x = torch.randn(4, hidden, device=device).to(torch.bfloat16)
        w = torch.ones(hidden, device=device, dtype=torch.bfloat16)
        with crd.force_pack(layout.FWD_PACK), pytest.raises(RuntimeError, match="forward launch"):
            crd.forward(x, w, EPS)
    x = torch.randn(4, 256, device=device).to(torch.bfloat16)
    w = torch.ones(256, device=device, dtype=torch.bfloat16)
    with crd.force_pack(2), crd.force_cta_rows(33), pytest.raises(RuntimeError, match="forward launch"):
        crd.forward(x, w, EPS)  # 32 packed rows of 16 threads fill a CTA
    with crd.force_pack(2), crd.force_wide(True), pytest.raises(RuntimeError, match="forward launch"):
        crd.forward(x, w, EPS)  # packed rows are narrow
    with crd.force_pack(2), crd.force_l1_loads(True), pytest.raises(RuntimeError, match="forward launch"):
        crd.forward(x, w, EPS)  # packed rows stream
    x = torch.randn(4, 4096, device=device).to(torch.bfloat16)
    w = torch.ones(4096, device=device, dtype=torch.bfloat16)
    with crd.force_wide(True), crd.force_engine("regs"), crd.force_l1_loads(True), \
            pytest.raises(RuntimeError, match="forward launch"):
        crd.forward(x, w, EPS)  # wide rows stream
    with crd.force_l1_loads(True):  # the automatic wide rows of a few-row call stream: no error
        y, _ = crd.forward(x, w, EPS)
    assert torch.isfinite(y.float()).all()


@pytest.mark.parametrize("hidden", QUALIFIED + (8192,))
def test_batch_invariant_rows(hidden, device):
    """The same row gives the same rstd, y and dx bits in calls of any size, on every window."""
    wname = "bf16"
    sizes = sorted({1, 7, 4097, 65536 if hidden <= 2048 else 16384} | set(_edges(hidden, wname, False)))
    big = max(sizes)
    x, _, w, g, _ = make(big, hidden, torch.bfloat16, False, device, seed=hidden)
    y_all, rstd_all = crd.forward(x, w, EPS)
    dx_all, _ = crd.backward(g, x, w, rstd_all)
    for n in sizes:
        y, rstd = crd.forward(x[-n:], w, EPS)
        dx, _ = crd.backward(g[-n:], x[-n:], w, rstd)
        assert bits_equal(rstd, rstd_all[-n:]), f"rstd of the last {n} rows differ"
        assert bits_equal(y, y_all[-n:]), f"y of the last {n} rows differ"
        assert bits_equal(dx, dx_all[-n:]), f"dx of the last {n} rows differ"


def test_specialised_and_generic_programs_agree(device):
    """Row layout is a function of H alone: the generic program gives the fixed-width bits (3000
    rows: the pair form, at H 4096 on two-row CTAs and 132 chunks)."""
    from cake_rmsnorm_det import api
    from cake_rmsnorm_det.programs import load_program, program_by_key
    for hidden, rows in ((256, 300), (4096, 300), (256, 3000), (4096, 3000)):
        x, _, w, g, _ = make(rows, hidden, torch.bfloat16, False, device, seed=1)
        y, rstd = crd.forward(x, w, EPS)
        dx, dw = crd.backward(g, x, w, rstd)
        orig = cake_jit.program_key_for
        try:
            cake_jit.program_key_for = lambda p, h: f"{p}_generic"
            cake_jit.forget_routes()
            assert cake_jit.route("sm_90a", "bwd", hidden, "bf16", False, rows).program.key == "bwd_generic"
            y2, rstd2 = crd.forward(x, w, EPS)
            dx2, dw2 = crd.backward(g, x, w, rstd2)
        finally:
            cake_jit.program_key_for = orig
            cake_jit.forget_routes()
        assert bits_equal(y, y2) and bits_equal(rstd, rstd2) and bits_equal(dx, dx2) and bits_equal(dw, dw2)


@pytest.mark.parametrize("family", ref.FAMILIES)
@pytest.mark.parametrize("hidden", QUALIFIED)
def test_dw_accuracy_beats_fp32_eager(family, hidden, device):
    for rows in (4096, 65536):
        x, g = ref.input_family(family, rows, hidden, device, seed=hidden)
        w = torch.ones(hidden, device=device, dtype=torch.float32)
        _, rstd = crd.forward(x, w, EPS)
        _, dw = crd.backward(g, x, w, rstd)
        truth = ref.dw_fp64(g, x, rstd)
        ours = ref.dw_error_ratio(dw, truth)
        eager = ref.dw_error_ratio(ref.dw_fp32_eager(g, x, rstd), truth)
        assert ours <= 1e-3, f"{family} H={hidden} T={rows}: ratio {ours}"
        assert ours < eager or ours == 0.0, f"{family} H={hidden} T={rows}: ours {ours} vs eager {eager}"


def test_zero_rows(device):
    w = torch.ones(512, device=device)
    x = torch.empty(0, 512, device=device, dtype=torch.bfloat16)
    y, rstd = crd.forward(x, w, EPS)
    assert y.shape == (0, 512) and rstd.shape == (0,)
    dx, dw = crd.backward(x, x, w, rstd)
    assert dx.shape == (0, 512) and bool((dw == 0).all())


def test_nan_inf_propagate_like_fp32(device):
    x, _, w, g, _ = make(64, 1024, torch.bfloat16, False, device)
    x[3, 5] = float("nan")
    x[7, 9] = float("inf")
    g[11, 13] = float("nan")
    y, rstd = crd.forward(x, w, EPS)
    y32, rstd32 = ref.forward_fp32(x, w, EPS)
    assert torch.equal(torch.isnan(rstd), torch.isnan(rstd32))
    assert torch.equal(torch.isnan(y.float()), torch.isnan(y32.float()))
    dx, dw = crd.backward(g, x, w, rstd)
    dx32, dw32 = ref.backward_fp32(g, x, w, rstd)
    assert torch.equal(torch.isnan(dw), torch.isnan(dw32))
    assert torch.equal(torch.isnan(dx.float()), torch.isnan(dx32.float()))


@pytest.mark.slow
def test_huge_tensor_past_2_pow_31(device):
    rows, hidden = 360000, 6144           # 2.2e9 elements
    if torch.cuda.get_device_properties(device).total_memory < 40 * 2**30:
        pytest.skip("needs ~30 GB of GPU memory")
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(rows, hidden, device=device, generator=gen, dtype=torch.bfloat16)
    g = torch.randn(rows, hidden, device=device, generator=gen, dtype=torch.bfloat16)
    w = torch.rand(hidden, device=device, generator=gen, dtype=torch.float32) + 0.5
    y, rstd = crd.forward(x, w, EPS)
    dx, dw = crd.backward(g, x, w, rstd)
    idx = torch.tensor([0, 1, 349524, 349525, rows // 2, rows - 2, rows - 1], device=device)
    xs, gs = x[idx], g[idx]
    rs64 = ref.rstd_fp64(xs, EPS)
    assert int(ref.fp32_ulp_distance(rstd[idx], rs64.float()).max()) <= 1
    assert_close_bf16(y[idx], xs.double() * rstd[idx].double().unsqueeze(-1) * w.double(), "y (huge)")
    assert_dx_close(dx[idx], gs, xs, w, rstd[idx], what="dx (huge)")
    truth = torch.zeros(hidden, dtype=torch.float64, device=device)
    for s in range(0, rows, 20000):
        truth += ref.dw_fp64(g[s:s + 20000], x[s:s + 20000], rstd[s:s + 20000])
    assert ref.dw_error_ratio(dw, truth) <= 1e-3
