#!/usr/bin/env python3
"""Goldens for lib/flux (tests/flux/test_flux_model.c): torchtitan 0.3.0's
FluxModel (models/flux/model/model.py) on the flux-debug flavor's config as
its __init__.py builds it (hidden 1536, 12 heads, 2 double and 2 single
blocks, axes_dim (16, 56, 56), 258M parameters), one training step's
forward and backward as FluxTrainer.forward_backward_step computes them in
float32: the noisy latent (1 - t) x + t noise, the prediction, the loss
sum((pred - (noise - x))^2) / numel (MSELoss's sum over
global_valid_tokens = numel), and every parameter's gradient.

Shrunk from a training step: the sequences and the batch only.  2 samples of
a 16-channel 8 x 6 latent (12 packed image tokens of 64 values; non-square,
so rows and columns cannot be confused), 7 text tokens of T5's 4096 states
(flux_debugmodel's T5 length is 256).  The text position ids are small
integers on all three axes (the trainer gives zeros) so that every RoPE axis
turns both streams.

The weights are drawn, not initialised as 0.3.0 does: the zero-initialised
modulations and final layer get values too, so every parameter has a
gradient (0.3.0's step 1 gives only final_layer.linear one).  The weights and
the large inputs are not committed: they come from the counter-based
generator of scripts/fluxae_golden.py (tests/support/testutil.h's
test_counter_draw), described per tensor in weights.json:
  tensor t (0-based: the state dict's order, then the inputs x, noise, txt, y),
  element j: v = test_counter_draw(seed, t, j) in [-1, 1), value = offset + scale * v.

Gradients are kept small: for a tensor of at most 256 values all of them, for
a larger one 256 values at the positions idx_j = splitmix64(seed2 + t * 2^32 + j)
mod numel (the generator's 64-bit output before its float), and for each
tensor its sum of squares in float64.

tests/flux/golden/:
  weights.json     {"seed", "sample_seed", "samples", "tensors": [{"name", "shape",
                   "offset", "scale"}, ...]} (the inputs last, named input.*)
  io.safetensors   "t" (B) float32 timesteps; "img_ids" (B, L, 3), "txt_ids"
                   (B, T, 3) float32; "pred" (B, L, 64); "loss" (1) float32;
                   "grad_samples" (n_params, 256) float32 (a short tensor's
                   first numel columns); "grad_sumsq" (n_params) float64

Run from the repository root with the reference venv:
  PYTHONPATH=<torchtitan 0.3.0> python scripts/flux_model_golden.py
"""
import json
import math
import os

import numpy as np
import torch
from safetensors.torch import save_file

from torchtitan.models.flux import flux_configs
from torchtitan.models.flux.utils import create_position_encoding_for_latents

OUT = "tests/flux/golden"
SEED = 20261205
SAMPLE_SEED = 77
SAMPLES = 256
B, C, LH, LW, T = 2, 16, 8, 6, 7


def splitmix(seed, t, n):
    """The generator's 64-bit outputs j = 0 .. n-1 for tensor t."""
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + np.uint64(t) * np.uint64(1 << 32) + np.arange(n, dtype=np.uint64)
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def draw(t, n, off, sc):
    u = (splitmix(SEED, t, n) >> np.uint64(40)).astype(np.int64) - (1 << 23)
    v = u.astype(np.float32) / np.float32(1 << 23)
    return (np.float32(off) + np.float32(sc) * v).astype(np.float32)


def spread(name, shape):
    """(offset, scale): linears near their fan-in's scale (a power of two),
    biases around 0, RMSNorm weights around 1."""
    if "norm" in name:
        return 1.0, 0.25
    if name.endswith(".bias"):
        return 0.0, 0.125
    return 0.0, 2.0 ** round(math.log2(1 / math.sqrt(shape[1])))


def sample_grads(grads):
    """Each gradient's SAMPLES values (all of a short one's) and its sum of
    squares in float64, in the order of grads (the state dict's)."""
    samples = np.zeros((len(grads), SAMPLES), dtype=np.float32)
    sumsq = np.zeros(len(grads), dtype=np.float64)
    for t, g in enumerate(grads):
        g = g.float().reshape(-1).numpy()
        if g.size <= SAMPLES:
            samples[t, :g.size] = g
        else:
            idx = (splitmix(SAMPLE_SEED, t, SAMPLES) % np.uint64(g.size)).astype(np.int64)
            samples[t] = g[idx]
        sumsq[t] = np.sum(g.astype(np.float64) ** 2)
    return samples, sumsq


def main():
    os.makedirs(OUT, exist_ok=True)
    model = flux_configs["flux-debug"]().build()
    manifest, sd = [], {}
    for t, (name, p) in enumerate(model.state_dict().items()):
        off, sc = spread(name, tuple(p.shape))
        sd[name] = torch.from_numpy(draw(t, p.numel(), off, sc)).reshape(p.shape)
        manifest.append({"name": name, "shape": list(p.shape), "offset": off, "scale": sc})
    model.load_state_dict(sd)
    del sd
    n_params = len(manifest)
    L = (LH // 2) * (LW // 2)
    inputs = {}
    for name, shape, off, sc in (("input.x", (B, L, 4 * C), 0.0, 1.0),
                                 ("input.noise", (B, L, 4 * C), 0.0, 1.0),
                                 ("input.txt", (B, T, 4096), 0.0, 1.0),
                                 ("input.y", (B, 768), 0.0, 1.0)):
        t = len(manifest)
        inputs[name] = torch.from_numpy(draw(t, math.prod(shape), off, sc)).reshape(shape)
        manifest.append({"name": name, "shape": list(shape), "offset": off, "scale": sc})

    torch.manual_seed(SEED)
    ts = torch.rand(B)
    img_ids = create_position_encoding_for_latents(B, LH, LW, 3)
    txt_ids = torch.randint(0, 5, (B, T, 3)).float()
    x, noise = inputs["input.x"], inputs["input.noise"]
    sig = ts.view(-1, 1, 1)
    latents = (1 - sig) * x + sig * noise  # the trainer's, on packed latents (elementwise)
    target = noise - x
    pred = model(img=latents, img_ids=img_ids, txt=inputs["input.txt"], txt_ids=txt_ids,
                 y=inputs["input.y"], timesteps=ts)
    loss = torch.nn.functional.mse_loss(pred.float(), target.float(), reduction="sum")
    loss = loss / torch.tensor(target.numel(), dtype=torch.float32)
    loss.backward()

    params = dict(model.named_parameters())
    samples, sumsq = sample_grads([params[m["name"]].grad.detach()
                                   for m in manifest[:n_params]])
    print(f"loss {loss.item():.9g}, {n_params} parameter tensors, "
          f"{sum(math.prod(m['shape']) for m in manifest[:n_params])} values")
    save_file({"t": ts, "img_ids": img_ids, "txt_ids": txt_ids,
               "pred": pred.detach().float().contiguous(), "loss": loss.detach().reshape(1),
               "grad_samples": torch.from_numpy(samples),
               "grad_sumsq": torch.from_numpy(sumsq)},
              os.path.join(OUT, "io.safetensors"))
    with open(os.path.join(OUT, "weights.json"), "w") as fh:
        rows = ",\n".join("  " + json.dumps(m) for m in manifest)  # a tensor a line
        fh.write(f'{{"seed": {SEED}, "sample_seed": {SAMPLE_SEED}, "samples": {SAMPLES}, '
                 f'"tensors": [\n{rows}\n]}}\n')


if __name__ == "__main__":
    main()
