#!/usr/bin/env python3
"""PyTorch eager side of scripts/bench/family.sh: a family's flavor as
transformers' own modules build it (Qwen3ForCausalLM, Qwen3MoeForCausalLM, the
experts in transformers' default implementation), float32, the training step
of tests/model/bench_model.c (forward, cross-entropy over all tokens,
backward, clip_grad_norm_ 1.0, AdamW with torchtitan's defaults), the same
batch and thread count (model_bench_torch.bench).  Prints one key=value line.

    family_bench_torch.py FAMILY:FLAVOR B T STEPS
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_bench_torch as mbt  # noqa: E402  (the timed step)

# titan's flavors (lib/qwen3/qwen3.c = torchtitan's qwen3_args).
FLAVORS = {
    "qwen3:debugmodel": dict(vocab_size=2048, hidden_size=256, num_hidden_layers=8,
                             num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                             intermediate_size=3072, tie_word_embeddings=True),
    "qwen3:debugmodel_moe": dict(vocab_size=2048, hidden_size=256, num_hidden_layers=8,
                                 num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                                 intermediate_size=3072, tie_word_embeddings=False,
                                 moe_intermediate_size=768, num_experts=64,
                                 num_experts_per_tok=8, norm_topk_prob=True),
}


def build(shape):
    import transformers
    c = dict(FLAVORS[shape], rms_norm_eps=1e-6, rope_theta=1e6, max_position_embeddings=4096,
             attn_implementation="sdpa")
    if "num_experts" in c:
        return transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(**c))
    return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**c))


def main():
    shape, b, t, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    threads = int(os.environ.get("OMP_NUM_THREADS", os.cpu_count()))
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = build(shape).float().train()
    params = [p for p in model.parameters() if p.requires_grad]
    mbt.bench(shape, params, lambda ids: model(input_ids=ids).logits,
              FLAVORS[shape]["vocab_size"], b, t, steps, threads)


if __name__ == "__main__":
    main()
