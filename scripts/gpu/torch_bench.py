"""PyTorch's figures for the shapes bench_gpu measures, on the same GPU in the same
run (scripts/gpu/check.sh): bf16 matmuls of Llama 3 8B's linears, causal GQA
SDPA (torch's flash kernels), and a training step of the same Llama 3 shapes
under torch.compile with bf16 autocast and fused AdamW, the way torchtitan
trains on one GPU.  Prints "result SECTION NAME VALUE UNIT" lines like bench_gpu.

    python3 torch_bench.py gemm|attention|model FLAVOR LAYERS B T STEPS
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F

PEAK_BF16_FLOPS = 989e12  # torchtitan's H100/H200 SXM figure, as bench_gpu uses

# torchtitan's Llama 3 flavors (dim, layers, heads, kv heads, ffn multiplier,
# multiple_of, tied embeddings); vocab 128256.
FLAVORS = {
    "1B": (2048, 16, 32, 8, 1.5, 256, True),
    "8B": (4096, 32, 32, 8, 1.3, 1024, False),
}
VOCAB = 128256


def result(section, name, value, unit):
    print(f"result {section} {name} {value:.4g} {unit}", flush=True)


def timed_ms(fn, warm, runs):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return statistics.median(out)


def bench_gemm():
    tok = 8192
    shapes = [("wq", 4096, 4096), ("wk", 1024, 4096), ("wo", 4096, 4096),
              ("w1", 14336, 4096), ("w2", 4096, 14336), ("output", VOCAB, 4096)]
    flops_all = ms_all = 0.0
    for name, out, inn in shapes:
        x = torch.randn(tok, inn, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(out, inn, device="cuda", dtype=torch.bfloat16) * 0.02
        dy = torch.randn(tok, out, device="cuda", dtype=torch.bfloat16)
        passes = {
            "fwd": lambda: x @ w.t(),
            "dgrad": lambda: dy @ w,
            "wgrad": lambda: dy.t() @ x,  # bf16 out (titan accumulates into float32)
        }
        for p, fn in passes.items():
            ms = timed_ms(fn, 2, 7)
            fl = 2.0 * tok * out * inn
            flops_all += fl
            ms_all += ms
            result("torch-gemm", f"{name}_{p}_TFLOPs", fl / (ms * 1e-3) / 1e12, "TFLOP/s")
        del x, w, dy
    result("torch-gemm", "8B_linears_TFLOPs", flops_all / (ms_all * 1e-3) / 1e12, "TFLOP/s")


def bench_attention():
    for name, hd in (("8B", 128), ("1B", 64)):
        b, t, h, hkv = 1, 8192, 32, 8
        q = torch.randn(b, h, t, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(b, hkv, t, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(b, hkv, t, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        fwd_flops = 2.0 * 2 * b * h * t * t * hd / 2

        def fwd():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

        ms = timed_ms(fwd, 2, 10)
        result("torch-attention", f"sdpa_{name}_fwd_TFLOPs", fwd_flops / (ms * 1e-3) / 1e12,
               "TFLOP/s")
        o = fwd()
        g = torch.randn_like(o)
        ms = timed_ms(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True), 2, 10)
        result("torch-attention", f"sdpa_{name}_bwd_TFLOPs",
               2.5 * fwd_flops / (ms * 1e-3) / 1e12, "TFLOP/s")


class RMSNorm(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * self.weight


def rope(x, cs):  # x (b, t, h, hd), interleaved pairs like torchtitan
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * cs).flatten(3).type_as(x)


class Block(torch.nn.Module):
    def __init__(self, dim, h, hkv, ffn):
        super().__init__()
        self.h, self.hkv, self.hd = h, hkv, dim // h
        self.attention_norm, self.ffn_norm = RMSNorm(dim), RMSNorm(dim)
        self.wq = torch.nn.Linear(dim, h * self.hd, bias=False)
        self.wk = torch.nn.Linear(dim, hkv * self.hd, bias=False)
        self.wv = torch.nn.Linear(dim, hkv * self.hd, bias=False)
        self.wo = torch.nn.Linear(h * self.hd, dim, bias=False)
        self.w1 = torch.nn.Linear(dim, ffn, bias=False)
        self.w2 = torch.nn.Linear(ffn, dim, bias=False)
        self.w3 = torch.nn.Linear(dim, ffn, bias=False)

    def forward(self, x, cs):
        b, t, _ = x.shape
        xn = self.attention_norm(x)
        q = rope(self.wq(xn).view(b, t, self.h, self.hd), cs)
        k = rope(self.wk(xn).view(b, t, self.hkv, self.hd), cs)
        v = self.wv(xn).view(b, t, self.hkv, self.hd)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True, enable_gqa=True)
        x = x + self.wo(o.transpose(1, 2).reshape(b, t, -1))
        xn = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(xn)) * self.w3(xn))


class Llama(torch.nn.Module):
    def __init__(self, dim, layers, h, hkv, ffn, tied, t):
        super().__init__()
        self.tok_embeddings = torch.nn.Embedding(VOCAB, dim)
        self.layers = torch.nn.ModuleList(Block(dim, h, hkv, ffn) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.output = torch.nn.Linear(dim, VOCAB, bias=False)
        if tied:
            self.output.weight = self.tok_embeddings.weight
        hd = dim // h
        freqs = 1.0 / (500000.0 ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(t).float(), freqs)
        self.register_buffer("cs", torch.polar(torch.ones_like(ang), ang).view(1, t, 1, hd // 2),
                             persistent=False)

    def forward(self, ids):
        x = self.tok_embeddings(ids)
        for layer in self.layers:
            x = layer(x, self.cs)
        return self.output(self.norm(x))


def ffn_hidden(dim, mult, multiple_of):
    h = int(2 * 4 * dim / 3)
    h = int(mult * h)
    return multiple_of * ((h + multiple_of - 1) // multiple_of)


def bench_model(flavor, layers, b, t, steps):
    dim, n_layers, h, hkv, mult, multiple_of, tied = FLAVORS[flavor]
    layers = layers or n_layers
    ffn = ffn_hidden(dim, mult, multiple_of)
    model = Llama(dim, layers, h, hkv, ffn, tied, t).cuda()
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.02)
    opt = torch.optim.AdamW(model.parameters(), lr=8e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=True)
    # torchtitan's apply_compile: each block compiled on its own (the blocks are
    # alike, so one compilation serves them all)
    for i, block in enumerate(model.layers):
        model.layers[i] = torch.compile(block)
    ids = torch.randint(0, VOCAB, (b, t), device="cuda")
    labels = torch.randint(0, VOCAB, (b, t), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(ids)
        loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.time()
    step()
    torch.cuda.synchronize()
    compile_s = time.time() - t0
    step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        t0 = time.time()
        step()
        torch.cuda.synchronize()
        times.append(time.time() - t0)
    st = statistics.median(times)
    nparams = sum(p.numel() for p in model.parameters())
    emb = VOCAB * dim
    # torchtitan's flops per token, as titan's model_flops_per_token counts it
    flops_tok = 6 * (nparams - emb) + 6 * layers * h * 2 * (dim // h) * t
    tps = b * t / st
    name = f"{flavor}_L{layers}_t{t}_none"
    print(f"  torch.compile {flavor} with {layers} layers: compile {compile_s:.0f} s, step "
          f"{1e3 * st:.1f} ms, {tps:.0f} tokens/s, MFU {100 * flops_tok * tps / PEAK_BF16_FLOPS:.1f}%, "
          f"peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB", flush=True)
    result("torch-model", f"{name}_tokens_per_s", tps, "tok/s")
    result("torch-model", f"{name}_MFU", 100 * flops_tok * tps / PEAK_BF16_FLOPS, "%")
    result("torch-model", f"{name}_peak_GiB", torch.cuda.max_memory_allocated() / 2**30, "GiB")


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}", flush=True)
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "gemm":
        bench_gemm()
    elif what == "attention":
        bench_attention()
    elif what == "model" and len(sys.argv) == 7:
        bench_model(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
                    int(sys.argv[6]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
