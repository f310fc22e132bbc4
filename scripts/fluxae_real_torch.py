#!/usr/bin/env python3
"""The torch side of scripts/bench/fluxae_real.sh: torchtitan 0.3.0's Flux
AutoEncoder at FLUX.1's real shape (its flux configs' AutoEncoder.Config:
ch 128, ch_mult (1, 2, 4, 4), num_res_blocks 2, z_channels 16) with random
weights (BFL's ae.safetensors is not reachable offline; the shapes and names
are its), on one 256 x 256 image.

  fluxae_real_torch.py make DIR [SEED]   DIR/ae.safetensors (float32, torch's
      default init, the GroupNorms spread around 1 and 0), DIR/config.json,
      DIR/io.safetensors ("pixels" (1, 3, 256, 256) in [-1, 1), "eps" (1, 16, 32, 32))
  fluxae_real_torch.py run DIR [float32|bfloat16]   encoder moments, the
      sampled latents (randn_like returning eps) and decode of them, as
      load_ae builds the model (load_state_dict, .to(dtype)), timed; writes
      DIR/torch_DTYPE.safetensors ("moments", "z", "decoded", float32) and
      prints key=value: seconds of each stage, resident MiB after loading, the
      peak the forward passes added (VmHWM, reset after loading) and, for
      bfloat16 after a float32 run, f32_rel: the max |err| / max |ref| of the
      three outputs against float32's.

Run with the reference venv and PYTHONPATH holding torchtitan 0.3.0.
"""
import json
import os
import sys
import time
from unittest import mock

import torch
from safetensors.torch import load_file, save_file

from torchtitan.models.flux.model.autoencoder import AutoEncoder

H = W = 256


def status_mib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024.0
    return -1.0


def make(d, seed):
    torch.manual_seed(seed)
    cfg = AutoEncoder.Config()
    ae = cfg.build()
    with torch.no_grad():
        for n, p in ae.named_parameters():
            if ".norm" in n:
                p.copy_((1.0 if n.endswith("weight") else 0.0) + 0.25 * (2 * torch.rand_like(p) - 1))
    os.makedirs(d, exist_ok=True)
    save_file({k: v.contiguous() for k, v in ae.state_dict().items()},
              os.path.join(d, "ae.safetensors"))
    fields = ("resolution", "in_channels", "ch", "out_ch", "ch_mult", "num_res_blocks",
              "z_channels", "scale_factor", "shift_factor")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({k: getattr(cfg, k) for k in fields}, f, indent=2)
        f.write("\n")
    f = 2 ** (len(cfg.ch_mult) - 1)
    pixels = torch.rand(1, 3, H, W) * 2 - 1
    eps = torch.randn(1, cfg.z_channels, H // f, W // f)
    save_file({"pixels": pixels, "eps": eps}, os.path.join(d, "io.safetensors"))


def run(d, dtype_name):
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    t0 = time.perf_counter()
    ae = AutoEncoder.Config().build()
    ae.load_state_dict(load_file(os.path.join(d, "ae.safetensors")))
    ae = ae.to(dtype).eval()
    io = load_file(os.path.join(d, "io.safetensors"))
    pixels, eps = io["pixels"].to(dtype), io["eps"].to(dtype)
    load_s = time.perf_counter() - t0
    rss = status_mib("VmRSS:")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS, so the peak below is the forward's
    with torch.no_grad():
        t0 = time.perf_counter()
        moments = ae.encoder(pixels)
        enc_s = time.perf_counter() - t0
        with mock.patch("torch.randn_like", lambda t: eps.to(t.dtype)):
            z = ae.reg(moments)
            z = ae.scale_factor * (z - ae.shift_factor)
        t0 = time.perf_counter()
        decoded = ae.decode(z)
        dec_s = time.perf_counter() - t0
    peak = status_mib("VmHWM:")
    out = {"moments": moments.float(), "z": z.float(), "decoded": decoded.float()}
    save_file(out, os.path.join(d, f"torch_{dtype_name}.safetensors"))
    line = (f"load_s={load_s:.2f} encode_s={enc_s:.2f} decode_s={dec_s:.2f} rss_mib={rss:.0f} "
            f"peak_added_mib={peak - rss:.0f} threads={torch.get_num_threads()}")
    f32 = os.path.join(d, "torch_float32.safetensors")
    if dtype_name != "float32" and os.path.exists(f32):
        ref = load_file(f32)
        rel = [((out[k] - ref[k]).abs().max() / ref[k].abs().max()).item()
               for k in ("moments", "z", "decoded")]
        line += " f32_rel=" + ",".join(f"{r:.3g}" for r in rel)
    print(line)


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 20260602)
    elif len(sys.argv) >= 3 and sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "float32")
    else:
        sys.exit("usage: fluxae_real_torch.py make DIR [SEED] | run DIR [float32|bfloat16]")


if __name__ == "__main__":
    main()
