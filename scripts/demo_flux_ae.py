#!/usr/bin/env python3
"""The autoencoder of make demo-flux: torchtitan 0.3.0's FLUX AutoEncoder
(models/flux/model/autoencoder.py) at a small width, trained to reconstruct
the demo's shapes (build/demo/flux_shapes), so that the demo's samples decode
to pictures a person can read.

    PYTHONPATH=<torchtitan 0.3.0> python3 scripts/demo_flux_ae.py SHAPES.tar OUT_DIR [--from P1]
    PYTHONPATH=<torchtitan 0.3.0> python3 scripts/demo_flux_ae.py golden SHAPES.tar AE_DIR OUT

SHAPES.tar: `build/demo/flux_shapes -n 2048 --seed 0 -o SHAPES.tar`; its last
256 samples are held out for the figures.  Writes OUT_DIR/ae.safetensors
(float16, the tensor names of BFL's ae.safetensors) and OUT_DIR/ae.json
(AutoEncoder.Config's fields, which lib/fluxae's flux_ae_config_read takes),
and prints the held-out reconstruction error.  The committed copy is
scripts/demo/flux/.  "golden" writes OUT (tests/demo/golden/ae_io.safetensors)
for tests/demo/test_demo_flux: the first sample's "pixels" (1, 3, 64, 64),
the committed weights' "moments" (encoder) and "decoded" = AutoEncoder.decode
of z = scale * (mean - shift), float32.

The shape of FLUX.1's: 4 levels (8x down: a 64-px image is an 8 x 8 latent),
16 latent channels (flux-debug's in_channels 64 = 16 x 2 x 2), one head of
attention in the middle; narrower (ch 32, the least GroupNorm's 32 groups
allow) with one ResnetBlock per level.  Loss: L1 on the pixels plus a small
KL term, as an autoencoder with a Gaussian posterior is trained (FLUX's also
had perceptual and adversarial terms, which shapes do not need).  Two
phases: 1500 steps of batch 16 on 32-px crops (a quarter of the
convolutions' work), whose float16 weights go to
OUT_DIR/phase1/ae.safetensors; then 600 steps of batch 8 on whole images
from those, with the squared error besides.  --from P1 starts at phase 2
from P1/ae.safetensors, a phase 1's output (the same result without phase
1's half hour on 2 cores).  After training, shift_factor and scale_factor
are set from the held-out latents' mean and standard deviation, as BFL's
were, so that the flow model sees latents of unit variance.
Deterministic: seeds 0 and 1, 2 threads, plain Adam.
"""
import io
import json
import math
import os
import sys
import tarfile
import time

import numpy as np
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

from torchtitan.models.flux.model.autoencoder import AutoEncoder

CONFIG = dict(resolution=64, in_channels=3, ch=32, out_ch=3, ch_mult=[1, 1, 2, 2],
              num_res_blocks=1, z_channels=16, scale_factor=1.0, shift_factor=0.0)
HELD_OUT = 256
BATCH = 16
CROP = 32
PHASE1_STEPS = 1500
PHASE2_STEPS = 600
KL_WEIGHT = 1e-6


def load(path):
    """(n, 3, h, w) float32 in [-1, 1], the images of the tar in order."""
    imgs = []
    with tarfile.open(path) as t:
        for m in t:
            if m.name.endswith((".jpg", ".png")):
                im = Image.open(io.BytesIO(t.extractfile(m).read())).convert("RGB")
                imgs.append(np.asarray(im, dtype=np.float32) / 255.0 * 2 - 1)
    return torch.from_numpy(np.stack(imgs)).permute(0, 3, 1, 2).contiguous()


def moments(ae, x):
    mean, logvar = torch.chunk(ae.encoder(x), 2, dim=1)
    return mean, logvar.clamp(-30.0, 20.0)


def step_loss(ae, x, g, mse):
    mean, logvar = moments(ae, x)
    z = mean + torch.exp(0.5 * logvar) * torch.randn(mean.shape, generator=g)
    rec = ae.decoder(z)
    kl = 0.5 * (mean.pow(2) + logvar.exp() - 1 - logvar).sum() / x.shape[0]
    err = rec - x
    return err.abs().mean() + mse * err.pow(2).mean() + KL_WEIGHT * kl


@torch.no_grad()
def evaluate(ae, x):
    mean, _ = moments(ae, x)
    rec = ae.decoder(mean).clamp(-1, 1)
    mse = (rec - x).pow(2).mean().item()
    # in 8-bit pixel units: PSNR over the [0, 255] range
    psnr = 10 * math.log10(4.0 / mse) if mse > 0 else float("inf")
    return mse, (rec - x).abs().mean().item() * 127.5, psnr, mean


def golden(tar, ae_dir, out):
    with open(os.path.join(ae_dir, "ae.json")) as f:
        cfg = json.load(f)
    ae = AutoEncoder.Config(**{**cfg, "ch_mult": tuple(cfg["ch_mult"])}).build()
    sd = load_file(os.path.join(ae_dir, "ae.safetensors"))
    ae.load_state_dict({k: v.float() for k, v in sd.items()})
    ae.eval()
    x = load(tar)[:1]
    with torch.no_grad():
        m = ae.encoder(x)
        mean = torch.chunk(m, 2, dim=1)[0]
        dec = ae.decode(ae.scale_factor * (mean - ae.shift_factor))
    save_file({"pixels": x.contiguous(), "moments": m.contiguous(), "decoded": dec.contiguous()},
              out)


def train(ae, data, steps, crop, batch, lr, seed, mse):
    """steps of Adam on L1 (+ mse x MSE) + KL, lr warmed up over 100 steps then cosine to 0,
    on random crop x crop windows (one offset a batch) of batch images."""
    opt = torch.optim.Adam(ae.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 100) * 0.5 * (1 + math.cos(math.pi * s / steps)))
    g = torch.Generator().manual_seed(seed)
    t0 = time.time()
    for s in range(steps):
        idx = torch.randint(0, len(data), (batch,), generator=g)
        size = data.shape[-1]
        oy, ox = (int(v) for v in torch.randint(0, size - crop + 1, (2,), generator=g))
        x = data[idx][:, :, oy:oy + crop, ox:ox + crop]
        # flips keep the shapes' kinds (triangles point up: only left-right)
        if s % 2:
            x = x.flip(3)
        loss = step_loss(ae, x, g, mse)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if s % 250 == 0 or s == steps - 1:
            print(f"step {s:5d}  loss {loss.item():.4f}  {time.time() - t0:.0f} s",
                  file=sys.stderr)


def to_f16(ae):
    """The weights as the file holds them (float16), back in float32."""
    sd = {k: v.detach().to(torch.float16) for k, v in ae.state_dict().items()}
    ae.load_state_dict({k: v.float() for k, v in sd.items()})
    return sd


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "golden":
        golden(*sys.argv[2:])
        return
    if len(sys.argv) not in (3, 5) or (len(sys.argv) == 5 and sys.argv[3] != "--from"):
        sys.exit(__doc__)
    tar, out = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    torch.set_num_threads(2)
    data = load(tar)
    train_set, held = data[:-HELD_OUT], data[-HELD_OUT:]
    ae = AutoEncoder.Config(**{**CONFIG, "ch_mult": tuple(CONFIG["ch_mult"])}).build()
    n_params = sum(p.numel() for p in ae.parameters())
    print(f"{len(train_set)} training images, {len(held)} held out, {n_params} parameters",
          file=sys.stderr)
    t0 = time.time()
    if len(sys.argv) == 5:
        # phase 1 as a run without --from wrote it (its float16 weights)
        sd = load_file(os.path.join(sys.argv[4], "ae.safetensors"))
        ae.load_state_dict({k: v.float() for k, v in sd.items()})
    else:
        train(ae, train_set, PHASE1_STEPS, CROP, BATCH, 1e-3, 0, 0.0)
        to_f16(ae)
        os.makedirs(os.path.join(out, "phase1"), exist_ok=True)
        save_file({k: v.to(torch.float16).contiguous() for k, v in ae.state_dict().items()},
                  os.path.join(out, "phase1", "ae.safetensors"))
    # phase 2: whole images, so that GroupNorm's statistics and the middle
    # attention see what the encoder and decoder will (a model trained on
    # crops alone loses the colours of whole images); the squared error
    # besides, which weighs a shape's wrong colour over the background's
    # many small errors
    train(ae, train_set, PHASE2_STEPS, 64, 8, 1e-3, 1, 1.0)
    ae.eval()
    mse, mae8, psnr, mean = evaluate(ae, held)
    shift = mean.mean().item()
    scale = 1.0 / mean.std().item()
    cfg = {**CONFIG, "scale_factor": round(scale, 4), "shift_factor": round(shift, 4)}
    os.makedirs(out, exist_ok=True)
    sd = to_f16(ae)
    save_file({k: v.contiguous() for k, v in sd.items()}, os.path.join(out, "ae.safetensors"))
    with open(os.path.join(out, "ae.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    mse16, mae16, psnr16, _ = evaluate(ae, held)
    size = os.path.getsize(os.path.join(out, "ae.safetensors"))
    print(f"held-out reconstruction (posterior mean): MSE {mse:.2e} on [-1, 1], "
          f"mean |error| {mae8:.2f} / 255, PSNR {psnr:.1f} dB; float16 weights: "
          f"MSE {mse16:.2e}, {mae16:.2f} / 255, {psnr16:.1f} dB; {size} bytes; "
          f"shift {shift:.4f} scale {scale:.4f}; {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
