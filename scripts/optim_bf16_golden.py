#!/usr/bin/env python3
"""Golden data for titan's AdamW on bfloat16 parameters (tests/optim/test_optim.c),
what training.dtype = "bfloat16" trains with.

torchtitan 0.2.2 builds torch.optim.AdamW with implementation "fused" (its
default): states made by zeros_like(param), so bfloat16 like the parameters,
each step computed in float32 and rounded back to bfloat16.  This script runs
exactly that on the CPU: random bfloat16 parameters of two tensors (one with
weight decay 0.1, one exempt, as two param groups), STEPS steps with a fresh
random bfloat16 gradient each, and records the inputs and, after every step,
the parameters and both states.

Writes into tests/optim/golden/ (or the folder given as argv[1]):
  adamw_bf16.json   seed, sizes, hyper-parameters, torch's version
  adamw_bf16.bin    uint16 LE bfloat16 bit patterns: the initial parameters
                    (N), then per step the gradient (N) and the parameters,
                    exp_avg and exp_avg_sq after it (N each); N is the two
                    tensors' sizes together, the decayed tensor first

Run with the interpreter in $PYTHON (torch); never needed by CI.
"""
import json
import os
import sys

import numpy as np
import torch

SEED = 20261203
SIZES = (1031, 261)       # odd lengths: the kernels' tails
STEPS = 3
LR, BETAS, EPS, WD = 1e-2, (0.9, 0.95), 1e-8, 0.1


def bits(t):
    return t.detach().contiguous().view(torch.int16).numpy().astype("<u2")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "optim", "golden")
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(SEED)
    params = [torch.nn.Parameter((0.05 * torch.randn(n, generator=g)).to(torch.bfloat16))
              for n in SIZES]
    opt = torch.optim.AdamW([{"params": [params[0]], "weight_decay": WD},
                             {"params": [params[1]], "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS, fused=True)
    chunks = [np.concatenate([bits(p) for p in params])]
    for step in range(STEPS):
        # gradients of growing scale, so the states are not all tiny
        for p in params:
            p.grad = ((step + 1) * 1e-2 * torch.randn(p.shape, generator=g)).to(torch.bfloat16)
        chunks.append(np.concatenate([bits(p.grad) for p in params]))
        opt.step()
        st = [opt.state[p] for p in params]
        assert all(s["exp_avg"].dtype == torch.bfloat16 for s in st)
        chunks.append(np.concatenate([bits(p) for p in params]))
        chunks.append(np.concatenate([bits(s["exp_avg"]) for s in st]))
        chunks.append(np.concatenate([bits(s["exp_avg_sq"]) for s in st]))
    np.concatenate(chunks).tofile(os.path.join(out, "adamw_bf16.bin"))
    meta = {"seed": SEED, "sizes": list(SIZES), "steps": STEPS, "lr": LR,
            "beta1": BETAS[0], "beta2": BETAS[1], "eps": EPS, "weight_decay": WD,
            "torch": torch.__version__, "implementation": "fused",
            "file": "adamw_bf16.bin"}
    with open(os.path.join(out, "adamw_bf16.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print(f"wrote {out}/adamw_bf16.bin ({sum(SIZES)} elements, {STEPS} steps, "
          f"torch {torch.__version__})")


if __name__ == "__main__":
    main()
