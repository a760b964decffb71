"""The demo: JIT-build, train a small decoder twice and show the bits match, time the norm.

    python -m cake_rmsnorm_det.demo [--steps 40] [--hidden 1024]

Without a GPU it says so, prints the route table and builds every program ahead of time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch


def _decoder(vocab: int, hidden: int, blocks: int, norm_cls, wdtype, device):
    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = norm_cls(hidden, eps=1e-6, dtype=wdtype, device=device)
            self.up = torch.nn.Linear(hidden, 4 * hidden, device=device, dtype=torch.bfloat16)
            self.down = torch.nn.Linear(4 * hidden, hidden, device=device, dtype=torch.bfloat16)

        def forward(self, x: torch.Tensor, res: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            """The block's output and the residual stream after its norm's fused add."""
            if isinstance(self.norm, torch.nn.RMSNorm):      # the reference: same math, PyTorch's op
                h = (x.float() + res.float()).to(torch.bfloat16)
                y = self.norm(h.float()).to(torch.bfloat16)
            else:
                y, h = self.norm(x, res)
            return self.down(torch.nn.functional.gelu(self.up(y))), h

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, hidden, device=device, dtype=torch.bfloat16)
            self.blocks = torch.nn.ModuleList([Block() for _ in range(blocks)])
            self.final = norm_cls(hidden, eps=1e-6, dtype=wdtype, device=device)
            self.head = torch.nn.Linear(hidden, vocab, device=device, dtype=torch.bfloat16)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            """Logits of every position."""
            x = self.emb(tokens)
            res = torch.zeros_like(x)
            for b in self.blocks:
                x, res = b(x, res)
            h = (x.float() + res.float()).to(torch.bfloat16)
            y = self.final(h.float()).to(torch.bfloat16) if isinstance(self.final, torch.nn.RMSNorm) else self.final(h)
            return self.head(y)

    return Net()


def _train(norm_cls, args, device, wdtype):
    torch.manual_seed(0)
    net = _decoder(args.vocab, args.hidden, args.blocks, norm_cls, wdtype, device)
    opt = torch.optim.AdamW(net.parameters(), lr=3e-4)
    gen = torch.Generator(device=device).manual_seed(1)
    losses = []
    for _ in range(args.steps):
        tokens = torch.randint(0, args.vocab, (args.batch, args.seq), device=device, generator=gen)
        logits = net(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, args.vocab), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    grads = torch.cat([p.grad.float().flatten() for p in net.parameters() if p.grad is not None])
    return torch.stack(losses), grads, [p.detach().clone() for p in net.parameters()]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def gpu_demo(args: argparse.Namespace) -> int:
    """JIT-build (or load) the programs, train the decoder twice with this package's RMSNorm and
    compare the two runs' losses, gradients and parameters bit for bit, once more with
    torch.nn.RMSNorm for the losses' distance, then time the norm against torch.compile; 0 when the
    two runs' bits match."""
    import cake_rmsnorm_det as crd
    from cake_rmsnorm_det import cake_jit
    from cake_rmsnorm_det.programs import current_arch, find_built, load_program

    device = torch.device("cuda")
    arch = current_arch(device)
    props = torch.cuda.get_device_properties(device)
    print(f"GPU: {props.name} ({props.multi_processor_count} SMs), arch {arch}")
    rows = args.batch * (args.seq - 1)
    print(f"model: {args.blocks} blocks, H={args.hidden}, {rows} tokens a step, FP32 norm weights")
    for pass_ in ("fwd", "bwd"):
        r = cake_jit.route(arch, pass_, args.hidden, "fp32", pass_ == "fwd", rows)
        state = "cached" if find_built(r.program, arch) else "building"
        t0 = time.perf_counter()
        print(f"  {pass_}: {r.program.key} ({r.program.name}) ... {state}", end="", flush=True)
        load_program(r.program, arch)
        print(f" ready in {time.perf_counter() - t0:.1f} s", flush=True)

    print(f"training {args.steps} steps, twice ...", flush=True)
    l1, g1, p1 = _train(crd.RMSNorm, args, device, torch.float32)
    l2, g2, p2 = _train(crd.RMSNorm, args, device, torch.float32)
    same_loss = torch.equal(_bits(l1), _bits(l2))
    same_grad = torch.equal(_bits(g1), _bits(g2))
    same_par = all(torch.equal(_bits(a), _bits(b)) for a, b in zip(p1, p2))
    print(f"  losses  first {l1[0].item():.6f} last {l1[-1].item():.6f}")
    print(f"  run 1 vs run 2: losses bitwise equal: {same_loss}; gradients: {same_grad}; parameters: {same_par}")
    lt, _, _ = _train(torch.nn.RMSNorm, args, device, torch.float32)
    print(f"  vs torch.nn.RMSNorm: max |loss difference| over {args.steps} steps = "
          f"{(l1 - lt).abs().max().item():.3e} (close, not bitwise: different reduction order)")

    from .bench import Timer, eager_bwd, eager_fwd

    timer = Timer(device)
    x = torch.randn(rows, args.hidden, device=device).to(torch.bfloat16)
    g = torch.randn_like(x)
    w = torch.rand(args.hidden, device=device) + 0.5
    y, rstd = crd.forward(x, w, 1e-6)
    cf = torch.compile(eager_fwd, dynamic=False)
    cb = torch.compile(eager_bwd, dynamic=False)
    rows_t = []
    for name, ours, theirs in (("forward", lambda: crd.forward(x, w, 1e-6), lambda: cf(x, w, 1e-6)),
                               ("backward", lambda: crd.backward(g, x, w, rstd), lambda: cb(g, x, w, rstd))):
        a, b = timer(ours), timer(theirs)
        rows_t.append((name, a, b))
    print(f"norm kernel time at [{rows}, {args.hidden}] (CUPTI kernel-active, cold L2, median of 30):")
    print(f"  {'pass':9s} {'cake us':>9s} {'torch.compile us':>17s} {'speedup':>8s}")
    for name, a, b in rows_t:
        print(f"  {name:9s} {a:9.2f} {b:17.2f} {b / a:7.2f}x")
    ok = same_loss and same_grad and same_par
    print("DEMO OK: bitwise reproducible" if ok else "DEMO FAILED: runs differ")
    return 0 if ok else 1


def cpu_demo(args: argparse.Namespace) -> int:
    """Without a GPU: say so, print the route table and build every program for sm_90a ahead of time."""
    from .aot import build_all
    from .routes import route_table

    print("No CUDA GPU on this machine: the kernels cannot run here. Showing the routes of sm_90a")
    print("and building every program ahead of time instead (what a wheel would bundle).\n")
    table = route_table("sm_90a").splitlines()
    shown = [l for l in table[1:] if ("H=4096" in l or "H=256," in l) and "w=bf16, residual=no" in l]
    # each window's evidence cut to its start: the full text is the routes command's
    print("\n".join(table[:1] + [l if len(l) <= 160 else l[:157] + "..." for l in shown]))
    print(f"... ({len(table) - 1} windows in all, with the measurements behind them: "
          "`python -m cake_rmsnorm_det.routes --arch sm_90a --all`)\n")
    out = Path(tempfile.mkdtemp(prefix="cake-aot-"))
    res = build_all(["sm_90a"], out)
    return 1 if any(r[3].startswith("FAILED") for r in res) else 0


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cake_rmsnorm_det.demo", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=513)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        return cpu_demo(a)
    return gpu_demo(a)


if __name__ == "__main__":
    sys.exit(_main())
