"""PyTorch integration on the GPU: autograd, torch.compile, CUDA Graphs, streams, training."""

from __future__ import annotations

import pytest
import torch

import cake_rmsnorm_det as crd
from cake_rmsnorm_det import reference as ref

from helpers import assert_close_bf16, assert_dx_close, bits_equal

pytestmark = pytest.mark.gpu
EPS = 1e-6


def _fp64_grads(x, w, r, gy, gh):
    xd = x.double().detach().requires_grad_(True)
    wd = w.double().detach().requires_grad_(True)
    rd = r.double().detach().requires_grad_(True) if r is not None else None
    h = xd + rd if rd is not None else xd
    if rd is not None:  # the forward normalizes h_new = BF16(x + r): round, pass the gradient through
        h = h + (h.to(torch.bfloat16).double() - h).detach()
    y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS) * wd
    loss = (y * gy.double()).sum() + ((h * gh.double()).sum() if gh is not None else 0)
    loss.backward()
    return xd.grad, wd.grad, (rd.grad if rd is not None else None)


@pytest.mark.parametrize("wdtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("residual", [False, True])
def test_rmsnorm_gradients(wdtype, residual, device):
    x = torch.randn(300, 1024, device=device).to(torch.bfloat16).requires_grad_(True)
    r = torch.randn(300, 1024, device=device).to(torch.bfloat16).requires_grad_(True) if residual else None
    w = (torch.rand(1024, device=device) + 0.5).to(wdtype).requires_grad_(True)
    gy = torch.randn(300, 1024, device=device).to(torch.bfloat16)
    gh = torch.randn(300, 1024, device=device).to(torch.bfloat16) if residual else None
    out = crd.rmsnorm(x, w, EPS, residual=r)
    if residual:
        y, h = out
        torch.autograd.backward([y, h], [gy, gh])
    else:
        out.backward(gy)
    assert w.grad.dtype == wdtype and x.grad.dtype == torch.bfloat16
    # the kernels' own rstd is the reference point for dx and dw
    xin = (x.detach().float() + r.detach().float()).to(torch.bfloat16) if residual else x.detach()
    _, rstd = crd.forward(xin, w.detach(), EPS)
    assert_dx_close(x.grad, gy, xin, w.detach(), rstd, gh)
    if residual:
        assert bits_equal(r.grad, x.grad)
    dw64 = ref.dw_fp64(gy, xin, rstd)
    dw_ok = (w.grad.double() - dw64).abs() <= (1e-4 + 1e-4 * dw64.abs()) + (
        dw64.abs() * 2**-8 if wdtype == torch.bfloat16 else 0)
    assert bool(dw_ok.all())
    # and against autograd through the formula in FP64 (the formula's rstd): BF16 tolerance
    gx64, gw64, _ = _fp64_grads(x.detach(), w.detach(), r.detach() if residual else None, gy, gh)
    assert torch.allclose(x.grad.double(), gx64, atol=2e-2, rtol=2e-2)
    assert torch.allclose(w.grad.double(), gw64, atol=1e-1, rtol=2e-2)


def test_module_mirrors_torch_rmsnorm(device):
    ours = crd.RMSNorm(512, eps=1e-5, device=device)
    theirs = torch.nn.RMSNorm(512, eps=1e-5, device=device)
    ours.load_state_dict(theirs.state_dict())
    assert set(ours.state_dict()) == set(theirs.state_dict())
    x = torch.randn(64, 512, device=device).to(torch.bfloat16)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 1.5)
        ours.weight.copy_(theirs.weight)
    y = ours(x)
    y_ref = theirs(x.float()).to(torch.bfloat16)
    assert (y.float() - y_ref.float()).abs().max() <= 2 ** -6 * y_ref.float().abs().max()
    assert "512" in repr(ours) and "eps=1e-05" in repr(ours)
    nw = crd.RMSNorm(512, elementwise_affine=False, device=device)
    assert nw.weight is None and nw(x).shape == x.shape
    # eps=None (torch's default) takes the BF16 input's epsilon, 2**-7, in the module and the function
    bf16_eps = torch.finfo(torch.bfloat16).eps
    assert bf16_eps == 2.0 ** -7
    dflt = crd.RMSNorm(512, device=device)
    y_none = dflt(x)
    y_eps = crd.rmsnorm(x, dflt.weight, eps=bf16_eps)
    assert torch.equal(y_none, y_eps) and torch.equal(crd.rmsnorm(x, dflt.weight, eps=None), y_eps)
    assert not torch.equal(y_none, crd.rmsnorm(x, dflt.weight, eps=1e-6))


@pytest.mark.parametrize("residual", [False, True])
def test_module_several_normalized_dims_is_the_flat_row(residual, device):
    # normalized_shape (4, 64) normalizes rows of 256, as torch.nn.RMSNorm does: same bits as the
    # flat call, gradients in the module's shapes
    ours = crd.RMSNorm((4, 64), eps=EPS, device=device)
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5)
    x = torch.randn(3, 5, 4, 64, device=device).to(torch.bfloat16).requires_grad_(True)
    r = torch.randn_like(x).requires_grad_(True) if residual else None
    out = ours(x, r)
    y = out[0] if residual else out
    flat = crd.rmsnorm(x.detach().reshape(3, 5, 256), ours.weight.detach().reshape(256), EPS,
                       None if r is None else r.detach().reshape(3, 5, 256))
    y_flat = flat[0] if residual else flat
    assert y.shape == x.shape and bits_equal(y, y_flat.view(x.shape))
    if residual:
        assert out[1].shape == x.shape and bits_equal(out[1], flat[1].view(x.shape))
    theirs = torch.nn.RMSNorm((4, 64), eps=EPS, device=device)
    with torch.no_grad():
        theirs.weight.copy_(ours.weight)
    h = (x.detach().float() + r.detach().float()).to(torch.bfloat16) if residual else x.detach()
    y_ref = theirs(h.float())
    assert (y.float() - y_ref).abs().max() <= 2 ** -6 * y_ref.abs().max()
    gy = torch.randn_like(y)
    y.backward(gy)
    assert x.grad.shape == x.shape and ours.weight.grad.shape == (4, 64)
    _, rstd = crd.forward(h.reshape(-1, 256), ours.weight.detach().reshape(256), EPS)
    dx, dw = crd.backward(gy.reshape(-1, 256), h.reshape(-1, 256), ours.weight.detach().reshape(256), rstd)
    assert bits_equal(x.grad.reshape(-1, 256), dx) and bits_equal(ours.weight.grad.reshape(256), dw)
    if residual:
        assert bits_equal(r.grad, x.grad)


def _model(device, wdtype=torch.float32):
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = crd.RMSNorm(256, dtype=wdtype, device=device)
            self.fc = torch.nn.Linear(256, 256, device=device, dtype=torch.bfloat16)

        def forward(self, x, res):
            y, h = self.norm(x, res)
            return self.fc(y), h

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList([Block() for _ in range(2)])
            self.out = crd.RMSNorm(256, dtype=wdtype, device=device)

        def forward(self, x):
            res = torch.zeros_like(x)
            for b in self.blocks:
                x, res = b(x, res)
            return self.out(x + res)

    return Net()


def test_compile_fullgraph_no_recompile(device):
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = _model(device)
    compiles = []

    def counting_inductor(gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx

        compiles.append(len(gm.graph.nodes))
        return compile_fx(gm, example_inputs)

    # automatic dynamic shapes: the first token counts may compile (static, then symbolic T);
    # after that no token count may compile again
    compiled = torch.compile(net, fullgraph=True, backend=counting_inductor)
    settled = None
    for i, t in enumerate((64, 100, 333, 1000, 4097)):
        x = torch.randn(t, 256, device=device).to(torch.bfloat16)
        y_c = compiled(x)
        y_e = net(x)
        assert bits_equal(y_c, y_e), "compiled and eager bits differ"
        y_c.float().sum().backward()
        if i == 1:
            settled = len(compiles)
    assert len(compiles) == settled, f"recompiled for a new token count: {len(compiles)} vs {settled}"
    explain = torch._dynamo.explain(net)(torch.randn(50, 256, device=device).to(torch.bfloat16))
    assert explain.graph_break_count == 0


def test_cuda_graph_replay_bits(device):
    x = torch.randn(512, 2048, device=device).to(torch.bfloat16)
    w = (torch.rand(2048, device=device) + 0.5).requires_grad_(False)
    g = torch.randn_like(x)
    ws = crd.workspace(512, 2048, device)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            y, rstd = crd.forward(x, w, EPS)
            dx, dw = crd.backward(g, x, w, rstd, workspace=ws)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y, rstd = crd.forward(x, w, EPS)
        dx, dw = crd.backward(g, x, w, rstd, workspace=ws)
    for i in range(4):
        x.copy_(torch.randn_like(x))
        g.copy_(torch.randn_like(g))
        graph.replay()
        torch.cuda.synchronize()
        y_e, rstd_e = crd.forward(x, w, EPS)
        dx_e, dw_e = crd.backward(g, x, w, rstd_e)
        assert bits_equal(y, y_e) and bits_equal(dx, dx_e) and bits_equal(dw, dw_e), f"replay {i} differs"


def test_two_streams_with_own_workspaces(device):
    data = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        x = torch.randn(8192, 4096, device=device).to(torch.bfloat16)
        w = torch.rand(4096, device=device) + 0.5
        g = torch.randn_like(x)
        _, rstd = crd.forward(x, w, EPS)
        data.append((g, x, w, rstd))
    alone = [crd.backward(*d) for d in data]
    with crd.force_form("single"):
        alone_single = [crd.backward(*d) for d in data]
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    wss = [crd.workspace(8192, 4096, device) for _ in streams]
    for form, ref_out in (("pair", alone), ("single", alone_single)):
        with crd.force_form(form):
            for _ in range(3):
                outs = []
                for s, ws, d in zip(streams, wss, data):
                    s.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(s):
                        outs.append(crd.backward(*d, workspace=ws))
                torch.cuda.synchronize()
                for (dx, dw), (rdx, rdw) in zip(outs, ref_out):
                    assert bits_equal(dx, rdx) and bits_equal(dw, rdw)


def _train(device, steps=50):
    torch.manual_seed(1234)
    net = _model(device)
    head = torch.nn.Linear(256, 16, device=device, dtype=torch.bfloat16)
    params = list(net.parameters()) + list(head.parameters())
    opt = torch.optim.SGD(params, lr=1e-2)
    gen = torch.Generator(device=device).manual_seed(99)
    losses = []
    for _ in range(steps):
        x = torch.randn(128, 256, device=device, generator=gen).to(torch.bfloat16)
        target = torch.randint(0, 16, (128,), device=device, generator=gen)
        loss = torch.nn.functional.cross_entropy(head(net(x)).float(), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses), [p.detach().clone() for p in params]


def test_training_bitwise_reproducible(device):
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        l1, p1 = _train(device)
        l2, p2 = _train(device)
    finally:
        torch.use_deterministic_algorithms(False)
    assert bits_equal(l1, l2), "losses differ between runs"
    assert all(bits_equal(a, b) for a, b in zip(p1, p2)), "parameters differ between runs"
