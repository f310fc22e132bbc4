"""torch's scaled_dot_product_attention on the CPU for scripts/bench/attention.sh:
the shape titan-bench attention measures (B, T, H, HKV, HD; GQA through
enable_gqa), causal (is_causal) and block-causal over N documents of T // N
positions a row (the last takes the rest) through the same mask as a dense
boolean tensor (flex_attention has no backward on the CPU), forward and
backward, float32 and bfloat16.  FLOPs as titan-bench counts them: 4 hd per
unmasked (query, key) pair and head forward, 2.5x that backward.  One line of
key=value per row; median of runs lasting at least SECONDS.

    python scripts/attention_bench_torch.py B T H HKV HD DOCS SECONDS
"""
import sys
import time

import torch
import torch.nn.functional as F


def block_causal(t, docs):
    length = t // docs
    start = torch.arange(t) // length * length
    start = torch.minimum(start, torch.tensor((docs - 1) * length))
    q, k = torch.arange(t)[:, None], torch.arange(t)[None, :]
    return (k <= q) & (k >= start[:, None])


def pairs_of(mask, b):
    return b * int(mask.sum())


def median_time(fn, seconds):
    fn()  # warm up
    runs, t0 = [], time.perf_counter()
    while len(runs) < 3 or time.perf_counter() - t0 < seconds:
        s = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - s)
    runs.sort()
    return runs[len(runs) // 2]


def main():
    b, t, h, hkv, hd, docs = (int(x) for x in sys.argv[1:7])
    seconds = float(sys.argv[7])
    torch.manual_seed(0)
    masks = [("causal", None, torch.ones(t, t, dtype=torch.bool).tril())]
    if docs > 0:
        m = block_causal(t, docs)
        masks.append((f"docs {docs}", m, m))
    for dtype_name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        q = torch.rand(b, h, t, hd, dtype=dtype) * 2 - 1
        k = torch.rand(b, hkv, t, hd, dtype=dtype) * 2 - 1
        v = torch.rand(b, hkv, t, hd, dtype=dtype) * 2 - 1
        for name, mask, kept in masks:
            qq, kk, vv = (x.detach().requires_grad_() for x in (q, k, v))

            def fwd():
                with torch.no_grad():
                    F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                   is_causal=mask is None, enable_gqa=True)

            out = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask,
                                                 is_causal=mask is None, enable_gqa=True)
            dout = torch.rand_like(out)

            def bwd():
                torch.autograd.grad(out, (qq, kk, vv), dout, retain_graph=True)

            fwd_flops = 4.0 * h * hd * pairs_of(kept, b)
            for pass_name, fn, flops in (("forward", fwd, fwd_flops),
                                         ("backward", bwd, 2.5 * fwd_flops)):
                s = median_time(fn, seconds)
                print(f"impl=torch mask={name.replace(' ', '_')} pass={pass_name} "
                      f"dtype={dtype_name} ms={s * 1e3:.3f} tflops={flops / s / 1e12:.4f}")


if __name__ == "__main__":
    main()
