"""Goldens for core/torch_rng (tests/core/test_torch_rng.c): torch's default
CPU generator, seeded with torch.manual_seed, drawing what torchtitan 0.3.0's
Flux pipeline draws (the DataLoader's base seed, randint, rand, randn,
randn_like of bf16), over several seeds, sizes and interleavings.

    python scripts/torch_rng_golden.py

writes tests/core/torch_rng/ops.txt (torch at its AVX2 kernels, what it runs on
any x86-64 with AVX2 or AVX-512) and ops_default.txt (the same torch under
ATEN_CPU_CAPABILITY=default, the normal kernel aarch64 runs).  A file is a
script of lines the test replays on one generator, comparing each result:

    seed S KERNEL                         torch.manual_seed(S)
    int64 N = v...                        N x torch.empty((), dtype=int64).random_()
    randint LOW HIGH N = v...             torch.randint(LOW, HIGH, (N,))
    rand|randn f32|f64|bf16 N = h...      torch.rand/randn((N,), dtype=...)
    state sha256 H                        sha256 of torch.get_rng_state()

Values are decimal (int64) or the element's bits in hex; past 8 elements the
line gives the first 8 and "sha256 H" of all N little-endian elements.  After
a state line the test continues on a generator set from its own state bytes,
which is how resuming mid-sequence is checked.
"""
import hashlib
import os
import subprocess
import sys

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "core", "torch_rng")
SHOW = 8
SEEDS = [0, 1, 42, 2**32 + 7, 0xDEADBEEFCAFEF00D]
SIZES = [1, 2, 15, 16, 17, 31, 32, 33, 1000, 4096 + 3]
DTYPES = {"f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16}
BITS = {"f32": torch.int32, "f64": torch.int64, "bf16": torch.int16}
WIDTH = {"f32": 8, "f64": 16, "bf16": 4}


class Script:
    def __init__(self, kernel):
        self.kernel = kernel
        self.lines = []

    def comment(self, text):
        self.lines.append("# " + text)

    def seed(self, s):
        torch.manual_seed(s)
        self.lines.append(f"seed {s} {self.kernel}")

    def _values(self, head, words, raw):
        shown = " ".join(words[:SHOW])
        if len(words) > SHOW:
            shown += " sha256 " + hashlib.sha256(raw).hexdigest()
        self.lines.append(f"{head} = {shown}")

    def int64(self, n):
        v = [torch.empty((), dtype=torch.int64).random_().item() for _ in range(n)]
        raw = b"".join(x.to_bytes(8, "little", signed=True) for x in v)
        self._values(f"int64 {n}", [str(x) for x in v], raw)

    def randint(self, low, high, n):
        t = torch.randint(low, high, (n,))
        assert t.dtype == torch.int64
        self._values(f"randint {low} {high} {n}", [str(x) for x in t.tolist()],
                     t.numpy().astype("<i8").tobytes())

    def draw(self, op, dt, n):
        t = getattr(torch, op)((n,), dtype=DTYPES[dt])
        self._floats(f"{op} {dt} {n}", dt, t)

    def randn_like(self, dt, shape):
        """randn_like of a chunk of a wider tensor, as DiagonalGaussian draws:
        the chunk is not contiguous, randn_like's result is."""
        z = torch.zeros((shape[0], 2 * shape[1]) + tuple(shape[2:]), dtype=DTYPES[dt])
        mean, _ = torch.chunk(z, 2, dim=1)
        assert shape[0] == 1 or not mean.is_contiguous()
        t = torch.randn_like(mean)
        assert t.is_contiguous()
        self._floats(f"randn {dt} {t.numel()}", dt, t.reshape(-1))

    def _floats(self, head, dt, t):
        b = t.view(BITS[dt]).numpy()
        w = WIDTH[dt]
        words = [format(int(x) & ((1 << (4 * w)) - 1), f"0{w}x") for x in b]
        self._values(head, words, t.view(BITS[dt]).numpy().tobytes())

    def state(self):
        s = torch.get_rng_state()
        assert s.numel() == 5056
        self.lines.append("state sha256 " + hashlib.sha256(s.numpy().tobytes()).hexdigest())

    def write(self, name):
        with open(os.path.join(OUT, name), "w") as f:
            f.write("\n".join(self.lines) + "\n")
        print(f"{name}: {len(self.lines)} lines", file=sys.stderr)


def sizes_cases(s, seeds, dtypes):
    for seed in seeds:
        for dt in dtypes:
            s.comment(f"every size in turn on one generator, {dt}")
            s.seed(seed)
            for n in SIZES:
                s.draw("rand", dt, n)
                s.draw("randn", dt, n)
            s.int64(1)


def randint_cases(s):
    s.comment("randint ranges either side of 2^28 (random() below, random64() from there)")
    s.seed(7)
    for low, high in [(0, 1), (0, 2), (0, 3), (0, 2**28 - 1), (0, 2**28), (-5, 5),
                      (0, 2**31 + 1), (0, 2**32), (0, 2**33), (-(2**40), 2**40),
                      (-(2**62), 2**62)]:
        s.randint(low, high, 20)
    s.int64(3)


def flux_cases(s):
    s.comment("Flux: the loader's base seed, per sample randint + 2 rand, then a step's draws")
    for seed in [0, 42]:
        s.seed(seed)
        s.int64(1)
        for step in range(2):
            for high in [513, 1, 86, 300]:
                s.randint(0, high, 1)
                s.draw("rand", "f32", 1)
                s.draw("rand", "f32", 1)
            s.randn_like("f32", (4, 16, 4, 4))  # the posterior's eps
            s.draw("randn", "f32", 4 * 16 * 4 * 4)  # the noise
            s.draw("rand", "f32", 4)  # the timesteps
        s.randn_like("bf16", (2, 16, 3, 3))  # a bf16 autoencoder's posterior
        s.randn_like("f32", (2, 1, 1, 5))  # under 16: the scalar path


def cache_and_state_cases(s):
    s.comment("the scalar path's cached normal, and the state bytes mid-sequence")
    s.seed(3)
    s.state()  # seeded, nothing drawn: next 0
    s.draw("randn", "f32", 1)  # draws a pair, caches the second
    s.state()  # the cache is in the bytes
    s.draw("randn", "f32", 1)  # the cached one, no draw
    s.draw("randn", "f32", 3)
    s.draw("randn", "f64", 2)
    s.draw("randn", "bf16", 5)
    s.state()
    s.draw("randn", "f32", 16)  # the vector path leaves the cache alone
    s.draw("randn", "f32", 1)
    s.seed(3)  # manual_seed clears the cache
    s.draw("randn", "f32", 1)
    s.seed(11)
    s.draw("rand", "f32", 624)  # a whole block: next 624, left 1
    s.state()
    s.draw("rand", "f32", 5)
    s.draw("rand", "f32", 300)
    s.state()
    s.int64(2)
    s.draw("randn", "f32", 33)


def long_cases(s):
    s.comment("a million normals: the Box-Muller's rare last-bit cases")
    s.seed(123)
    s.draw("randn", "f32", 1 << 20)
    s.draw("randn", "bf16", 1 << 20)


def default_kernel_run():
    """This script again under ATEN_CPU_CAPABILITY=default: its normal_fill."""
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default")
    subprocess.run([sys.executable, __file__, "--default"], env=env, check=True)


def main():
    os.makedirs(OUT, exist_ok=True)
    if sys.argv[1:] == ["--default"]:
        assert torch.backends.cpu.get_cpu_capability() == "DEFAULT"
        s = Script("default")
        sizes_cases(s, [0, 42], ["f32", "bf16"])
        flux_cases(s)
        long_cases(s)
        s.write("ops_default.txt")
        return
    cap = torch.backends.cpu.get_cpu_capability()
    assert cap in ("AVX2", "AVX512"), f"torch runs at {cap}: its normal kernel is not AVX2's"
    s = Script("avx2")
    s.comment(f"torch {torch.__version__} at {cap} (its normal kernel: AVX2's)")
    sizes_cases(s, SEEDS, ["f32", "f64", "bf16"])
    randint_cases(s)
    flux_cases(s)
    cache_and_state_cases(s)
    long_cases(s)
    s.write("ops.txt")
    default_kernel_run()


if __name__ == "__main__":
    main()
