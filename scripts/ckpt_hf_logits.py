#!/usr/bin/env python3
"""Does titan's HF export compute the same function as the titan checkpoint?

1. Writes a titan-keyed DCP checkpoint of a small random Llama 3 with
   titan-ckpt-convert (single-to-dcp from a torch.save file this script makes),
2. exports it with `titan-ckpt-convert to-hf` (RoPE permutation of wq/wk,
   config.json with llama3 rope scaling),
3. runs the torchtitan-style reference forward of scripts/model_golden.py on
   the weights read back from the titan DCP (through torch.distributed.checkpoint)
   and transformers' LlamaForCausalLM on the HF export, both in float64, and
   prints the max absolute logit difference (and fails above 1e-9).

Usage: $PYTHON scripts/ckpt_hf_logits.py [BIN_DIR]   (torch, transformers)
"""
import os
import subprocess
import sys
import tempfile

import torch
import torch.distributed.checkpoint as dcp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import model_golden as ref  # noqa: E402  (the torchtitan-style reference)

SEED = 4321


def main():
    bindir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "bin")
    conv = os.path.join(bindir, "titan-ckpt-convert")
    a = ref.args(dim=64, n_layers=2, n_heads=8, n_kv_heads=2, vocab=128, factor=8.0)
    a["ffn"] = ref.ffn_hidden(a["dim"], a["multiple_of"], a["ffn_dim_multiplier"])
    gen = torch.Generator().manual_seed(SEED)
    P = {}
    for name, shape in ref.layout(a):
        std = 0.5 if len(shape) == 2 else 0.1
        t = torch.randn(shape, generator=gen, dtype=torch.float64) * std
        P[name] = (1.0 + t) if len(shape) == 1 else t
    P = {k: v.float() for k, v in P.items()}
    with tempfile.TemporaryDirectory() as tmp:
        pt, d, hf = (os.path.join(tmp, x) for x in ("model.pt", "step-10", "hf"))
        torch.save(P, pt)
        subprocess.run([conv, "single-to-dcp", pt, d], check=True)
        subprocess.run([conv, "to-hf", d, hf, "--flavor", "debugmodel", "--n-heads",
                        str(a["n_heads"]), "--n-kv-heads", str(a["n_kv_heads"])], check=True)
        back = {k: torch.empty_like(v) for k, v in P.items()}
        dcp.load(back, checkpoint_id=d, no_dist=True)
        for k in P:
            assert torch.equal(back[k], P[k]), k
        from transformers import LlamaForCausalLM
        model = LlamaForCausalLM.from_pretrained(hf, torch_dtype=torch.float64)
        model.eval()
        ids = torch.randint(0, a["vocab"], (2, 17), generator=gen)
        with torch.no_grad():
            want = ref.forward(a, {k: v.double() for k, v in back.items()}, ids)
            got = model(ids).logits
        diff = (want - got).abs().max().item()
        scale = want.abs().max().item()
        # The same export without the RoPE permutation (torchtitan #1291's bug).
        sd = model.state_dict()
        for l in range(a["n_layers"]):
            sd[f"model.layers.{l}.self_attn.q_proj.weight"].copy_(back[f"layers.{l}.attention.wq.weight"])
            sd[f"model.layers.{l}.self_attn.k_proj.weight"].copy_(back[f"layers.{l}.attention.wk.weight"])
        with torch.no_grad():
            bad = (want - model(ids).logits).abs().max().item()
        print(f"titan DCP -> to-hf -> LlamaForCausalLM vs torchtitan-style reference: "
              f"max |logit diff| = {diff:.3e} (logits up to {scale:.3f}; without the RoPE "
              f"permutation: {bad:.3f}), seed {SEED}")
        # transformers computes the rotary angles in float32 even for a float64
        # model, which bounds the agreement near 1e-5 here.
        if diff > 1e-4 or bad < 1e-2:
            sys.exit(1)


if __name__ == "__main__":
    main()
