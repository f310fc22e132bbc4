#!/usr/bin/env python3
"""PyTorch eager side of scripts/bench/family.sh: a family's flavor as
transformers' own modules build it (Qwen3ForCausalLM, Qwen3MoeForCausalLM, the
experts in transformers' default implementation), float32, the training step
of tests/model/bench_model.c (forward, cross-entropy over all tokens,
backward, clip_grad_norm_ 1.0, AdamW with torchtitan's defaults), the same
batch and thread count.  Prints one key=value line.

    family_bench_torch.py FAMILY:FLAVOR B T STEPS
"""
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F

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
    try:
        opt = torch.optim.AdamW(params, lr=8e-4, betas=(0.9, 0.95), eps=1e-8,
                                weight_decay=0.1, fused=True)
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(params, lr=8e-4, betas=(0.9, 0.95), eps=1e-8,
                                weight_decay=0.1, foreach=True)
    v = FLAVORS[shape]["vocab_size"]
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, v, (b, t), generator=gen)
    labels = torch.randint(0, v, (b, t), generator=gen)
    times, cpu = [], []
    for step in range(steps + 1):  # step 0 warms up, not timed
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=ids).logits
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(),
                               reduction="sum") / (b * t)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step:
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    med = statistics.median(times)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    n = sum(p.numel() for p in params)
    print(f"impl=torch shape={shape} params={n} b={b} t={t} threads={threads} "
          f"step_s={med:.4f} cpu_s={statistics.median(cpu):.4f} tok_s={b * t / med:.1f} "
          f"peak_rss_mib={rss:.1f} loss={loss.item():.4f}")


if __name__ == "__main__":
    main()
