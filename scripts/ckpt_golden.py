#!/usr/bin/env python3
"""Golden checkpoints for titan's checkpoint tests (tests/ckpt/), made by the
real PyTorch, safetensors and transformers from PyPI.

Writes into tests/ckpt/golden/ (or argv[1]):
  torch_new/        DCP folder saved by this torch (dcp.save, one process) with a
                    torchtitan-shaped state: a tiny Llama's weights at the top
                    level, AdamW state flattened as get_optimizer_state_dict(...,
                    flatten_optimizer_state_dict=True) gives it, LambdaLR's
                    state_dict, dataloader and train_state
  torch_new_2rank/  the model weights and train_state saved by two processes
                    (gloo), each weight a DTensor sharded on dim 0 (like FSDP2)
  torch_old/        the model weights and a train_state saved by torch 2.3 (no
                    Metadata.version, 5-field TensorProperties), when
                    $PYTHON_OLD names a Python with torch 2.3 (else left as is)
  single.pt         format_utils.dcp_to_torch_save(torch_new)
  hf/               the same model as transformers' LlamaForCausalLM saved it
                    (config.json, model.safetensors), wq/wk permuted to HF's
                    RoPE layout by this script
  reference.safetensors  every tensor of torch_new, written by safetensors
  reference_bf16.safetensors  the model weights cast to bfloat16 by torch
  reference.json    the non-tensor values of torch_new, the torch versions used

Run: $PYTHON scripts/ckpt_golden.py   (torch, safetensors, transformers)
"""
import json
import os
import pickle
import shutil
import subprocess
import sys

import torch
import torch.distributed.checkpoint as dcp
import torch.nn as nn

SEED = 1234
ARGS = dict(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab=64, ffn=96,
            rope_theta=500000.0, eps=1e-5, max_seq=128)


def layout(a):
    d, hd = a["dim"], a["dim"] // a["n_heads"]
    out = [("tok_embeddings.weight", (a["vocab"], d))]
    for l in range(a["n_layers"]):
        p = f"layers.{l}."
        out += [(p + "attention.wq.weight", (a["n_heads"] * hd, d)),
                (p + "attention.wk.weight", (a["n_kv_heads"] * hd, d)),
                (p + "attention.wv.weight", (a["n_kv_heads"] * hd, d)),
                (p + "attention.wo.weight", (d, a["n_heads"] * hd)),
                (p + "feed_forward.w1.weight", (a["ffn"], d)),
                (p + "feed_forward.w2.weight", (d, a["ffn"])),
                (p + "feed_forward.w3.weight", (a["ffn"], d)),
                (p + "attention_norm.weight", (d,)),
                (p + "ffn_norm.weight", (d,))]
    out += [("norm.weight", (d,)), ("output.weight", (a["vocab"], d))]
    return out


class Flat(nn.Module):
    """Parameters named like torchtitan's Llama (no forward needed here)."""

    def __init__(self, a, gen):
        super().__init__()
        self.names = []
        for name, shape in layout(a):
            t = torch.randn(shape, generator=gen) * (0.02 if len(shape) == 2 else 1.0)
            if len(shape) == 1:
                t = 1.0 + 0.1 * torch.randn(shape, generator=gen)
            self.register_parameter(name.replace(".", "__"), nn.Parameter(t))
            self.names.append(name)

    def state_dict_tt(self):
        return {n: getattr(self, n.replace(".", "__")).detach() for n in self.names}


def titan_state(a):
    """A torchtitan-shaped state after two optimizer steps."""
    gen = torch.Generator().manual_seed(SEED)
    m = Flat(a, gen)
    opt = torch.optim.AdamW(m.parameters(), lr=8e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 4))
    for _ in range(2):
        loss = sum((p * p).sum() for p in m.parameters())
        loss.backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    osd = opt.state_dict()
    # flatten_optimizer_state_dict=True's layout, keyed by parameter FQN
    flat = {}
    for i, name in enumerate(m.names):
        for k, v in osd["state"][i].items():
            flat[f"state.{name}.{k}"] = v
        g = osd["param_groups"][0]
        for k, v in g.items():
            if k != "params":
                flat[f"param_groups.{name}.{k}"] = v
    sd = {"optimizer": flat, "lr_scheduler": sched.state_dict(),
          "dataloader": {"dp_rank_0": pickle.dumps({"sample_idx": 7}), "world_size": 1},
          "train_state": {"step": 2, "ntokens_seen": 4096}}
    sd.update(m.state_dict_tt())
    return sd


def to_hf(w, n):
    d1, d2 = w.shape
    return w.view(n, d1 // n // 2, 2, d2).transpose(1, 2).reshape(d1, d2)


def write_hf(out, a, model_sd):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=a["dim"], intermediate_size=a["ffn"],
                      num_hidden_layers=a["n_layers"], num_attention_heads=a["n_heads"],
                      num_key_value_heads=a["n_kv_heads"], vocab_size=a["vocab"],
                      rms_norm_eps=a["eps"], rope_theta=a["rope_theta"],
                      max_position_embeddings=a["max_seq"], tie_word_embeddings=False)
    hf = LlamaForCausalLM(cfg)
    m = {"tok_embeddings.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight",
         "output.weight": "lm_head.weight"}
    sub = {"attention.wq": "self_attn.q_proj", "attention.wk": "self_attn.k_proj",
           "attention.wv": "self_attn.v_proj", "attention.wo": "self_attn.o_proj",
           "feed_forward.w1": "mlp.gate_proj", "feed_forward.w2": "mlp.down_proj",
           "feed_forward.w3": "mlp.up_proj", "attention_norm": "input_layernorm",
           "ffn_norm": "post_attention_layernorm"}
    hsd = {}
    for k, v in model_sd.items():
        if k in m:
            hsd[m[k]] = v
            continue
        _, l, rest = k.split(".", 2)
        base = rest.rsplit(".", 1)[0]
        name = f"model.layers.{l}.{sub[base]}.weight"
        if base == "attention.wq":
            v = to_hf(v, a["n_heads"])
        elif base == "attention.wk":
            v = to_hf(v, a["n_kv_heads"])
        hsd[name] = v
    missing, unexpected = hf.load_state_dict(hsd, strict=False)
    assert not unexpected and all("rotary" in x for x in missing), (missing, unexpected)
    hf.save_pretrained(out, safe_serialization=True)


def rank_main(rank, out, a):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29517")
    dist.init_process_group("gloo", rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    full = titan_state(a)
    sd = {k: distribute_tensor(v, mesh, [Shard(0)]) for k, v in full.items()
          if isinstance(v, torch.Tensor)}
    sd["train_state"] = {"step": 2, "ntokens_seen": 4096}
    dcp.save(sd, checkpoint_id=out)
    dist.destroy_process_group()


OLD_WRITER = r'''
import sys, torch, torch.distributed.checkpoint as dcp
from safetensors.torch import load_file
sd = load_file(sys.argv[1])
sd = {k: v for k, v in sd.items() if not k.startswith("optimizer.")}
sd["train_state"] = {"step": 2, "ntokens_seen": 4096}
dcp.save(sd, storage_writer=dcp.FileSystemWriter(sys.argv[2]))
print(torch.__version__)
'''


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/ckpt/golden"
    os.makedirs(out, exist_ok=True)
    a = ARGS
    sd = titan_state(a)
    for name in ("torch_new", "torch_new_2rank", "hf"):
        shutil.rmtree(os.path.join(out, name), ignore_errors=True)
    dcp.save(sd, checkpoint_id=os.path.join(out, "torch_new"), no_dist=True)
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    dcp_to_torch_save(os.path.join(out, "torch_new"), os.path.join(out, "single.pt"))
    torch.multiprocessing.spawn(rank_main, args=(os.path.join(out, "torch_new_2rank"), a),
                                nprocs=2, join=True)
    tensors = {}
    values = {}
    for k, v in sd.items():
        if isinstance(v, torch.Tensor):
            tensors[k] = v.contiguous()
        elif isinstance(v, dict):
            for k2, v2 in v.items():
                key = f"{k}.{k2}"
                if isinstance(v2, torch.Tensor):
                    tensors[key] = v2.contiguous()
                elif isinstance(v2, bytes):
                    values[key] = {"bytes_hex": v2.hex()}
                else:
                    values[key] = v2
    from safetensors.torch import save_file
    save_file(tensors, os.path.join(out, "reference.safetensors"))
    # torch's float32 -> bfloat16 rounding of the model weights (model-only export)
    save_file({k: v.to(torch.bfloat16) for k, v in sd.items() if isinstance(v, torch.Tensor)},
              os.path.join(out, "reference_bf16.safetensors"))
    write_hf(os.path.join(out, "hf"), a, {k: v for k, v in sd.items()
                                          if isinstance(v, torch.Tensor)})
    old = os.environ.get("PYTHON_OLD")
    old_version = None
    if old:
        shutil.rmtree(os.path.join(out, "torch_old"), ignore_errors=True)
        r = subprocess.run([old, "-c", OLD_WRITER, os.path.join(out, "reference.safetensors"),
                            os.path.join(out, "torch_old")], check=True, capture_output=True,
                           text=True)
        old_version = r.stdout.strip().splitlines()[-1]
    ref_path = os.path.join(out, "reference.json")
    prev = json.load(open(ref_path)) if os.path.exists(ref_path) else {}
    info = {"torch": torch.__version__, "torch_old": old_version or prev.get("torch_old"),
            "args": a, "seed": SEED, "values": values}
    with open(ref_path, "w") as f:
        json.dump(info, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
