#!/usr/bin/env python3
"""Golden data of DeepSeek V3's multi-token prediction (tests/family/
test_family_golden.c's deepseek_v3_mtp case), made by torchtitan 0.3.0's own
DeepSeekV3Model (MTPDecoder with two MTPTransformerBlocks built by its
_build_mtp_layers) and MTPLoss, in float64.

Small shapes of the debugmodel's layout: MLA without a q bottleneck, YaRN with
its softmax mscale, one dense layer then a MoE layer (softmax routing, two
shared experts, a random expert_bias); two MTP depths (the second reads the
first's output); per-document positions (block-causal attention, the depths'
shifts stopping at each document's end) and some ignored labels.  Weights are
drawn as scripts/family_golden.py's randomise does (norms away from 1), the
MTP tensors too.

Writes tests/family/golden/deepseek_v3_mtp/:
  weights.safetensors  the parameters and expert_bias buffers by 0.2.2's names
                       (titan's own: "expert_bias", "moe.experts.w1"; the
                       test reads them by the model's table)
  ref.safetensors      ids, labels, positions (int32, (b, t)), the main logits
                       (b, t, vocab), the loss (float64: MTPLoss over the valid
                       labels) and every parameter's gradient ("grad.<name>",
                       float64 rounded to float32)
  case.json            the shapes titan builds the same model with

Two substitutions: FlexAttention refuses its backward on the CPU, so its mask
is the same dense boolean mask under scaled_dot_product_attention
(scripts/tt030_golden.py's); and 0.3.0's GroupedExperts casts the routed
experts' inputs and weights to bfloat16 for torch._grouped_mm whatever the
model's dtype, which would hide the float64 reference under bfloat16's
rounding, so each expert's SwiGLU runs in the model's dtype here (the same
math, expert by expert over its rows).

Run: PYTHONPATH=<torchtitan 0.3.0> $PYTHON scripts/mtp_golden.py
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tt030_golden import dense_document_mask, sdpa_under_mask  # noqa: E402

import torchtitan.models.deepseek_v3 as dsv3  # noqa: E402
from torchtitan.models.common import attention as tt_attention  # noqa: E402
from torchtitan.models.common import decoder as tt_decoder  # noqa: E402
from torchtitan.models.common.embedding import Embedding  # noqa: E402
from torchtitan.models.common.linear import Linear  # noqa: E402
from torchtitan.models.common.moe import GroupedExperts  # noqa: E402
from torchtitan.models.common.nn_modules import RMSNorm  # noqa: E402
from torchtitan.models.common.rope import ComplexRoPE  # noqa: E402
from torchtitan.models.deepseek_v3.mtp import MTPLoss  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "family",
                   "golden", "deepseek_v3_mtp")
CASE = dict(family="deepseek_v3", source="torchtitan", vocab=128, dim=32, hidden=64, layers=2,
            heads=4, kv=4, dense=1, q_lora=0, kv_lora=24, qk_nope=16, qk_rope=16, v_head=12,
            mscale=0.7, rope_orig=64, rope_factor=40.0, theta=10000.0, max_seq=128, eps=1e-5,
            final_eps=1e-5, experts=8, top_k=3, moe_inter=16, shared=2, score="softmax",
            route_norm=False, route_scale=1.0, score_before=False, tied=False,
            mtp_layers=2, mtp_scale=0.3, b=2, t=13, seed=1801)


def build(c):
    layers = dsv3._build_dsv3_layers(
        n_layers=c["layers"], n_dense_layers=c["dense"], dim=c["dim"], n_heads=c["heads"],
        q_lora_rank=c["q_lora"], kv_lora_rank=c["kv_lora"], qk_nope_head_dim=c["qk_nope"],
        qk_rope_head_dim=c["qk_rope"], v_head_dim=c["v_head"], mscale=c["mscale"],
        dense_hidden_dim=c["hidden"], moe_hidden_dim=c["moe_inter"], num_experts=c["experts"],
        num_shared_experts=c["shared"], router_top_k=c["top_k"],
        router_score_func=c["score"], attn_backend="flex", moe_comm_backend="standard",
        non_blocking_capacity_factor=None,
        rope=ComplexRoPE.Config(dim=c["qk_rope"], max_seq_len=c["max_seq"], theta=c["theta"],
                                scaling="yarn", rope_factor=c["rope_factor"], beta_fast=32.0,
                                beta_slow=1.0, original_seq_len=c["rope_orig"]))
    d, v = c["dim"], c["vocab"]
    cfg = dsv3.DeepSeekV3Model.Config(
        vocab_size=v, dim=d, tok_embeddings=Embedding.Config(num_embeddings=v, embedding_dim=d),
        norm=RMSNorm.Config(normalized_shape=d), lm_head=Linear.Config(in_features=d,
                                                                       out_features=v),
        layers=layers,
        mtp_layers=dsv3._build_mtp_layers(layers[-1], dim=d, num_mtp_layers=c["mtp_layers"]))
    torch.manual_seed(c["seed"])
    model = cfg.build()
    # wide weights keep the routing far from ties; norms away from 1 show a
    # forgotten one (scripts/family_golden.py's recipe)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 1.0 if "embeddings" in name else 0.5 if "router" in name else 0.15
            p.copy_(1 + 0.2 * torch.randn_like(p) if name.endswith("norm.weight")
                    else scale * torch.randn_like(p))
        for name, b in model.named_buffers():
            if name.endswith("expert_bias_E"):
                b.copy_(0.05 * torch.randn_like(b))
    return model


def save_file(tensors, path):
    """The safetensors format (the reference venv has no safetensors
    package): an 8-byte little-endian header length, the JSON header padded to
    8 bytes, the tensors' bytes in order."""
    names = {torch.float32: "F32", torch.float64: "F64", torch.int32: "I32"}
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().numpy().tobytes()
        header[name] = dict(dtype=names[t.dtype], shape=list(t.shape),
                            data_offsets=[off, off + len(data)])
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for data in blobs:
            f.write(data)


def titan_name(n):
    """0.3.0's name -> 0.2.2's (titan's table)."""
    for new, old in ((".moe.routed_experts.inner_experts.w1_EFD", ".moe.experts.w1"),
                     (".moe.routed_experts.inner_experts.w2_EDF", ".moe.experts.w2"),
                     (".moe.routed_experts.inner_experts.w3_EFD", ".moe.experts.w3"),
                     (".moe.expert_bias_E", ".moe.expert_bias"), ("lm_head.", "output.")):
        n = n.replace(new, old)
    return n


def experts_in_model_dtype(self, x_RD, num_tokens_per_expert_E):
    """GroupedExperts.forward without its bfloat16 casts."""
    out, start = [], 0
    for e, n in enumerate(num_tokens_per_expert_E.tolist()):
        x = x_RD[start:start + int(n)]
        h = torch.nn.functional.silu(x @ self.w1_EFD[e].T) * (x @ self.w3_EFD[e].T)
        out.append(h @ self.w2_EDF[e].T)
        start += int(n)
    return torch.cat(out) if out else x_RD[:0]


def main():
    c = CASE
    tt_decoder.Decoder.get_attention_masks = dense_document_mask
    tt_attention.FlexAttention.forward = sdpa_under_mask
    GroupedExperts.forward = experts_in_model_dtype
    torch.histc = lambda x, bins, min, max: torch.bincount(x.view(-1), minlength=bins).to(
        torch.float32)
    model = build(c)
    os.makedirs(OUT, exist_ok=True)
    state = {titan_name(n): t.detach().float().contiguous().clone()
             for n, t in model.state_dict().items()
             if "rope" not in n and "tokens_per_expert" not in n}
    save_file(state, os.path.join(OUT, "weights.safetensors"))
    model = model.double()
    g = torch.Generator().manual_seed(c["seed"] + 1)
    b, t, v = c["b"], c["t"], c["vocab"]
    ids = torch.randint(0, v, (b, t), generator=g)
    labels = torch.randint(0, v, (b, t), generator=g)
    labels[torch.rand((b, t), generator=g) < 0.15] = -100
    # row 0: documents of 6, 4 and 3 tokens; row 1 one document
    positions = torch.tensor([list(range(6)) + list(range(4)) + list(range(3)),
                              list(range(t))])
    masks = model.get_attention_masks(positions=positions)
    pred = model(ids, positions=positions, attention_masks=masks)
    valid = (labels != -100).sum()
    loss, _ = MTPLoss(MTPLoss.Config(mtp_scale=c["mtp_scale"]))(pred, labels, valid,
                                                                positions=positions)
    loss.backward()
    grads = {"grad." + titan_name(n): p.grad.detach().float().contiguous()
             for n, p in model.named_parameters()}
    ref = {"ids": ids.to(torch.int32), "labels": labels.to(torch.int32),
           "positions": positions.to(torch.int32), "logits": pred[0].detach().float(),
           "loss": loss.detach().reshape(1), **grads}
    save_file(ref, os.path.join(OUT, "ref.safetensors"))
    c = dict(c, loss=loss.item(), n_valid=int(valid), torch=torch.__version__)
    with open(os.path.join(OUT, "case.json"), "w") as f:
        json.dump(c, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"loss {loss.item():.9f} over {int(valid)} labels, {len(grads)} gradients -> {OUT}")


if __name__ == "__main__":
    main()
