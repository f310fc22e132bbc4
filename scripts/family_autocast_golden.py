#!/usr/bin/env python3
"""Golden data for the model families under torch.autocast's bfloat16 rules
(tests/family/test_family_golden.c, the *_autocast cases).

For each case of tests/family/golden/ named below (one per family whose pieces
went beyond Llama's: MoE, MLA, attention biases and sinks, chunked attention),
rebuilds the model scripts/family_golden.py wrote (torchtitan's own modules for
the "torchtitan" cases, loading weights.safetensors; transformers' for the
others, loading hf/), in float32, and runs the step as torchtitan's trainer does
on one device (maybe_enable_amp): forward and loss under
torch.autocast("cpu", dtype=torch.bfloat16), the loss torchtitan's
cross_entropy_loss (logits .float(), summed) divided by the valid tokens, then
backward.  Where transformers rounds the routing weights to the logits'
dtype (Llama 4's sigmoid, GPT-OSS's softmax of the chosen logits: bf16 under
autocast), its router is run with torchtitan's float32 scores instead
(torchtitan's models/moe/moe.py takes scores.to(torch.float32)); the experts'
choice is unchanged.

Writes tests/family/golden/<case>/autocast.safetensors:
  loss             float64 (1), the loss under autocast
  grad.<fqn>       float32, every parameter's gradient under autocast, by
                   torchtitan's names (as ref.safetensors)

Run: PYTHON=... $PYTHON scripts/family_autocast_golden.py [case ...]
     (torch, transformers, safetensors, torchtitan 0.2.2); never needed by CI.
"""
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import family_golden as fg  # noqa: E402

CASES = ("deepseek_v3", "moe_routing", "gpt_oss", "llama4")


def torchtitan_router(router, hidden_states):
    """Llama4Router.forward with torchtitan's precision (models/moe/moe.py:
    scores = sigmoid(logits.to(float32)), kept float32 for the weighting),
    where transformers rounds the routing weights back to the logits' dtype
    (bf16 under autocast).  The choice is the same: sigmoid is monotonic."""
    logits = torch.nn.functional.linear(hidden_states, router.weight)
    top, idx = torch.topk(logits, router.top_k, dim=1)
    scores = torch.full_like(logits, float("-inf"), dtype=torch.float32)
    scores = torch.sigmoid(scores.scatter_(1, idx, top.float()))
    return scores, logits


def torchtitan_topk_router(router, hidden_states):
    """GptOssTopKRouter.forward with torchtitan's precision: the softmax of the
    chosen logits in float32 (transformers takes it in the logits' dtype)."""
    logits = torch.nn.functional.linear(hidden_states, router.weight, router.bias)
    top, idx = torch.topk(logits, router.top_k, dim=-1)
    return logits, torch.softmax(top.float(), dim=1), idx


def load_model(name, c):
    out = os.path.join(fg.ROOT, name)
    if c.get("source") == "torchtitan":
        torch.histc = lambda x, bins, min, max: torch.bincount(x.view(-1), minlength=bins)
        model = fg.build_torchtitan(c)
        state = load_file(os.path.join(out, "weights.safetensors"))
        missing, unexpected = model.load_state_dict(state, strict=False)
        assert not unexpected, unexpected
        assert all("rope_cache" in k or "tokens_per_expert" in k or "freqs_cis" in k
                   for k in missing), missing
        return model, True
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.join(out, "hf"), dtype=torch.float32, attn_implementation="eager")
    if hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation("eager")
    if c["family"] == "llama4":
        from transformers.models.llama4 import modeling_llama4
        modeling_llama4.Llama4Router.forward = torchtitan_router
    if c["family"] == "gpt_oss":
        from transformers.models.gpt_oss import modeling_gpt_oss
        modeling_gpt_oss.GptOssTopKRouter.forward = torchtitan_topk_router
    return model, False


def make(name):
    c = fg.CASES[name]
    model, titan = load_model(name, c)
    model = model.float()
    ref = load_file(os.path.join(fg.ROOT, name, "ref.safetensors"))
    ids, labels = ref["ids"].long(), ref["labels"].long()
    v = c["vocab"]
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(ids) if titan else model(input_ids=ids).logits
        loss_sum = F.cross_entropy(logits.reshape(-1, v).float(), labels.reshape(-1),
                                   reduction="sum", ignore_index=-100)
    n_valid = int((labels != -100).sum())
    loss = loss_sum / n_valid
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()
             if p.grad is not None}
    out = {"loss": loss.detach().double().reshape(1)}
    for fqn, g in (grads if titan else fg.titan_names(c, grads)).items():
        out["grad." + fqn] = g.float().contiguous().clone()
    missing = [k for k in ref if k.startswith("grad.") and k not in out]
    assert not missing, missing
    save_file(out, os.path.join(fg.ROOT, name, "autocast.safetensors"))
    exact = float(ref["loss"][0])
    print(f"{name}: loss under autocast {loss.item():.9f} (float64 {exact:.9f}), "
          f"{len(out) - 1} gradients")


def main():
    torch.set_num_threads(1)
    for n in sys.argv[1:] or CASES:
        make(n)


if __name__ == "__main__":
    main()
