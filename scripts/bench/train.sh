#!/bin/sh
# Benchmark: titan-train's training throughput on the CPU (debugmodel), and the
# same model, batch and thread count in PyTorch when $PYTHON has torch.
#
#   sh scripts/bench/train.sh            (BENCH_STEPS, BENCH_THREADS, BENCH_SEQ, BENCH_BATCH)
#
# Prints tokens per second and the time per step of both, measured over the
# steps after the first (warm-up).
set -eu
B=${BIN:-bin}
STEPS=${BENCH_STEPS:-12}
THREADS=${BENCH_THREADS:-$(nproc)}
SEQ=${BENCH_SEQ:-256}
BATCH=${BENCH_BATCH:-4}
W=$(mktemp -d "${TMPDIR:-/tmp}/titan-bench-train.XXXXXX")
trap 'rm -rf "$W"' EXIT

. scripts/bench/lib/fortunes_data.sh
fortunes_data "$B" "$W"

OMP_NUM_THREADS=$THREADS "$B/titan-train" --config configs/debug_model.toml \
	--job.dump_folder "$W/run" --training.dataset_path "$W/data" --training.steps "$STEPS" \
	--training.seq_len "$SEQ" --training.local_batch_size "$BATCH" --metrics.log_freq 1000 \
	--activation_checkpoint.mode none 2>"$W/train.log"
# Mean over steps 2..N of the per-step time in metrics.jsonl.
titan=$(grep '"loss"' "$W/run/metrics.jsonl" | tail -n +2 |
	sed 's/.*"time_s":\([^,]*\),.*/\1/' | awk '{ s += $1; n++ } END { printf "%.4f", s / n }')
tokens=$((SEQ * BATCH))
echo "titan-train  debugmodel  threads $THREADS  batch $BATCH x $SEQ  $(awk -v t="$titan" -v n=$tokens 'BEGIN { printf "%.3f s/step  %.0f tokens/s", t, n / t }')"

PY=${PYTHON:-python3}
if ! "$PY" -c 'import torch' 2>/dev/null; then
	echo "pytorch      (skipped: \$PYTHON has no torch)"
	exit 0
fi
"$PY" - "$STEPS" "$THREADS" "$SEQ" "$BATCH" <<'EOF'
# The same Llama (dim 256, 6 layers, 16 heads, FFN 768, vocab 2048) in plain
# PyTorch: forward, backward, clip, AdamW, float32 on the CPU.
import sys, time, torch, torch.nn as nn, torch.nn.functional as F
steps, threads, T, B = map(int, sys.argv[1:5])
torch.set_num_threads(threads)
torch.manual_seed(0)
D, L, H, V, FF = 256, 6, 16, 2048, 768
HD = D // H

class Norm(nn.Module):
    def __init__(s):
        super().__init__(); s.w = nn.Parameter(torch.ones(D))
    def forward(s, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * s.w

def rope(x, cs):
    x = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(x * cs).flatten(3)

class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.q, s.k, s.v, s.o = (nn.Linear(D, D, bias=False) for _ in range(4))
        s.w1, s.w3 = nn.Linear(D, FF, bias=False), nn.Linear(D, FF, bias=False)
        s.w2 = nn.Linear(FF, D, bias=False)
        s.n1, s.n2 = Norm(), Norm()
    def forward(s, x, cs):
        h = s.n1(x)
        q, k, v = (f(h).view(B, T, H, HD) for f in (s.q, s.k, s.v))
        q, k = rope(q, cs), rope(k, cs)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + s.o(a.transpose(1, 2).reshape(B, T, D))
        h = s.n2(x)
        return x + s.w2(F.silu(s.w1(h)) * s.w3(h))

emb, blocks, norm, out = nn.Embedding(V, D), nn.ModuleList(Block() for _ in range(L)), Norm(), nn.Linear(D, V, bias=False)
params = [p for m in (emb, blocks, norm, out) for p in m.parameters()]
opt = torch.optim.AdamW(params, lr=8e-4, betas=(0.9, 0.95), weight_decay=0.1)
freqs = 1.0 / (500000.0 ** (torch.arange(0, HD, 2).float() / HD))
cs = torch.polar(torch.ones(T, HD // 2), torch.outer(torch.arange(T).float(), freqs))[None, :, None, :]
x = torch.randint(0, V, (B, T + 1))
times = []
for i in range(steps):
    t0 = time.perf_counter()
    h = emb(x[:, :-1])
    for b in blocks:
        h = b(h, cs)
    loss = F.cross_entropy(out(norm(h)).flatten(0, 1), x[:, 1:].flatten())
    opt.zero_grad(); loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0); opt.step()
    times.append(time.perf_counter() - t0)
t = sum(times[1:]) / (len(times) - 1)
print(f"pytorch {torch.__version__}  debugmodel  threads {threads}  batch {B} x {T}  {t:.3f} s/step  {B * T / t:.0f} tokens/s")
EOF
