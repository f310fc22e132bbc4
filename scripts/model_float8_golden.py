#!/usr/bin/env python3
"""Golden data for titan's Float8 converter (tests/model/test_model_float8.c):
one training step of torchtitan 0.2.2's Llama 3 converted by torchao's
convert_to_float8_training, as torchtitan's quantize.linear.float8 converter
does, with emulate=True (the CPU path).

For the "gqa" case of tests/model/golden/ (weights and batch that
scripts/model_golden.py drew) it builds torchtitan's Transformer, loads the
weights (float32 parameters), converts the linears torchtitan's
module_filter_fn picks for each configuration below, and runs the step as
torchtitan's trainer does on one device: forward and loss (logits .float(),
summed, over the valid tokens), then backward, either in float32 or under
torch.autocast("cpu", dtype=torch.bfloat16) (maybe_enable_amp).

One change makes the CPU run follow torchtitan's GPU path: Float8Linear casts
its input to the autocast type only when torch.is_autocast_enabled() (CUDA's
autocast) is on; on the CPU that test is false and the input of a linear that
follows a norm stays float32.  Here the converted forward casts the input to
CPU autocast's type first, as it does under CUDA autocast, which is what titan
implements (its autocast stores the norm's output in bf16 for the linears).

Writes into tests/model/golden/ (or the folder given as argv[1]):
  float8.json             per configuration: recipe, filter_fqns, autocast, the
                          converted module FQNs, the loss, the gradient file
  gqa.f8.<name>.grads.bin float32 LE, the gradients, flat in torchtitan FQN
                          order like gqa.weights.bin

Run with the interpreter in $PYTHON (torch, torchao, torchtitan 0.2.2); never
needed by CI.
"""
import dataclasses
import json
import os
import sys
from functools import partial

import torch

import torchao
from torchao.float8 import Float8LinearConfig, convert_to_float8_training
from torchao.float8.float8_linear import Float8Linear
from torchtitan.components.quantization.utils import module_filter_fn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_autocast_golden as ac  # noqa: E402
import model_golden as ref  # noqa: E402

CASE = "gqa"
# name, recipe, filter_fqns, autocast
CONFIGS = [
    ("tensorwise", "tensorwise", [], False),
    ("rowwise", "rowwise", ["output"], False),
    ("gw_hp", "rowwise_with_gw_hp", ["attention.wk"], False),
    ("tensorwise_bf16", "tensorwise", [], True),
    ("rowwise_bf16", "rowwise", [], True),
]

_forward = Float8Linear.forward


def forward_as_on_cuda(self, x):
    """Float8Linear.forward with CUDA autocast's input cast, on the CPU."""
    if torch.is_autocast_enabled("cpu"):
        x = x.to(torch.get_autocast_dtype("cpu"))
    return _forward(self, x)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "model", "golden")
    index = json.load(open(os.path.join(out, "index.json")))
    torch.manual_seed(0)
    torch.set_num_threads(1)
    Float8Linear.forward = forward_as_on_cuda
    c = index["cases"][CASE]
    a, t = c["args"], c["t"]
    flat, ids, labels = ac.read_case(out, c)
    result = {"torch": torch.__version__, "torchao": torchao.__version__, "case": CASE,
              "configs": {}}
    for name, recipe, fqns, autocast in CONFIGS:
        model = ac.build(a, t)
        ac.load_flat(model, a, flat)
        cfg = dataclasses.replace(Float8LinearConfig.from_recipe_name(recipe), emulate=True)
        convert_to_float8_training(model, config=cfg,
                                   module_filter_fn=partial(module_filter_fn, filter_fqns=fqns))
        converted = sorted(n for n, m in model.named_modules() if isinstance(m, Float8Linear))
        loss, grads, n_valid = ac.step(model, a, ids, labels, autocast)
        gname = f"{CASE}.f8.{name}.grads.bin"
        grads.tofile(os.path.join(out, gname))
        result["configs"][name] = {"recipe": recipe, "filter_fqns": fqns, "autocast": autocast,
                                   "converted": converted, "loss": loss, "n_valid": n_valid,
                                   "grads": gname}
        print(f"{name}: {len(converted)} linears converted, loss {loss:.9f}")
    with open(os.path.join(out, "float8.json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
