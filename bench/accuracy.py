"""dw accuracy table (docs/accuracy.md): worst ratio to the budget |dw - ref| / (1e-4 + 1e-4|ref|),
ref = FP64 sum at the kernel's rstd, for every qualified width x input family x weight dtype at
T 4096 and 65536, beside the FP32 eager reduction and torch.compile's.

    python bench/accuracy.py > accuracy.md
"""

import sys
import time

import torch

import cake_rmsnorm_det as crd
from cake_rmsnorm_det import bench
from cake_rmsnorm_det import reference as ref


def main() -> int:
    bench.lift_recompile_limits()
    dev = torch.device("cuda")
    compiled = torch.compile(ref.dw_fp32_eager, dynamic=False)
    props = torch.cuda.get_device_properties(dev)
    print(f"GPU {props.name} ({props.multi_processor_count} SMs), {time.strftime('%Y-%m-%d')}, "
          f"torch {torch.__version__}. Ratio = max_j |dw_j - ref_j| / (1e-4 + 1e-4 |ref_j|); "
          "<= 1 is within budget; ref = FP64 sum of g*x*rstd at the kernel's FP32 rstd.\n")
    print("| H | T | family | weight | cake | FP32 eager | torch.compile | cake / eager |")
    print("|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for h in (256, 512, 1536, 2048, 4096, 5120, 6144):
        for t in (4096, 65536):
            for fam in ref.FAMILIES:
                x, g = ref.input_family(fam, t, h, dev, seed=h + t)
                for wd in (torch.bfloat16, torch.float32):
                    w = (torch.rand(h, device=dev) + 0.5).to(wd)
                    _, rstd = crd.forward(x, w, 1e-6)
                    _, dw = crd.backward(g, x, w, rstd)
                    truth = ref.dw_fp64(g, x, rstd)
                    ours = ref.dw_error_ratio(dw, truth)
                    eager = ref.dw_error_ratio(ref.dw_fp32_eager(g, x, rstd), truth)
                    comp = ref.dw_error_ratio(compiled(g, x, rstd), truth)
                    worst = max(worst, ours)
                    wn = "bf16" if wd == torch.bfloat16 else "fp32"
                    print(f"| {h} | {t} | {fam} | {wn} | {ours:.2e} | {eager:.2e} | {comp:.2e} | "
                          f"{ours / eager if eager else 0:.1e} |", flush=True)
    print(f"\nworst cake ratio over the table: {worst:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
