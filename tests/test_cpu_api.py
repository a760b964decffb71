"""Validation, layout rules, reference math and the torch integration that runs without a GPU."""

from __future__ import annotations

import pytest
import torch

import cake_rmsnorm_det as crd
from cake_rmsnorm_det import api, cake_windows, reference as ref


def test_activation_dtype_and_device_errors():
    w = torch.ones(64)
    with pytest.raises(TypeError, match="bfloat16"):
        crd.forward(torch.zeros(2, 64, dtype=torch.float16), w)
    with pytest.raises(TypeError, match="bfloat16"):
        crd.forward(torch.zeros(2, 64), w)
    with pytest.raises(ValueError, match="CUDA"):
        crd.forward(torch.zeros(2, 64, dtype=torch.bfloat16), w)
    with pytest.raises(TypeError, match="torch.Tensor"):
        crd.forward([1.0], w)
    with pytest.raises(ValueError, match="CUDA"):
        crd.backward(torch.zeros(2, 64, dtype=torch.bfloat16), torch.zeros(2, 64, dtype=torch.bfloat16),
                     w, torch.ones(2))


@pytest.mark.parametrize("eps", [0.0, -1.0, float("nan"), float("inf")])
def test_eps_must_be_finite_and_positive(eps):
    with pytest.raises(ValueError, match="eps"):
        api._check_eps(eps)
    with pytest.raises(TypeError):
        api._check_eps("1e-6")


def test_hidden_rule():
    for h in (4, 12, 16392, 0):
        with pytest.raises(ValueError, match="multiple of 8"):
            api._check_hidden(h)
    for h in (8, 256, 16384):
        api._check_hidden(h)
    with pytest.raises(ValueError, match="multiple of 8"):
        crd.workspace_bytes(10, 100)
    # the most chunks of any row count up to 65536: the one-row reach (DW_ONE_ROW_ROWS at H 4096) or 264
    most = max(264, cake_windows.DW_ONE_ROW_ROWS[4096])
    assert crd.workspace_bytes(65536, 4096) == 256 + most * 4096 * 8
    assert crd.workspace_bytes(65536, 3000) == 256 + 264 * 3000 * 8


def test_rows_view_reads_strided_views_in_place():
    buf = torch.zeros(16, 24, 512, dtype=torch.bfloat16)
    q = buf[:, :, :256]
    v = api._rows_view(q)
    assert v.t is q and (v.d1, v.s0) == (1, 512)            # (T*24) rows of stride 512
    k = torch.zeros(16, 4, 256, dtype=torch.bfloat16)
    v = api._rows_view(k)
    assert v.t is k and (v.d1, v.s0) == (1, 256)
    merged = torch.zeros(8, 6, 1024, dtype=torch.bfloat16)[:, ::2, :256]   # collapses to one level
    v = api._rows_view(merged)
    assert v.t is merged and (v.d1, v.s0) == (1, 2048)
    two = torch.zeros(8, 6, 1024, dtype=torch.bfloat16)[:, :3, :256]       # two strided levels
    v = api._rows_view(two)
    assert v.t is two and (v.d1, v.s0, v.s1) == (3, 6144, 1024)
    three = torch.zeros(4, 4, 4, 512, dtype=torch.bfloat16)[:, :3, :3, :256]
    assert api._rows_view(three).t is not three                       # three levels: copied once
    off = torch.zeros(8, 264, dtype=torch.bfloat16)[:, 1:257]         # misaligned base
    v = api._rows_view(off)
    assert v.t is not off and v.t.is_contiguous() and torch.equal(v.t, off)
    odd = torch.zeros(8, 260, dtype=torch.bfloat16)[:, :256]          # row stride not a multiple of 8
    assert api._rows_view(odd).t is not odd
    flat = torch.arange(8 * 256 + 1, dtype=torch.float32).to(torch.bfloat16)
    shifted = flat[1:].view(8, 256)                                     # contiguous, misaligned
    assert shifted.is_contiguous() and shifted.data_ptr() % 16
    v = api._rows_view(shifted)
    assert v.t.data_ptr() % 16 == 0 and torch.equal(v.t, shifted)


def test_knobs_restore_and_check():
    with pytest.raises(ValueError):
        with crd.cap_ctas(0):
            pass
    with crd.cap_ctas(7):
        assert api._knobs.max_ctas == 7
    assert api._knobs.max_ctas == 0
    with pytest.raises(ValueError):
        with crd.force_form("diagonal"):
            pass
    for bad in (0, 3, 4):
        with pytest.raises(ValueError, match="pack"):
            crd.force_pack(bad)
    with crd.force_pack(2), crd.force_tile_cluster(2), crd.force_l1_loads(True):
        assert api._knobs.pack == 2 and api._knobs.tile_cluster == 2 and api._knobs.l1_loads is True
        with crd.force_l1_loads(False):
            assert api._knobs.l1_loads is False
        assert api._knobs.l1_loads is True
    assert api._knobs.pack == 0 and api._knobs.tile_cluster == 0 and api._knobs.l1_loads is None


def test_reference_math_agrees_with_fp64():
    torch.manual_seed(0)
    x = torch.randn(64, 256).to(torch.bfloat16)
    w = torch.rand(256) + 0.5
    g = torch.randn(64, 256).to(torch.bfloat16)
    y, rstd = ref.forward_fp32(x, w, 1e-6)
    r64 = ref.rstd_fp64(x, 1e-6)
    assert torch.allclose(rstd.double(), r64, rtol=1e-6)
    dx32, dw32 = ref.backward_fp32(g, x, w, rstd)
    dx64, dw64 = ref.backward_fp64(g, x, w, rstd)
    assert torch.allclose(dx32.double(), dx64, atol=1e-2, rtol=1e-2)
    assert ref.dw_error_ratio(dw32, dw64) < 1.0
    assert ref.dw_error_ratio(ref.dw_fp64(g, x, rstd).float(), dw64) < 1e-2
    a = torch.tensor([1.0, -2.0, 3.0]).to(torch.bfloat16)
    b = torch.tensor([1.0078125, -2.0, 3.0]).to(torch.bfloat16)
    assert ref.bf16_ulp_distance(a, b).tolist() == [1, 0, 0]
    assert int(ref.fp32_ulp_distance(torch.tensor([1.0]), torch.tensor([1.0000001])).item()) == 1
    tiny = torch.tensor([1e-45])  # the smallest subnormals either side of zero are 2 ulps apart; -0 is 0
    assert ref.fp32_ulp_distance(-tiny, tiny).tolist() == [2]
    assert ref.fp32_ulp_distance(torch.tensor([-0.0]), torch.tensor([0.0])).tolist() == [0]
    assert ref.bf16_ulp_distance(torch.tensor([-0.0]).bfloat16(), torch.tensor([0.0]).bfloat16()).tolist() == [0]


def test_input_families():
    for fam in ref.FAMILIES:
        x, g = ref.input_family(fam, 32, 512)
        assert x.dtype == torch.bfloat16 and x.shape == (32, 512) and g.shape == (32, 512)
    x, _ = ref.input_family("positive", 32, 512)
    assert bool((x >= 1).all())
    with pytest.raises(ValueError):
        ref.input_family("zeros", 4, 8)


def test_custom_ops_have_fake_kernels():
    x = torch.empty(5, 7, 256, device="meta", dtype=torch.bfloat16)
    w = torch.empty(256, device="meta", dtype=torch.float32)
    y, h, rstd = torch.ops.cake_rmsnorm_det.rmsnorm_fwd(x, w, x, 1e-6)
    assert y.shape == x.shape and h.shape == x.shape and rstd.shape == (5, 7) and rstd.dtype == torch.float32
    dx, dw = torch.ops.cake_rmsnorm_det.rmsnorm_bwd(x, x, w, rstd, None)
    assert dx.shape == x.shape and dw.shape == (256,) and dw.dtype == torch.float32


def test_module_is_state_dict_compatible_with_torch():
    ours = crd.RMSNorm(128, eps=1e-5)
    theirs = torch.nn.RMSNorm(128, eps=1e-5)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    ours.load_state_dict(theirs.state_dict())
    assert "128" in repr(ours) and "eps=1e-05" in repr(ours)
    ours.weight.data.fill_(3)
    ours.reset_parameters()
    assert bool((ours.weight == 1).all())
    assert crd.RMSNorm([64]).normalized_shape == (64,)
    with pytest.raises(ValueError, match="normalized_shape"):
        crd.RMSNorm(())
    with pytest.raises(TypeError):
        crd.RMSNorm(64, dtype=torch.float16)
    assert crd.RMSNorm(64, dtype=torch.bfloat16).weight.dtype == torch.bfloat16


def test_module_takes_several_normalized_dims_as_torch():
    ours, theirs = crd.RMSNorm((4, 64), eps=1e-5), torch.nn.RMSNorm((4, 64), eps=1e-5)
    ours.load_state_dict(theirs.state_dict())
    assert ours.weight.shape == (4, 64) and repr(ours) == repr(theirs)
    x = torch.zeros(3, 4, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="normalized shape"):
        ours(torch.zeros(3, 64, 4, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="residual"):
        ours(x, torch.zeros(12, 64, dtype=torch.bfloat16))


def test_module_reshapes_several_normalized_dims(monkeypatch):
    # the module's plumbing on the CPU: the call it makes is the flat row's (the FP32 formula here)
    calls = []

    def flat(x, w, eps, residual=None):
        calls.append((tuple(x.shape), tuple(w.shape), eps))
        out = ref.forward_fp32(x, w, eps, residual)
        return out[0] if residual is None else (out[0], out[1])

    monkeypatch.setattr(crd.autograd, "rmsnorm", flat)
    ours, theirs = crd.RMSNorm((4, 64), eps=1e-5), torch.nn.RMSNorm((4, 64), eps=1e-5)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 1.5)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(3, 5, 4, 64).to(torch.bfloat16)
    y = ours(x)
    assert calls[-1] == ((3, 5, 256), (256,), 1e-5) and y.shape == x.shape
    y_ref = theirs(x.float())
    assert (y.float() - y_ref).abs().max() <= 2 ** -6 * y_ref.abs().max()
    r = torch.randn_like(x)
    y2, h = ours(x, r)
    assert y2.shape == h.shape == x.shape
    assert torch.equal(h, (x.float() + r.float()).to(torch.bfloat16))


def test_module_defaults_match_torch():
    # eps=None is torch.nn.RMSNorm's default (the input dtype's epsilon at each call)
    assert repr(crd.RMSNorm(64)) == repr(torch.nn.RMSNorm(64))
    assert crd.RMSNorm(64).eps is None and crd.RMSNorm(64, eps=1e-5).eps == 1e-5
    x = torch.zeros(2, 64, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="eps"):
        crd.rmsnorm(x, torch.ones(64), eps="1e-6")


def test_flashinfer_style_aliases():
    assert crd.cake_rmsnorm_det_train_forward is crd.forward
    assert crd.cake_rmsnorm_det_train_backward is crd.backward
    assert crd.cake_rmsnorm_det is crd.rmsnorm
    assert crd.cake_rmsnorm_det_workspace_bytes is crd.workspace_bytes


@pytest.mark.skipif(torch.cuda.is_available(), reason="the arch comes from the device here")
def test_route_inspection_without_a_device_says_what_to_pass(monkeypatch):
    """Without CUDA the arch cannot come from the device: the error names the way out (arch= or
    CAKE_RMSNORM_DET_ARCH) instead of torch's "not compiled with CUDA"."""
    monkeypatch.delenv("CAKE_RMSNORM_DET_ARCH", raising=False)
    with pytest.raises(RuntimeError, match="pass arch="):
        crd.explain_route("bwd", 4096, tokens=256)
    assert "fused" in str(crd.explain_route("bwd", 4096, tokens=256, arch="sm_90a"))
    monkeypatch.setenv("CAKE_RMSNORM_DET_ARCH", "sm_90a")
    assert "sm_90a" in str(crd.explain_route("bwd", 4096, tokens=256))


def test_every_public_function_has_a_docstring_and_type_hints():
    """The package's public functions and methods (no leading underscore) say what they do and take."""
    import ast
    from pathlib import Path

    missing = []
    for f in sorted(Path(crd.__file__).parent.glob("*.py")):
        for n in ast.walk(ast.parse(f.read_text())):
            if isinstance(n, ast.FunctionDef) and not n.name.startswith("_"):
                args = n.args.posonlyargs + n.args.args + n.args.kwonlyargs
                hinted = n.returns is not None and all(a.annotation is not None for a in args
                                                       if a.arg not in ("self", "cls"))
                if not ast.get_docstring(n) or not hinted:
                    missing.append(f"{f.name}:{n.lineno} {n.name}")
    assert missing == []


def test_benchmark_trace_split_keeps_only_calls():
    """bench.split_calls cuts a trace at the flush kernels: with the rewrite flush each span is a
    call; with the read flush (two markers around a sum) every other span is the flush's own sum,
    which Timer drops, so no flush kernel is ever timed as part of a call."""
    from cake_rmsnorm_det import bench

    m = "vectorized_elementwise_kernel<bitwise_not_kernel_cuda>"
    rewrite = [("setup", 1.0), (m, 90.0), ("k1", 2.0), ("k2", 3.0), (m, 91.0), ("k1", 4.0)]
    assert bench.split_calls(rewrite) == [[("k1", 2.0), ("k2", 3.0)], [("k1", 4.0)]]
    read = [(m, 0.5), ("reduce_kernel", 80.0), (m, 0.5), ("k1", 2.0), ("reduce_kernel", 1.0),
            (m, 0.5), ("reduce_kernel", 81.0), ("reduce_kernel", 0.2), (m, 0.5), ("k1", 5.0)]
    spans = bench.split_calls(read)
    assert spans[1::2] == [[("k1", 2.0), ("reduce_kernel", 1.0)], [("k1", 5.0)]]
    assert all(all(n == "reduce_kernel" for n, _ in s) for s in spans[0::2])
    with pytest.raises(ValueError, match="flush must be"):
        bench.Timer("cpu", flush_bytes=8, flush="evict")


def test_demo_without_a_gpu_shows_routes_and_builds(monkeypatch, capsys):
    """README's main command on a machine without a GPU: it says so, shows a short route table and
    builds every program for sm_90a (the build itself is test_programs.py's; here it is stubbed)."""
    from cake_rmsnorm_det import aot, demo

    built = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(aot, "build_all", lambda archs, out: built.append(archs) or [])
    assert demo._main([]) == 0
    out = capsys.readouterr().out
    assert "No CUDA GPU" in out and built == [["sm_90a"]]
    rows = [l for l in out.splitlines() if l.startswith("(sm_90a")]
    assert rows and any("H=4096" in l for l in rows) and all(len(l) <= 160 for l in rows)
    assert "--all" in out


@pytest.mark.parametrize("residual", [False, True])
def test_eager_and_compiled_paths_are_one_computation(residual, monkeypatch):
    """rmsnorm runs an autograd.Function eagerly and the custom ops under torch.compile: the same
    calls of api.forward / api.backward (here the FP32 formula on the CPU), the same gradients."""
    calls = []

    def forward(x, w, eps, residual=None):
        calls.append("fwd")
        return ref.forward_fp32(x, w, eps, residual)

    def backward(g, x, w, rstd, g_residual=None):
        calls.append("bwd")
        return ref.backward_fp32(g, x, w, rstd, g_residual)

    monkeypatch.setattr(api, "forward", forward)
    monkeypatch.setattr(api, "backward", backward)
    torch.manual_seed(0)
    x0, r0 = (torch.randn(6, 64).to(torch.bfloat16) for _ in range(2))
    w0 = torch.rand(64) + 0.5
    gy, gh = (torch.randn(6, 64).to(torch.bfloat16) for _ in range(2))
    graphs = []

    def backend(gm, example_inputs):  # dynamo's graph as it is, run eagerly
        graphs.append({str(n.target) for n in gm.graph.nodes if n.op == "call_function"})
        return gm.forward

    def run(norm):
        x, w = x0.clone().requires_grad_(True), w0.clone().requires_grad_(True)
        r = r0.clone().requires_grad_(True) if residual else None
        calls.clear()
        out = norm(x, w, r)
        if residual:
            torch.autograd.backward(list(out), [gy, gh])
        else:
            out.backward(gy)
        y = out[0] if residual else out
        return y, x.grad, w.grad, (r.grad if residual else None), (type(y.grad_fn).__name__, list(calls))

    def plain(x, w, r):
        return crd.rmsnorm(x, w, 1e-5, residual=r)

    eager = run(plain)
    compiled = run(torch.compile(plain, backend=backend, fullgraph=True, dynamic=False))
    assert eager[-1] == ("_EagerRMSNormBackward", ["fwd", "bwd"])
    assert compiled[-1][1] == ["fwd", "bwd"] and compiled[-1][0] != eager[-1][0]
    assert graphs and any("cake_rmsnorm_det.rmsnorm_fwd" in t for t in graphs[0])
    for a, b in zip(eager[:-1], compiled[:-1]):
        assert (a is None and b is None) or torch.equal(a, b)
    if residual:
        assert torch.equal(eager[3], eager[1])  # dL/dr = dL/dx through h = x + r


def test_bench_shape_table_takes_widths_outside_it():
    """The benchmark's table is MEASURE.md's (7 widths x 7 token counts, 3 key and 4 query views);
    a width outside it (a generic program's) joins at the same token counts."""
    from cake_rmsnorm_det import bench

    table = bench.shapes(False)
    assert len(table) == len(bench.WIDTHS) * len(bench.TOKENS) + 3 + 4
    more = bench.shapes(False, (8192, 4096))
    extra = [s for s in more if s not in table]
    assert [s["T"] for s in extra] == list(bench.TOKENS) and {s["H"] for s in extra} == {8192}
    assert all(s["kind"] == "rows" and s["label"] == f"[{s['T']},8192]" for s in extra)
