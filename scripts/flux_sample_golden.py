#!/usr/bin/env python3
"""Goldens for lib/flux's sampling (tests/flux/test_flux_sample.c): torchtitan
0.3.0's own functions of models/flux/inference/sampling.py run as
generate_image runs them once the prompts are encoded: denoise (its
get_schedule, the [uncond; cond] batch of classifier-free guidance, the Euler
steps, unpack_latents), the AutoEncoder's decode, and save_image's bytes
(read back from the PNG it writes with PIL).  Nothing of them is
re-implemented here: generate_noise_latent is patched to return the fixed
noise, everything else is 0.3.0's.

The model is the flux-debug flavor (258M parameters) with the weights of
scripts/flux_model_golden.py (its generator, seed and spread); the
autoencoder a small config of FLUX's shape (ch_mult of 4 levels: the factor
8 sampling.py assumes; z_channels 16) with scripts/fluxae_golden.py's spread.
2 images of 64 x 48 pixels (latents 16 x 8 x 6: non-square, 12 packed
tokens), 5 T5 tokens, 4 denoising steps, guidance off and on (scale 5.0,
flux_debugmodel's).

Nothing large is committed.  weights.json lists every drawn tensor, in the
order of their counter t: the model's state dict, the inputs (input.noise
(B, 16, 8, 6), input.txt and input.txt_empty (B, 5, 4096), input.y and
input.y_empty (B, 768)), then the autoencoder's state dict with names
prefixed "ae.".  Value j of tensor t = offset + scale * test_counter_draw(seed,
t, j) (tests/support/golden_weights.h).

tests/flux/golden/sample/:
  ae_config.json   AutoEncoder.Config's fields (the JSON flux_ae_config_read reads)
  weights.json     {"seed", "batch", "height", "width", "text_tokens", "steps",
                   "cfg_scale", "tensors": [...]}
  io.safetensors   "latents_cfg{0,1}" (B, 16, 8, 6) float32: denoise's output;
                   "decoded_cfg{0,1}" (B, 3, 16, 12) float32: decode of it, every
                   4th row and column (from 0);
                   "rgb_cfg{0,1}" (B, 64, 48, 3) uint8: save_image's pixels;
                   "exif_img0" uint8: the eXIf chunk save_image wrote for
                   name "img0.png", prompt "a prompt";
                   "schedule.{steps}.{seq_len}" float32: get_schedule's values

Run from the repository root with the reference venv:
  PYTHONPATH=<torchtitan 0.3.0> python scripts/flux_sample_golden.py
"""
import json
import math
import os
import tempfile
from unittest import mock

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file

import fluxae_golden
import flux_model_golden as fmg
from torchtitan.models.flux import flux_configs
from torchtitan.models.flux.inference import sampling
from torchtitan.models.flux.model.autoencoder import AutoEncoder

OUT = "tests/flux/golden/sample"
B, H, W, T, STEPS, SCALE = 2, 64, 48, 5, 4, 5.0
AE_CONFIG = dict(resolution=64, in_channels=3, ch=32, out_ch=3, ch_mult=[1, 1, 2, 2],
                 num_res_blocks=1, z_channels=16, scale_factor=0.3611, shift_factor=0.1159)
SCHEDULES = [(s, n) for s in (1, 4, 9, 28, 50, 100) for n in (48, 1024, 4096)]


def fill(module, manifest, prefix, spread):
    sd = {}
    for name, p in module.state_dict().items():
        off, sc = spread(name, tuple(p.shape))
        t = len(manifest)
        sd[name] = torch.from_numpy(fmg.draw(t, p.numel(), off, sc)).reshape(p.shape)
        manifest.append({"name": prefix + name, "shape": list(p.shape), "offset": off,
                         "scale": sc})
    module.load_state_dict(sd)


def exif_chunk(path):
    """The data of the eXIf chunk of the PNG at path."""
    with open(path, "rb") as fh:
        data = fh.read()
    pos = 8
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        if data[pos + 4:pos + 8] == b"eXIf":
            return data[pos + 8:pos + 8 + n]
        pos += 12 + n
    raise ValueError(f"{path}: no eXIf chunk")


def main():
    os.makedirs(OUT, exist_ok=True)
    manifest = []
    model = flux_configs["flux-debug"]().build().eval()
    fill(model, manifest, "", fmg.spread)
    inputs = {}
    for name, shape in (("input.noise", (B, 16, H // 8, W // 8)), ("input.txt", (B, T, 4096)),
                        ("input.txt_empty", (B, T, 4096)), ("input.y", (B, 768)),
                        ("input.y_empty", (B, 768))):
        t = len(manifest)
        inputs[name] = torch.from_numpy(fmg.draw(t, math.prod(shape), 0.0, 1.0)).reshape(shape)
        manifest.append({"name": name, "shape": list(shape), "offset": 0.0, "scale": 1.0})
    ae = AutoEncoder.Config(**dict(AE_CONFIG, ch_mult=tuple(AE_CONFIG["ch_mult"]))).build()
    ae = ae.eval()
    fill(ae, manifest, "ae.", fluxae_golden.spread)

    io = {}
    for steps, n in SCHEDULES:
        io[f"schedule.{steps}.{n}"] = torch.tensor(sampling.get_schedule(steps, n),
                                                  dtype=torch.float32)
    noise = inputs["input.noise"]
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        for cfg in (0, 1):
            with mock.patch.object(sampling, "generate_noise_latent",
                                   lambda *a, **k: noise.clone()):
                lat = sampling.denoise(
                    device=torch.device("cpu"), dtype=torch.float32, model=model,
                    img_width=W, img_height=H, denoising_steps=STEPS,
                    clip_encodings=inputs["input.y"], t5_encodings=inputs["input.txt"],
                    enable_classifier_free_guidance=bool(cfg),
                    empty_t5_encodings=inputs["input.txt_empty"],
                    empty_clip_encodings=inputs["input.y_empty"],
                    classifier_free_guidance_scale=SCALE)
            img = ae.decode(lat)
            rgb = []
            for i in range(B):
                sampling.save_image(f"img{i}.png", tmp, img[i:i + 1], True, "a prompt")
                path = os.path.join(tmp, f"img{i}.png")
                with Image.open(path) as im:
                    rgb.append(torch.from_numpy(np.asarray(im.convert("RGB")).copy()))
                if i == 0:
                    io["exif_img0"] = torch.frombuffer(bytearray(exif_chunk(path)),
                                                       dtype=torch.uint8)
            io[f"latents_cfg{cfg}"] = lat.float().contiguous()
            io[f"decoded_cfg{cfg}"] = img[:, :, ::4, ::4].float().contiguous()
            io[f"rgb_cfg{cfg}"] = torch.stack(rgb)
            print(f"cfg {cfg}: latents |max| {lat.abs().max():.4g}, decoded in "
                  f"[{img.min():.3g}, {img.max():.3g}]")
    print("schedule", io["schedule.4.1024"].tolist())
    save_file(io, os.path.join(OUT, "io.safetensors"))
    with open(os.path.join(OUT, "ae_config.json"), "w") as fh:
        json.dump(AE_CONFIG, fh, indent=2)
        fh.write("\n")
    head = {"seed": fmg.SEED, "batch": B, "height": H, "width": W,
            "text_tokens": T, "steps": STEPS, "cfg_scale": SCALE}
    with open(os.path.join(OUT, "weights.json"), "w") as fh:
        rows = ",\n".join("  " + json.dumps(m) for m in manifest)  # a tensor a line
        fields = ", ".join(f'"{k}": {json.dumps(v)}' for k, v in head.items())
        fh.write(f'{{{fields}, "tensors": [\n{rows}\n]}}\n')


if __name__ == "__main__":
    main()
