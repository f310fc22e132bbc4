#!/usr/bin/env python3
"""PyTorch eager side of scripts/bench/model.sh: the same Llama 3 shapes as
tests/model/bench_model.c (the model of scripts/model_golden.py, after
torchtitan's code, in float32), the same training step (forward, cross-entropy
over all tokens, backward, clip_grad_norm_ 1.0, AdamW with torchtitan's
defaults), the same batch and thread count.  Prints one key=value line.
PREC bfloat16 runs the forward and the loss under torch.autocast("cpu",
bfloat16), as torchtitan does on one device (float32 parameters and optimizer).

    model_bench_torch.py SHAPE B T STEPS [float32|bfloat16]
"""
import contextlib
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_golden as ref  # noqa: E402

SHAPES = {
    "debugmodel": ref.args(256, 6, 16, 16, 2048, multiple_of=256),
    "100M": ref.args(768, 12, 12, 4, 16384, multiple_of=256),
}


def init(a, gen):
    """torchtitan's init (depth_init), float32."""
    P = {}
    for fqn, shape in ref.layout(a):
        w = torch.empty(shape)
        if "norm" in fqn:
            w.fill_(1.0)
        elif "tok_embeddings" in fqn:
            w.normal_(0, 1, generator=gen)
        elif fqn == "output.weight":
            std = a["dim"] ** -0.5
            torch.nn.init.trunc_normal_(w, 0, std, -3 * std, 3 * std, generator=gen)
        else:
            layer = int(fqn.split(".")[1])
            small = 0.02 / (2 * (layer + 1)) ** 0.5
            std = 0.02 if any(k in fqn for k in (".wq.", ".wk.", ".wv.", ".w1.")) else small
            torch.nn.init.trunc_normal_(w, 0, std, generator=gen)
        P[fqn] = w.requires_grad_(True)
    return P


def bench(shape, params, logits_of, vocab, b, t, steps, threads, prec="float32"):
    """The timed training step of bench_model.c on params, logits_of(ids)
    the forward; prints the key=value line.  (scripts/family_bench_torch.py
    times transformers' models with it.)"""
    amp = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if prec == "bfloat16" \
        else contextlib.nullcontext
    try:
        opt = torch.optim.AdamW(params, lr=8e-4, betas=(0.9, 0.95), eps=1e-8,
                                weight_decay=0.1, fused=True)
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(params, lr=8e-4, betas=(0.9, 0.95), eps=1e-8,
                                weight_decay=0.1, foreach=True)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (b, t), generator=gen)
    labels = torch.randint(0, vocab, (b, t), generator=gen)
    times, cpu = [], []
    for step in range(steps + 1):  # step 0 warms up, not timed
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        with amp():
            logits = logits_of(ids)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(),
                                   ignore_index=-100, reduction="sum") / (b * t)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step:
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    med = statistics.median(times)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    n = sum(p.numel() for p in params)
    print(f"impl=torch shape={shape} prec={prec} params={n} b={b} t={t} threads={threads} "
          f"step_s={med:.4f} cpu_s={statistics.median(cpu):.4f} tok_s={b * t / med:.1f} peak_rss_mib={rss:.1f} "
          f"loss={loss.item():.4f}")


def main():
    shape, b, t, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    prec = sys.argv[5] if len(sys.argv) > 5 else "float32"
    if prec not in ("float32", "bfloat16"):
        sys.exit(f"model_bench_torch.py: precision {prec!r}: float32 or bfloat16")
    threads = int(os.environ.get("OMP_NUM_THREADS", os.cpu_count()))
    torch.set_num_threads(threads)
    a = dict(SHAPES[shape])
    a["ffn"] = ref.ffn_hidden(a["dim"], a["multiple_of"], a["ffn_dim_multiplier"])
    P = init(a, torch.Generator().manual_seed(1))
    bench(shape, list(P.values()), lambda ids: ref.forward(a, P, ids), a["vocab"], b, t, steps,
          threads, prec)


if __name__ == "__main__":
    main()
