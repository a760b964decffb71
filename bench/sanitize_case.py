"""One small call of each form and engine (forward regs/l1, narrow, wide and packed rows; backward
direct/ring in the fused, single and pair forms, one row in one CTA; rows read into L1 or streamed;
residual; a strided view; a generic width; the fused form on a capped grid and with its dw tiles
split over clusters), for compute-sanitizer."""

import contextlib

import torch

import cake_rmsnorm_det as crd
from cake_rmsnorm_det import cake_jit, layout

torch.manual_seed(0)
dev = torch.device("cuda")
for hidden, rows in ((256, 1), (1536, 1), (1000, 1), (256, 4), (256, 8), (256, 264), (4096, 1), (4096, 6), (6144, 64), (2048, 600), (5120, 300),
                     (1000, 77)):
    x = torch.randn(rows, hidden, device=dev).to(torch.bfloat16)
    r = torch.randn_like(x)
    w = torch.rand(hidden, device=dev) + 0.5
    g = torch.randn_like(x)
    for wide in (False, True) if cake_jit.fwd_has_wide(hidden) else (False,):
        with crd.force_engine("regs"), crd.force_wide(wide):
            crd.forward(x, w, 1e-6, residual=r)
    if layout.fwd_has_pack(hidden):  # packed rows, both engines, a partial last CTA
        for fe in ("regs", "l1"):
            with crd.force_engine(fe), crd.force_pack(layout.FWD_PACK):
                crd.forward(x, w, 1e-6, residual=r)
    for (fe, be), l1 in zip((("regs", "direct"), ("l1", "ring"), ("l1", "direct"), ("regs", "direct")),
                            (False, False, True, True)):  # rows read into L1: both forward engines, direct
        with crd.force_engine(fe), crd.force_wide(False), crd.force_l1_loads(l1):
            y, h, rstd = crd.forward(x, w, 1e-6, residual=r)
        for form in ("pair", "single") + (("fused",) if cake_jit.dw_partition(rows, hidden)[0] == 1 else ()):
            with crd.force_form(form), crd.force_engine(be), crd.force_l1_loads(l1):
                crd.backward(g, h, w, rstd, g)
# the fused form's successive launches of a capped grid (at H 4096, its last row count)
for hidden, rows, cap in ((512, 40, 3), (4096, cake_jit.one_row_chunks(4096), 5)):
    x = torch.randn(rows, hidden, device=dev).to(torch.bfloat16)
    w = torch.rand(hidden, device=dev) + 0.5
    y, rstd = crd.forward(x, w, 1e-6)
    with crd.force_form("fused"), crd.cap_ctas(cap):
        crd.backward(torch.randn_like(x), x, w, rstd)
for hidden, rows, cluster, cap in ((256, 256, 0, 0), (1000, 150, 4, 0), (1536, 384, 8, 0), (512, 200, 2, 3)):
    # split tiles: the rule's (cluster 0), a generic width's last tile half past H, capped launches
    x = torch.randn(rows, hidden, device=dev).to(torch.bfloat16)
    w = torch.rand(hidden, device=dev) + 0.5
    y, rstd = crd.forward(x, w, 1e-6)
    with crd.force_form("fused"), (crd.force_tile_cluster(cluster) if cluster else contextlib.nullcontext()), \
            (crd.cap_ctas(cap) if cap else contextlib.nullcontext()):
        crd.backward(torch.randn_like(x), x, w, rstd)
for tokens in (2, 33):  # the query view in the fused form (48 rows) and above it
    buf = torch.randn(tokens, 24, 512, device=dev).to(torch.bfloat16)
    q = buf[:, :, :256]
    y, rstd = crd.forward(q, torch.ones(256, device=dev), 1e-6)
    for be in ("direct", "ring"):
        with crd.force_engine(be):
            crd.backward(torch.randn_like(q), q, torch.ones(256, device=dev), rstd)
torch.cuda.synchronize()
print("sanitize cases done")
