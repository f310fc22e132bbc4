#!/usr/bin/env python3
"""Golden data for titan's Llama 3 model (tests/model/test_model_golden.c).

A small Llama 3 written here after torchtitan's models/llama3 (RMSNorm pre-norm
blocks, GQA, RoPE on interleaved pairs in complex form with Llama 3.1 frequency
scaling, causal SDPA, SwiGLU, untied or tied output) runs in float64 on weights
drawn here and stored as float32, so both sides start from the same numbers.

Writes into tests/model/golden/ (or the folder given as argv[1]):
  index.json           cases: model arguments, batch, file names, loss, losses
  <case>.weights.bin   float32 LE, the flat parameter buffer in torchtitan FQN order
  <case>.inputs.bin    int32 LE (b, t);  <case>.labels.bin int32 LE (b, t), -100 ignored
  <case>.logits.bin    float32 LE (b, t, vocab) from the float64 forward
  <case>.grads.bin     float32 LE, gradient of the mean loss, flat like the weights
The "train" case also records the losses and grad norms of 10 AdamW steps with
warmup + cosine decay, clipping and 2 micro-batches.

Run with the interpreter in $PYTHON (torch, numpy); never needed by CI.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F


def ffn_hidden(dim, multiple_of, mult):
    h = int(2 * (4 * dim) / 3)
    if mult:
        h = int(mult * h)
    return multiple_of * ((h + multiple_of - 1) // multiple_of)


def rope_freqs(hd, t, theta, factor):
    """cos + i sin of each position's angle, (t, hd/2), Llama 3.1 scaling."""
    f = 1.0 / theta ** (torch.arange(0, hd, 2)[: hd // 2] / hd)
    if factor:
        orig, low, high = 8192.0, 1.0, 4.0
        wl = 2 * math.pi / f
        nf = torch.where(wl > orig / low, f / factor, f)
        s = (orig / wl - low) / (high - low)
        mid = (wl >= orig / high) & (wl <= orig / low)
        f = torch.where(mid, (1 - s) * nf / factor + s * nf, nf)
    ang = torch.outer(torch.arange(t, dtype=f.dtype), f)
    return torch.polar(torch.ones_like(ang), ang)


def layout(a):
    """(fqn, shape) in torchtitan's state_dict order."""
    d, hd = a["dim"], a["dim"] // a["n_heads"]
    hq, hk, f = a["n_heads"] * hd, a["n_kv_heads"] * hd, a["ffn"]
    out = [("tok_embeddings.weight", (a["vocab"], d))]
    for l in range(a["n_layers"]):
        p = f"layers.{l}."
        out += [(p + "attention_norm.weight", (d,)), (p + "attention.wq.weight", (hq, d)),
                (p + "attention.wk.weight", (hk, d)), (p + "attention.wv.weight", (hk, d)),
                (p + "attention.wo.weight", (d, hq)), (p + "ffn_norm.weight", (d,)),
                (p + "feed_forward.w1.weight", (f, d)), (p + "feed_forward.w2.weight", (d, f)),
                (p + "feed_forward.w3.weight", (f, d))]
    out.append(("norm.weight", (d,)))
    if not a["tied"]:
        out.append(("output.weight", (a["vocab"], d)))
    return out


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate(x, fc):
    """x (b, t, h, hd): pairs (2i, 2i+1) as complex numbers times fc (t, hd/2), or
    (b, t, hd/2) with a row of its own per sequence."""
    xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
    fc = fc[None] if fc.dim() == 2 else fc
    return torch.view_as_real(xc * fc[:, :, None, :]).flatten(3)


def document_mask(positions):
    """torchtitan 0.3.0's block-causal mask (b, 1, t, t) from per-document
    positions: a document starts where the position is 0."""
    doc = torch.cumsum((positions == 0).int(), dim=1) - 1
    t = positions.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    return (causal[None] & (doc[:, :, None] == doc[:, None, :]))[:, None]


def forward(a, P, ids, positions=None):
    """positions (b, t): 0.3.0's documents (per-document RoPE positions and the
    block-causal mask); None: one causal sequence per row."""
    b, t = ids.shape
    d, h, hkv = a["dim"], a["n_heads"], a["n_kv_heads"]
    hd, eps = d // h, 1e-5
    fc = rope_freqs(hd, t, a["rope_theta"], a["rope_factor"])
    mask = None
    if positions is not None:
        fc, mask = fc[positions], document_mask(positions)
    x = P["tok_embeddings.weight"][ids]
    for l in range(a["n_layers"]):
        p = f"layers.{l}."
        n1 = rmsnorm(x, P[p + "attention_norm.weight"], eps)
        q = (n1 @ P[p + "attention.wq.weight"].T).view(b, t, h, hd)
        k = (n1 @ P[p + "attention.wk.weight"].T).view(b, t, hkv, hd)
        v = (n1 @ P[p + "attention.wv.weight"].T).view(b, t, hkv, hd)
        q, k = rotate(q, fc), rotate(k, fc)
        k = k.repeat_interleave(h // hkv, dim=2)
        v = v.repeat_interleave(h // hkv, dim=2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), attn_mask=mask,
                                           is_causal=mask is None)
        x = x + o.transpose(1, 2).reshape(b, t, h * hd) @ P[p + "attention.wo.weight"].T
        n2 = rmsnorm(x, P[p + "ffn_norm.weight"], eps)
        g = F.silu(n2 @ P[p + "feed_forward.w1.weight"].T) * (n2 @ P[p + "feed_forward.w3.weight"].T)
        x = x + g @ P[p + "feed_forward.w2.weight"].T
    x = rmsnorm(x, P["norm.weight"], eps)
    w_out = P["tok_embeddings.weight"] if a["tied"] else P["output.weight"]
    return x @ w_out.T


def loss_sum(logits, labels):
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100,
                           reduction="sum")


def draw_weights(a, rng):
    """Float32-representable weights: embeddings N(0,1), linears N(0, 0.5/sqrt(in)),
    norms around 1 (not exactly 1, so their gradients matter)."""
    P = {}
    for fqn, shape in layout(a):
        if "norm" in fqn:
            w = 1 + 0.1 * rng.standard_normal(shape)
        elif "tok_embeddings" in fqn:
            # Tied: the table is also the output projection; N(0, 1) would give
            # logits of ~100 and a one-hot softmax with nothing to compare.
            w = rng.standard_normal(shape) * (shape[1] ** -0.5 if a["tied"] else 1.0)
        else:
            w = rng.standard_normal(shape) * (0.5 / math.sqrt(shape[1]))
        P[fqn] = torch.tensor(w.astype(np.float32).astype(np.float64), requires_grad=True)
    return P


def draw_batch(a, b, t, rng, ignore_frac=0.15):
    ids = rng.integers(0, a["vocab"], size=(b, t))
    labels = rng.integers(0, a["vocab"], size=(b, t))
    labels[rng.random((b, t)) < ignore_frac] = -100
    return torch.tensor(ids), torch.tensor(labels)


def flat(a, P, grad=False):
    return np.concatenate([(P[f].grad if grad else P[f]).detach().numpy().ravel()
                           for f, _ in layout(a)]).astype("<f4")


def write(out, name, arr):
    arr.tofile(os.path.join(out, name))
    return name


def make_case(out, name, a, b, t, seed, positions=None):
    rng = np.random.default_rng(seed)
    a["ffn"] = ffn_hidden(a["dim"], a["multiple_of"], a["ffn_dim_multiplier"])
    P = draw_weights(a, rng)
    ids, labels = draw_batch(a, b, t, rng)
    pos = None if positions is None else torch.tensor(positions)
    logits = forward(a, P, ids, pos)
    n_valid = int((labels != -100).sum())
    loss = loss_sum(logits, labels) / n_valid
    loss.backward()
    case = dict(args=a, b=b, t=t, seed=seed, n_valid=n_valid, loss=loss.item())
    case["weights"] = write(out, f"{name}.weights.bin", flat(a, P))
    case["inputs"] = write(out, f"{name}.inputs.bin", ids.numpy().astype("<i4"))
    case["labels"] = write(out, f"{name}.labels.bin", labels.numpy().astype("<i4"))
    case["logits"] = write(out, f"{name}.logits.bin", logits.detach().numpy().astype("<f4"))
    case["grads"] = write(out, f"{name}.grads.bin", flat(a, P, grad=True))
    if positions is not None:
        case["positions"] = write(out, f"{name}.positions.bin",
                                  np.array(positions).astype("<i4"))
    return case


def doc_positions(lengths):
    """One row's positions for documents of these lengths (each counts from 0)."""
    return [i for n in lengths for i in range(n)]


def lr_factor(i, warmup, stable, decay, kind, min_f):
    """torchtitan's linear_warmup_stable_decay (v0.2.2)."""
    if i < warmup:
        return (i + 1) / warmup
    if i < warmup + stable:
        return 1.0
    p = (i + 1 - warmup - stable) / decay
    adj = {"linear": 1 - p, "sqrt": 1 - math.sqrt(p),
           "cosine": 0.5 * (1 + math.cos(math.pi * p))}[kind]
    return min_f + (1 - min_f) * adj


def make_train(out, name, a, seed, steps=10, local_b=2, micro=2, t=13):
    rng = np.random.default_rng(seed)
    a["ffn"] = ffn_hidden(a["dim"], a["multiple_of"], a["ffn_dim_multiplier"])
    P = draw_weights(a, rng)
    case = dict(args=a, b=local_b, t=t, seed=seed, steps=steps, micro_batches=micro,
                lr=3e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1,
                warmup_steps=3, decay_type="cosine", min_lr_factor=0.1, max_norm=0.5)
    case["weights"] = write(out, f"{name}.weights.bin", flat(a, P))
    batches = [draw_batch(a, local_b, t, rng) for _ in range(steps * micro)]
    ids = np.stack([x.numpy() for x, _ in batches]).astype("<i4")
    lab = np.stack([y.numpy() for _, y in batches]).astype("<i4")
    case["inputs"] = write(out, f"{name}.inputs.bin", ids)
    case["labels"] = write(out, f"{name}.labels.bin", lab)
    params = [P[f] for f, _ in layout(a)]
    opt = torch.optim.AdamW(params, lr=case["lr"], betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1, foreach=False)
    warm, decay = 3, steps - 3
    stable = steps + 1 - warm - decay
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: lr_factor(i, warm, stable, decay, "cosine", 0.1))
    losses, norms, lrs = [], [], []
    for s in range(steps):
        opt.zero_grad()
        mb = batches[s * micro:(s + 1) * micro]
        n_valid = sum(int((y != -100).sum()) for _, y in mb)
        total = 0.0
        for x, y in mb:
            l = loss_sum(forward(a, P, x), y)
            (l / n_valid).backward()
            total += l.item()
        losses.append(total / n_valid)
        norms.append(torch.nn.utils.clip_grad_norm_(params, case["max_norm"]).item())
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    case.update(losses=losses, grad_norms=norms, lrs=lrs)
    case["final_weights"] = write(out, f"{name}.final.bin", flat(a, P))
    return case


# titan's seeded init (lib/model/model.c), so a full-size flavor can be compared
# without committing its weights: every tensor is cut into chunks of 65536, each
# drawn from a splitmix64 stream seeded by (seed, tensor index, chunk index);
# normals by Box-Muller (one per pair of uniforms), cuts by rejection.
MASK = (1 << 64) - 1
INIT_CHUNK = 65536


def _mix(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _chunk_normals(seed, tensor, chunk, n, std, lo, hi):
    s0 = (seed ^ ((tensor * 0xD1B54A32D192ED03) & MASK) ^ ((chunk * 0x8CB92BA72F3D8DD7) & MASK))
    cand = n + 64 + n // 50
    while True:
        # output k of the stream mixes s0 + k*golden; output 1 is skipped
        k = np.arange(2, 2 + 2 * cand, dtype=np.uint64)
        with np.errstate(over="ignore"):
            u = _mix(np.uint64(s0) + k * np.uint64(0x9E3779B97F4A7C15))
        u = ((u >> np.uint64(11)).astype(np.float64) + 0.5) * (1.0 / 9007199254740992.0)
        x = std * (np.sqrt(-2.0 * np.log(u[0::2])) * np.cos(2.0 * math.pi * u[1::2]))
        if lo < hi:
            x = x[(x >= lo) & (x <= hi)]
        if len(x) >= n:
            return x[:n].astype(np.float32)
        cand *= 2


def titan_init(a, seed, depth_init=True):
    P = {}
    for i, (fqn, shape) in enumerate(layout(a)):
        n = int(np.prod(shape))
        if "norm" in fqn:
            P[fqn] = np.ones(shape, np.float32)
            continue
        if "tok_embeddings" in fqn:
            std, lo, hi = 1.0, 0.0, 0.0
        elif fqn == "output.weight":
            std = a["dim"] ** -0.5
            lo, hi = -3 * std, 3 * std
        else:
            layer = int(fqn.split(".")[1])
            deep = 0.02 / math.sqrt(2.0 * (layer + 1 if depth_init else a["n_layers"]))
            std = 0.02 if any(k in fqn for k in (".wq.", ".wk.", ".wv.", ".w1.")) else deep
            lo, hi = -2.0, 2.0
        parts = [_chunk_normals(seed, i, c, min(INIT_CHUNK, n - c * INIT_CHUNK), std, lo, hi)
                 for c in range((n + INIT_CHUNK - 1) // INIT_CHUNK)]
        P[fqn] = np.concatenate(parts).reshape(shape)
    return P


def sample_index(n, k=256):
    """The elements of a tensor the flavor case stores: k spread evenly."""
    return np.unique(np.linspace(0, n - 1, min(n, k)).astype(np.int64))


def make_flavor(out, name, a, b, t, seed):
    """A full flavor from titan's init: stores samples of the weights (to check the
    init), the logits and every gradient, not whole tensors."""
    rng = np.random.default_rng(seed)
    a["ffn"] = ffn_hidden(a["dim"], a["multiple_of"], a["ffn_dim_multiplier"])
    W = titan_init(a, seed)
    P = {f: torch.tensor(w.astype(np.float64), requires_grad=True) for f, w in W.items()}
    ids, labels = draw_batch(a, b, t, rng)
    logits = forward(a, P, ids)
    n_valid = int((labels != -100).sum())
    loss = loss_sum(logits, labels) / n_valid
    loss.backward()
    wsamp, gsamp = [], []
    for f, _ in layout(a):
        idx = sample_index(P[f].numel())
        wsamp.append(W[f].ravel()[idx])
        gsamp.append(P[f].grad.numpy().ravel()[idx].astype(np.float32))
    lidx = sample_index(logits.numel(), 4096)
    case = dict(args=a, b=b, t=t, seed=seed, n_valid=n_valid, loss=loss.item(),
                init_seed=seed, sample_k=256, logits_sample_k=4096)
    case["inputs"] = write(out, f"{name}.inputs.bin", ids.numpy().astype("<i4"))
    case["labels"] = write(out, f"{name}.labels.bin", labels.numpy().astype("<i4"))
    case["weights_sample"] = write(out, f"{name}.wsample.bin", np.concatenate(wsamp).astype("<f4"))
    case["grads_sample"] = write(out, f"{name}.gsample.bin", np.concatenate(gsamp).astype("<f4"))
    case["logits_sample"] = write(out, f"{name}.lsample.bin",
                                  logits.detach().numpy().ravel()[lidx].astype("<f4"))
    return case


def args(dim, n_layers, n_heads, n_kv_heads, vocab, multiple_of=32, mult=None, tied=False,
         factor=8.0):
    return dict(dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads,
                vocab=vocab, multiple_of=multiple_of, ffn_dim_multiplier=mult,
                rope_theta=500000.0, rope_factor=factor, tied=tied)


def main():
    torch.set_default_dtype(torch.float64)
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "model", "golden")
    os.makedirs(out, exist_ok=True)
    cases = {
        # GQA (4 heads over 2 kv heads), head_dim 16, odd sequence, batch 2.
        "gqa": make_case(out, "gqa", args(64, 2, 4, 2, 256), 2, 13, seed=1),
        # head_dim 64, one kv head for two query heads, batch 1.
        "hd64": make_case(out, "hd64", args(128, 1, 2, 1, 128), 1, 7, seed=2),
        # head_dim 128, ffn_dim_multiplier, tied embeddings (Llama 3.2 style).
        "hd128": make_case(out, "hd128", args(128, 1, 1, 1, 96, 16, 0.5, tied=True), 3, 5,
                           seed=3),
        # The gqa shape over 0.3.0's documents: per-document RoPE positions and
        # the block-causal mask, other boundaries in each row, a document of one
        # token, one longer than a window's rest.
        "gqa_docs": make_case(out, "gqa_docs", args(64, 2, 4, 2, 256), 2, 13, seed=5,
                              positions=[doc_positions([5, 1, 7]),
                                         doc_positions([3, 10])]),
        # torchtitan's debugmodel at full size with titan's seeded init, seq 37.
        "debugmodel": make_flavor(out, "debugmodel", args(256, 6, 16, 16, 2048, 256), 1, 37,
                                  seed=1234),
        # 10 optimizer steps of the gqa shape.
        "train": make_train(out, "train", args(64, 2, 4, 2, 256), seed=4),
    }
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump({"version": 1, "cases": cases}, f, indent=1)
    print(f"wrote {len(cases)} cases to {out}")


if __name__ == "__main__":
    main()
