#!/usr/bin/env python3
"""The measurement lib/planner/flux.c is checked against (tests/planner/
test_planner_flux.c holds its figures): torchtitan 0.3.0's FluxModel on the
CPU in float32 with full activation checkpointing (each double and single
block under torch.utils.checkpoint, non-reentrant, as FullAC's
checkpoint_wrapper), AdamW (fused, as 0.3.0 builds it), at a reduced size: flux-debug's layout with
hidden 512 and 4 heads (2 double, 2 single blocks), local batch 4 of 256-px
images (256 latent tokens) and 256 T5 tokens.

Prints the model's parameters and the run's peak: VmHWM over three steps
(from the second on, the optimizer's states exist while the backward makes
the gradients again) less the resident memory before the model and the
inputs were made: the weights, gradients, states and activations as the
allocator holds them.  The planner's one-rank plan of the same job counts
params, grads, optimizer and activations.

    PYTHONPATH=<torchtitan 0.3.0> python3 scripts/planner_flux_measure.py [BATCH]

BATCH (default 4): two batch sizes' difference is the activations of the
difference alone (the allocator's and the libraries' own memory cancels).
"""
import inspect
import sys

import torch
from torch.utils.checkpoint import checkpoint

import torchtitan.models.flux as F

B, IMG_TOKENS, TXT_TOKENS = 4, 256, 256


def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return -1


def small_model():
    src = inspect.getsource(F._flux_debug).replace("hidden_size = 1536", "hidden_size = 512")
    src = src.replace("num_heads = 12", "num_heads = 4").replace("def _flux_debug", "def _small")
    ns = {}
    exec(src, F.__dict__, ns)
    return ns["_small"]().build()


def main():
    global B
    if len(sys.argv) == 2:
        B = int(sys.argv[1])
    torch.manual_seed(0)
    torch.set_num_threads(2)
    base = status_kib("VmRSS:")
    m = small_model()
    m.init_states() if hasattr(m, "init_states") else None
    for blocks in (m.double_blocks, m.single_blocks):
        for b in blocks:
            fwd = b.forward
            b.forward = (lambda f: lambda *a, **k: checkpoint(f, *a, use_reentrant=False, **k))(fwd)
    n = sum(p.numel() for p in m.parameters())
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)
    img = torch.randn(B, IMG_TOKENS, 64)
    img_ids = torch.zeros(B, IMG_TOKENS, 3)
    img_ids[..., 1] = torch.arange(IMG_TOKENS).div(16, rounding_mode="floor").float()
    img_ids[..., 2] = (torch.arange(IMG_TOKENS) % 16).float()
    txt = torch.randn(B, TXT_TOKENS, 4096)
    txt_ids = torch.zeros(B, TXT_TOKENS, 3)
    y = torch.randn(B, 768)
    t = torch.rand(B)
    target = torch.randn(B, IMG_TOKENS, 64)
    for step in range(3):
        pred = m(img, img_ids, txt, txt_ids, t, y)
        loss = torch.nn.functional.mse_loss(pred, target)
        loss.backward()
        opt.step()
        opt.zero_grad()
    peak = (status_kib("VmHWM:") - base) * 1024
    print(f"batch {B}, params {n}; peak {peak} bytes above the resident memory before the model")


if __name__ == "__main__":
    main()
