#!/usr/bin/env python3
# Writes the model flavors of torchtitan 0.3.0's families that titan has
# (models/<family>/__init__.py's model_registry), one per line, tab-separated:
# family, flavor, dim, layers, heads, kv_heads (0: as heads), head_dim (0:
# dim / heads), the dense layers' FFN hidden size (0: none), experts, top_k,
# the experts' hidden size, vocab_size, tied embeddings (0/1), the RoPE
# cache's max_seq_len, its scaling ("none", "llama:FACTOR",
# "yarn:FACTOR:BETA_FAST:BETA_SLOW:ORIGINAL"), theta, and the parameter count
# of the model built on the meta device (a tied weight counted once).
# tests/model/test_model_family.c holds titan's flavor registry to it.
# Run: PYTHONPATH=<torchtitan 0.3.0> $PYTHON scripts/torchtitan030_flavors.py \
#        > tests/model/torchtitan-0.3.0-flavors.tsv
import importlib
import sys

import torch

FAMILIES = ["llama3", "qwen3", "deepseek_v3", "gpt_oss"]


def flavors(module):
    tables = [v for k, v in vars(module).items() if k.endswith("_configs") and isinstance(v, dict)]
    if len(tables) != 1:
        sys.exit(f"{module.__name__}: expected one *_configs table, found {len(tables)}")
    return list(tables[0])


def scaling(rope):
    if rope.scaling == "llama":
        return f"llama:{rope.scaling_factor:g}"
    if rope.scaling == "yarn" and rope.rope_factor > 1.0:
        return (f"yarn:{rope.rope_factor:g}:{rope.beta_fast:g}:{rope.beta_slow:g}:"
                f"{rope.original_seq_len}")
    return "none"


def row(family, flavor, c):
    layers = c.layers
    attn = layers[0].attention
    rope = attn.rope
    dense = [l.feed_forward.w1.out_features for l in layers
             if getattr(l, "feed_forward", None) is not None]
    moe = next((l.moe for l in layers if getattr(l, "moe", None) is not None), None)
    experts = top_k = inter = 0
    if moe is not None:
        experts, top_k = moe.num_experts, moe.router.top_k
        inter = moe.routed_experts.inner_experts.hidden_dim
    with torch.device("meta"):
        model = c.build()
    params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    return [family, flavor, c.dim, len(layers), attn.n_heads, getattr(attn, "n_kv_heads", None) or 0,
            getattr(attn, "head_dim", None) or 0, dense[0] if dense else 0, experts, top_k, inter,
            c.vocab_size, int(bool(getattr(c, "enable_weight_tying", False))), rope.max_seq_len,
            scaling(rope), f"{rope.theta:g}", params]


def main():
    import torchtitan  # noqa: F401
    print("# torchtitan 0.3.0's flavors: family, flavor, dim, layers, heads, kv_heads, head_dim, "
          "ffn, experts, top_k, expert ffn, vocab, tied, rope max_seq_len, rope scaling, theta, "
          "parameters (made by scripts/torchtitan030_flavors.py)")
    for family in FAMILIES:
        m = importlib.import_module(f"torchtitan.models.{family}")
        for flavor in flavors(m):
            print("\t".join(str(x) for x in row(family, flavor, m.model_registry(flavor).model)))


main()
