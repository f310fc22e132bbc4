#!/usr/bin/env python3
"""Golden data for titan's model under torch.autocast's bfloat16 rules
(tests/model/test_model_bf16.c).

For the "gqa" and "hd64" cases of tests/model/golden/ (weights and batch that
scripts/model_golden.py drew), builds torchtitan 0.2.2's own Llama 3
Transformer with the case's arguments, loads the weights (float32 parameters),
and runs the step as torchtitan's trainer does on one device: forward and loss
under torch.autocast("cpu", dtype=torch.bfloat16) (maybe_enable_amp), the loss
torchtitan's cross_entropy_loss (logits .float(), summed) divided by the valid
tokens, then backward.  (The case's float64 gradients, <case>.grads.bin, give
the distance that mixed precision itself makes, which the test sets beside
titan's; the float32 loss is recorded as a check on the model.)

Writes into tests/model/golden/ (or the folder given as argv[1]):
  autocast.json                per case: the loss under autocast and in float32
  <case>.autocast.grads.bin    float32 LE, the gradients under autocast, flat
                               in torchtitan FQN order like <case>.weights.bin

Run with the interpreter in $PYTHON (torch, torchtitan 0.2.2); never needed by CI.
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from torchtitan.models.llama3 import Transformer, TransformerModelArgs

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_golden as ref  # noqa: E402

CASES = ("gqa", "hd64")


def build(a, t):
    args = TransformerModelArgs(
        dim=a["dim"], n_layers=a["n_layers"], n_heads=a["n_heads"], n_kv_heads=a["n_kv_heads"],
        vocab_size=a["vocab"], multiple_of=a["multiple_of"],
        ffn_dim_multiplier=a["ffn_dim_multiplier"], norm_eps=1e-5, rope_theta=a["rope_theta"],
        max_seq_len=max(t, 64))
    args.rope_scaling_args.scaling_factor = a["rope_factor"]
    assert not a["tied"], "torchtitan's Llama 3 has no tied output"
    return Transformer(args)


def load_flat(model, a, flat):
    sd, off = {}, 0
    for fqn, shape in ref.layout(a):
        n = int(np.prod(shape))
        sd[fqn] = torch.from_numpy(flat[off:off + n].reshape(shape).copy())
        off += n
    assert off == flat.size, "weights do not fill the layout"
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected and all("freqs_cis" in k for k in missing), (missing, unexpected)


def step(model, a, ids, labels, autocast):
    model.zero_grad(set_to_none=True)
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else torch.autocast("cpu", enabled=False)
    with ctx:
        pred = model(ids)
        loss_sum = F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1),
                                   reduction="sum", ignore_index=-100)
    n_valid = int((labels != -100).sum())
    loss = loss_sum / n_valid
    loss.backward()
    named = dict(model.named_parameters())
    grads = np.concatenate([named[fqn].grad.detach().float().numpy().ravel()
                            for fqn, _ in ref.layout(a)])
    return float(loss.detach()), grads.astype("<f4"), n_valid


def read_case(out, c):
    """A golden case's float32 weights (flat) and its batch (b, t) as tensors."""
    b, t = c["b"], c["t"]
    flat = np.fromfile(os.path.join(out, c["weights"]), dtype="<f4")
    ids, labels = (torch.from_numpy(np.fromfile(os.path.join(out, c[k]), dtype="<i4")
                                    .reshape(b, t).astype(np.int64)) for k in ("inputs", "labels"))
    return flat, ids, labels


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "model", "golden")
    index = json.load(open(os.path.join(out, "index.json")))
    torch.manual_seed(0)
    torch.set_num_threads(1)
    result = {"torch": torch.__version__, "cases": {}}
    for name in CASES:
        c = index["cases"][name]
        a, t = c["args"], c["t"]
        flat, ids, labels = read_case(out, c)
        model = build(a, t)
        load_flat(model, a, flat)
        entry = {"source": name}
        loss, grads, entry["n_valid"] = step(model, a, ids, labels, True)
        entry["loss_autocast"] = loss
        entry["grads_autocast"] = f"{name}.autocast.grads.bin"
        grads.tofile(os.path.join(out, entry["grads_autocast"]))
        entry["loss_f32"] = step(model, a, ids, labels, False)[0]
        result["cases"][name] = entry
        print(f"{name}: loss autocast {entry['loss_autocast']:.9f}, float32 {entry['loss_f32']:.9f}")
    with open(os.path.join(out, "autocast.json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
