#!/usr/bin/env python3
"""Goldens for lib/fluxae (tests/fluxae/test_fluxae.c): torchtitan 0.3.0's
Flux AutoEncoder (models/flux/model/autoencoder.py) on a tiny config, its
encoder's moments, the latents AutoEncoder.encode samples for a given eps and
the decoder's pixels, in float32 and with the model cast to bfloat16 (as
torchtitan's Flux trainer casts it under FSDP: load_ae's ae.to(bfloat16), the
images cast to that dtype by preprocess_data).

The weights are not committed (a few hundred thousand of them): they are drawn
from a counter-based generator the test repeats in C, described per tensor in
weights.json, so that the committed goldens stay tens of KB.  Tensor t of
weights.json (0-based, in state_dict order), element j:
  z = seed + t * 2^32 + j (mod 2^64), splitmix64's finaliser of z + 0x9e3779b97f4a7c15,
  v = ((z >> 40) - 2^23) / 2^23            uniform in [-1, 1), exact in float32,
  value = offset + scale * v               in float32; scale is a power of two,
                                           so the product is exact and the one
                                           rounding is the sum's (FMA or not).

tests/fluxae/golden/:
  config.json      AutoEncoder.Config's fields (the JSON flux_ae_config_read reads)
  weights.json     {"seed": S, "tensors": [{"name", "shape", "offset", "scale"}, ...]}
  io.safetensors   float32: "pixels" (B, 3, H, W) in [-1, 1); "eps" (B, z, H/f, W/f);
                   "moments" = encoder(pixels) (B, 2z, H/f, W/f); "z" = encode(pixels)
                   with randn_like returning eps; "decoded" = decode(z) (B, 3, H, W);
                   the same three with suffix "_bf16" from the bf16 model (its
                   pixels and eps rounded to bf16, decode of its own z).

Run from the repository root with the reference venv:
  PYTHONPATH=<torchtitan 0.3.0> python scripts/fluxae_golden.py
"""
import json
import math
import os
from unittest import mock

import numpy as np
import torch
from safetensors.torch import save_file

from torchtitan.models.flux.model.autoencoder import AutoEncoder

OUT = "tests/fluxae/golden"
SEED = 20260601
CONFIG = dict(resolution=16, in_channels=3, ch=32, out_ch=3, ch_mult=[1, 2, 2],
              num_res_blocks=2, z_channels=4, scale_factor=0.3611, shift_factor=0.1159)
B, H, W = 2, 16, 12
M64 = (1 << 64) - 1


def draw(t, n):
    """v (n) float32 in [-1, 1): the generator above for tensor t."""
    with np.errstate(over="ignore"):
        z = np.uint64(SEED) + np.uint64(t) * np.uint64(1 << 32) + np.arange(n, dtype=np.uint64)
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(40)).astype(np.int64) - (1 << 23)
    return u.astype(np.float32) / np.float32(1 << 23)


def spread(name, shape):
    """(offset, scale): convs near torch's default init (a power of two near
    1/sqrt(fan_in)); the norms' weights around 1 and biases around 0, both
    non-trivial (GroupNorm's affine parameters start at 1 and 0)."""
    if ".norm" in name:
        return (1.0, 0.25) if name.endswith(".weight") else (0.0, 0.25)
    if name.endswith(".bias"):
        return 0.0, 0.125
    fan_in = math.prod(shape[1:])
    return 0.0, 2.0 ** round(math.log2(1 / math.sqrt(fan_in)))


def weights(model):
    manifest, sd = [], {}
    for t, (name, p) in enumerate(model.state_dict().items()):
        off, sc = spread(name, tuple(p.shape))
        v = np.float32(off) + np.float32(sc) * draw(t, p.numel())
        sd[name] = torch.from_numpy(v.astype(np.float32)).reshape(p.shape)
        manifest.append({"name": name, "shape": list(p.shape), "offset": off, "scale": sc})
    model.load_state_dict(sd)
    return manifest


def run(ae, pixels, eps):
    """moments, z, decoded of ae (its dtype) on pixels with randn_like = eps."""
    with torch.no_grad():
        moments = ae.encoder(pixels)
        with mock.patch("torch.randn_like", lambda t: eps.to(t.dtype)):
            z = ae.encode(pixels)
        decoded = ae.decode(z)
    return moments.float(), z.float(), decoded.float()


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def main():
    os.makedirs(OUT, exist_ok=True)
    cfg = dict(CONFIG, ch_mult=tuple(CONFIG["ch_mult"]))
    ae = AutoEncoder.Config(**cfg).build().eval()
    manifest = weights(ae)
    torch.manual_seed(SEED)
    f = 2 ** (len(CONFIG["ch_mult"]) - 1)
    pixels = torch.rand(B, 3, H, W) * 2 - 1
    eps = torch.randn(B, CONFIG["z_channels"], H // f, W // f)
    io = {"pixels": pixels, "eps": eps}
    io["moments"], io["z"], io["decoded"] = run(ae, pixels, eps)
    ae16 = ae.to(torch.bfloat16)
    p16 = pixels.to(torch.bfloat16)
    io["moments_bf16"], io["z_bf16"], io["decoded_bf16"] = run(ae16, p16, eps.to(torch.bfloat16))
    for k in ("moments", "z", "decoded"):
        print(f"{k}: {tuple(io[k].shape)}, bf16 model vs float32 {rel(io[k + '_bf16'], io[k]):.3g}")
    save_file({k: v.float().contiguous() for k, v in io.items()},
              os.path.join(OUT, "io.safetensors"))
    with open(os.path.join(OUT, "config.json"), "w") as fh:
        json.dump(CONFIG, fh, indent=2)
        fh.write("\n")
    with open(os.path.join(OUT, "weights.json"), "w") as fh:
        rows = ",\n".join("  " + json.dumps(t) for t in manifest)  # a tensor a line
        fh.write(f'{{"seed": {SEED}, "tensors": [\n{rows}\n]}}\n')


if __name__ == "__main__":
    main()
