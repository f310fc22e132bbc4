#!/usr/bin/env python3
"""Golden data for the Float8 grouped experts (backend f8_grouped_matmul,
tests/float8/test_f8_grouped.c): torchao's _Float8GroupedMM
(torchao/prototype/moe_training/fp8_grouped_mm.py), the op torchtitan 0.3.0's
Float8GroupedExpertsConverter (0.2.2's quantize.grouped_mm.float8) puts under
the routed experts.

torchao's op runs on CUDA only (torch._scaled_grouped_mm has no CPU kernel,
its casts are Triton kernels).  This script runs the same forward and backward
with the pure-torch reference casts torchao tests its Triton kernels against
(prototype.moe_training.utils: torch_to_float8_per_group_colwise,
torch_to_3d_rowwise_float8_transpose_rhs, and float8_utils' tensor_to_scale /
to_fp8_saturated for the rowwise casts), each with round_scales_to_power_of_2
and float8_e4m3fn as _Float8GroupedMM passes them, and emulates
_scaled_grouped_mm in float64: sum of the float8 values' products times
1 / (scale_a scale_b), rounded to bfloat16 (out_dtype).

Cases (deepseek_v3's debugmodel experts: dim 256, 8 experts, with
moe_inter_dim 64 instead of 256 to keep the files small; 16 tokens top-3 = 48
rows; one expert empty, groups not multiples of 16):
  op.*     one GEMM (K 64, N 32): x (rows, K), w (E, N, K), dy (rows, N); its forward
           y = x w[g]^T, dx = dy w[g], dw[g] = dy_g^T x_g
  exp.*    the SwiGLU experts of torchtitan's GroupedExperts
           (_run_experts_grouped_mm): y = (silu(x w1^T) * (x w3^T)) w2^T, in
           bfloat16 as torch runs it, with autograd's dx, dw1, dw2, dw3 for an
           upstream gradient dy

Writes into tests/float8/golden/ (or argv[1]): grouped.json and
grouped.<case>.<name>.bf16 (bfloat16 bits, LE u16, row-major).  Needs torch and torchao
(PYTHONPATH to a torchao source tree is enough); never needed by CI.  The
committed files: torch 2.15 (CPU) with pytorch/ao's source at commit 36027d82d
(2026), whose version string reads "unknown".
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
import torchao
from torchao.float8.config import ScalingGranularity
from torchao.float8.float8_utils import tensor_to_scale, to_fp8_saturated
from torchao.prototype.moe_training.utils import (
    torch_to_3d_rowwise_float8_transpose_rhs,
    torch_to_float8_per_group_colwise,
)

FP8 = torch.float8_e4m3fn


def rowwise_2d(x):
    """triton_fp8_rowwise_2d_scale_and_cast's reference: per-row scales."""
    s = tensor_to_scale(x, FP8, scaling_granularity=ScalingGranularity.AXISWISE,
                        axiswise_dim=-1, round_scales_to_power_of_2=True)
    return to_fp8_saturated(x.to(torch.float32) * s, FP8), s  # s (M, 1)


def colwise_3d(b_t):
    """triton_fp8_colwise_3d_scale_and_cast's reference: B_t (E, K, N), one
    scale per expert and column n (amax over K)."""
    s = tensor_to_scale(b_t, FP8, scaling_granularity=ScalingGranularity.AXISWISE,
                        axiswise_dim=-2, round_scales_to_power_of_2=True)
    return to_fp8_saturated(b_t.to(torch.float32) * s, FP8), s  # s (E, 1, N)


def scaled_grouped_mm_2d3d(a8, sa, b8, sb, offs):
    """_scaled_grouped_mm(A (M, K), B (E, K, N)): rows of group g times B[g]."""
    a = a8.to(torch.float64) / sa.to(torch.float64)
    b = b8.to(torch.float64) / sb.to(torch.float64)
    out = torch.zeros(a.shape[0], b.shape[-1], dtype=torch.float64)
    r0 = 0
    for g, r1 in enumerate(offs.tolist()):
        out[r0:r1] = a[r0:r1] @ b[g]
        r0 = r1
    return out.to(torch.bfloat16)


class Float8GroupedMMRef(torch.autograd.Function):
    """_Float8GroupedMM's forward and backward with the reference casts."""

    @staticmethod
    def forward(ctx, a, b_t, offs):
        a8, sa = rowwise_2d(a)
        b8, sb = colwise_3d(b_t)
        ctx.save_for_backward(a, b_t, offs)
        return scaled_grouped_mm_2d3d(a8, sa, b8, sb, offs)

    @staticmethod
    def backward(ctx, dy):
        a, b_t, offs = ctx.saved_tensors
        dy8, sdy = rowwise_2d(dy)
        # B (E, N, K) with one scale per expert and k (amax over N)
        b8, sb = torch_to_3d_rowwise_float8_transpose_rhs(b_t, FP8, True)
        da = scaled_grouped_mm_2d3d(dy8, sdy, b8, sb, offs)
        # per group, per column of dy and of a, over the group's rows
        # (torch_to_float8_per_group_colwise's loop; it cannot take an empty
        # group, whose gradient is zero, so the loop is its body per group)
        db = torch.zeros(b_t.shape, dtype=torch.float64)  # (E, K, N)
        r0 = 0
        for g, r1 in enumerate(offs.tolist()):
            if r1 > r0:
                one = offs.new_tensor([r1 - r0])
                dy8c, sdyc = torch_to_float8_per_group_colwise(dy[r0:r1], one, FP8, True)
                a8c, sac = torch_to_float8_per_group_colwise(a[r0:r1], one, FP8, True)
                dyg = dy8c.to(torch.float64) / sdyc.to(torch.float64)
                ag = a8c.to(torch.float64) / sac.to(torch.float64)
                db[g] = (dyg.t() @ ag).t()
            r0 = r1
        return da, db.to(torch.bfloat16), None


def gmm(x, w, offs):
    """torchtitan's _grouped_mm(x, w.transpose(-2, -1), offs), Float8."""
    return Float8GroupedMMRef.apply(x, w.transpose(-2, -1), offs)


def bf16(rng, *shape, std=1.0):
    return torch.from_numpy(rng.standard_normal(shape) * std).to(torch.bfloat16)


def write(out, case, name, t):
    """Every tensor here is bfloat16-valued: its bits, LE u16."""
    fname = f"grouped.{case}.{name}.bf16"
    t.detach().to(torch.bfloat16).contiguous().view(torch.int16).numpy().astype(
        "<i2").tofile(os.path.join(out, fname))
    return fname


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/float8/golden"
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(25)
    groups = [7, 0, 9, 5, 6, 8, 10, 3]  # 16 tokens x top-3
    offs = torch.tensor(np.cumsum(groups), dtype=torch.int32)
    rows, e, d, inter = int(offs[-1]), len(groups), 256, 64
    index = {"groups": groups, "rows": rows, "experts": e, "cases": {}}

    # one GEMM: K = 64, N = 32
    x = bf16(rng, rows, 64).requires_grad_()
    w = bf16(rng, e, 32, 64, std=0.05).requires_grad_()
    y = gmm(x, w, offs)
    dy = bf16(rng, rows, 32, std=0.1)
    y.backward(dy)
    c = {"k": 64, "n": 32}
    for name, t in (("x", x), ("w", w), ("dy", dy), ("y", y), ("dx", x.grad),
                    ("dw", w.grad)):
        c[name] = write(out, "op", name, t)
    index["cases"]["op"] = c

    # the SwiGLU experts
    x = bf16(rng, rows, d).requires_grad_()
    w1 = bf16(rng, e, inter, d, std=0.05).requires_grad_()
    w3 = bf16(rng, e, inter, d, std=0.05).requires_grad_()
    w2 = bf16(rng, e, d, inter, std=0.05).requires_grad_()
    h = F.silu(gmm(x, w1, offs)) * gmm(x, w3, offs)
    y = gmm(h, w2, offs)
    dy = bf16(rng, rows, d, std=0.1)
    y.backward(dy)
    c = {"dim": d, "inter": inter}
    for name, t in (("x", x), ("w1", w1), ("w2", w2), ("w3", w3), ("dy", dy), ("y", y),
                    ("dx", x.grad), ("dw1", w1.grad), ("dw2", w2.grad), ("dw3", w3.grad)):
        c[name] = write(out, "exp", name, t)
    index["cases"]["exp"] = c
    index["torch"] = torch.__version__
    index["torchao"] = getattr(torchao, "__version__", "source tree")
    with open(os.path.join(out, "grouped.json"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
