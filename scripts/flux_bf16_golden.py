#!/usr/bin/env python3
"""The bf16 golden of lib/flux (tests/flux/test_flux_bf16.c): the training
step of scripts/flux_model_golden.py (flux-debug, the same counter-drawn
weights and inputs, read from tests/flux/golden/weights.json) as torchtitan
0.3.0 computes it under FSDP's MixedPrecisionPolicy(param_dtype=bfloat16,
reduce_dtype=float32), the mode of every Flux run with dp_shard > 1:

- the parameters are the float32 weights cast to bfloat16 (the all-gather in
  param_dtype), the gradients are produced in bfloat16 and cast to float32
  (the reduce-scatter in reduce_dtype; one rank: the cast only);
- fully_shard casts the floating-point forward inputs of FluxModel to
  bfloat16 (cast_forward_inputs): img, img_ids, txt, txt_ids, y and the
  timesteps; the trainer's encoders run in bfloat16 (self._dtype), so the
  latents x, their noise (randn_like), the T5 states and the CLIP vector are
  bfloat16 values; the noisy latent (1 - t) x + t noise is float32 (t is
  float32 there) and the target noise - x bfloat16;
- the loss is mse_loss(pred.float(), target.float(), sum) / numel.

Also the float32 step on the same bf16-valued inputs, so the golden holds
torch's own bf16-against-float32 gap of every value the test compares: the
test's bounds on titan's bf16 step are fractions of that gap.

tests/flux/golden_bf16/io.safetensors (as tests/flux/golden/'s):
  "pred", "loss", "grad_samples", "grad_sumsq" of the bf16 step (float32,
  float64); "pred_f32", "loss_f32", "grad_samples_f32", "grad_sumsq_f32" of
  the float32 one.  The timesteps and ids are those of tests/flux/golden/.

Run from the repository root with the reference venv (after
scripts/flux_model_golden.py, whose weights.json and io.safetensors it reads):
  PYTHONPATH=<torchtitan 0.3.0> python scripts/flux_bf16_golden.py
"""
import copy
import json
import math
import os
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flux_model_golden import OUT as F32_OUT, draw, sample_grads  # noqa: E402

from torchtitan.models.flux import flux_configs  # noqa: E402

OUT = "tests/flux/golden_bf16"


def step(model, dtype, io, inputs):
    """One step of the trainer with the model's parameters in dtype; the
    prediction, the loss and every gradient in float32."""
    bf = torch.bfloat16
    x, noise = inputs["input.x"].to(bf), inputs["input.noise"].to(bf)
    ts = io["t"]
    sig = ts.view(-1, 1, 1)
    latents = (1 - sig) * x + sig * noise  # float32: t is
    target = noise - x                     # bfloat16
    args = dict(img=latents, img_ids=io["img_ids"], txt=inputs["input.txt"].to(bf),
                txt_ids=io["txt_ids"], y=inputs["input.y"].to(bf), timesteps=ts)
    args = {k: v.to(dtype) for k, v in args.items()}  # cast_forward_inputs
    pred = model(**args)
    loss = torch.nn.functional.mse_loss(pred.float(), target.float(), reduction="sum")
    loss = loss / torch.tensor(target.numel(), dtype=torch.float32)
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    return pred.detach().float(), loss.detach().reshape(1), grads


def main():
    with open(os.path.join(F32_OUT, "weights.json")) as fh:
        man = json.load(fh)
    io = load_file(os.path.join(F32_OUT, "io.safetensors"))
    model = flux_configs["flux-debug"]().build()
    names = list(model.state_dict().keys())
    sd, inputs = {}, {}
    for t, m in enumerate(man["tensors"]):
        v = torch.from_numpy(draw(t, math.prod(m["shape"]), m["offset"], m["scale"]))
        (inputs if m["name"].startswith("input.") else sd)[m["name"]] = v.reshape(m["shape"])
    assert list(sd.keys()) == names
    model.load_state_dict(sd)
    del sd
    model_bf = copy.deepcopy(model).to(torch.bfloat16)
    out = {}
    for sfx, mdl, dt in (("", model_bf, torch.bfloat16), ("_f32", model, torch.float32)):
        pred, loss, grads = step(mdl, dt, io, inputs)
        gs, gq = sample_grads(grads)
        out.update({"pred" + sfx: pred.contiguous(), "loss" + sfx: loss,
                    "grad_samples" + sfx: torch.from_numpy(gs),
                    "grad_sumsq" + sfx: torch.from_numpy(gq)})
        print(f"{dt}: loss {loss.item():.9g}")
    os.makedirs(OUT, exist_ok=True)
    save_file(out, os.path.join(OUT, "io.safetensors"))


if __name__ == "__main__":
    main()
