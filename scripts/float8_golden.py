#!/usr/bin/env python3
"""Golden data for lib/float8 (tests/float8/test_float8.c): torchao's Float8
training numerics, taken from torch and torchao themselves.

Writes into tests/float8/golden/ (or the folder given as argv[1]):
  index.json   versions, the recipes' cast configs as torchao builds them, the
               filter decisions, and the cases below with their file names
  codes.<fmt>.f32         float32 LE (256): each of the 256 codes as torch reads it
  cast.in.u32             float32 bit patterns (LE u32) cast below
  cast.<fmt>.u8           torch's plain `x.to(float8)` of each
  cast.<fmt>.sat.u8       torchao's to_fp8_saturated (clamp, then the cast)
  scale.amax.f32          amax values; scale.<fmt>.<p>.f32 amax_to_scale of
                          each (p = pow2 when round_scales_to_power_of_2)
  pow2.in.f32, pow2.out.f32   _round_scale_down_to_power_of_2 near powers of two
  <case>.{x,w,dy}.f32     a linear's input (M, K), weight (N, K), grad (M, N)
  <case>.<recipe>.{y,dx,dw}.f32   Float8Linear(emulate=True): output, grads
  <case>.<recipe>.<cast>.{u8,scale.f32}  the float8 bits and scales of each
                          operand of each GEMM, in the operand's own layout
                          (x: (M, K), w: (N, K), dy: (M, N))

<fmt> is e4m3fn or e5m2; <recipe> tensorwise, rowwise, rowwise_with_gw_hp;
<cast> input, weight, grad_output (their casts for the output and grad_input
GEMMs), weight_gi, input_gw, grad_output_gw (for the other GEMM).

Run with the interpreter in $PYTHON (torch, torchao, numpy); never needed by CI.
"""
import dataclasses
import json
import os
import sys
from functools import partial

import numpy as np
import torch
import torchao
from torchao.float8 import Float8LinearConfig, _auto_filter_for_recipe
from torchao.float8.config import ScalingGranularity, ScalingType
from torchao.float8.float8_linear import Float8Linear
from torchao.float8.float8_scaling_utils import get_maybe_axiswise_dim, hp_tensor_to_float8_dynamic
from torchao.float8.float8_training_tensor import GemmInputRole, LinearMMConfig
from torchao.float8.float8_utils import (
    _round_scale_down_to_power_of_2,
    amax_to_scale,
    to_fp8_saturated,
)

FMTS = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
RECIPES = ["tensorwise", "rowwise", "rowwise_with_gw_hp"]


def write(out, name, arr, dtype):
    np.ascontiguousarray(arr, dtype=dtype).tofile(os.path.join(out, name))
    return name


def f32_bits(a):
    return np.asarray(a, dtype="<f4").view("<u4")


def cast_inputs(rng):
    """Every code's neighbourhood: the values, the midpoints between adjacent
    codes (the ties) and one float32 ulp on each side, for both formats; the
    overflow and underflow edges; specials; random bit patterns; random values
    over many binades."""
    v = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1e-38, 3.4e38, -3.4e38]
    v += [448.0, 464.0, 464.0001, 479.99, 480.0, 512.0, 57344.0, 61439.0, 61440.0, 61441.0, 65536.0]
    for dt in FMTS.values():
        codes = torch.arange(256, dtype=torch.uint8).view(dt).float().numpy()
        pos = np.unique(codes[np.isfinite(codes) & (codes >= 0)])
        mids = ((pos[:-1].astype(np.float64) + pos[1:]) / 2).astype(np.float32)
        for m in np.concatenate([pos, mids]):
            for x in (m, np.nextafter(m, np.float32(0)), np.nextafter(m, np.float32(np.inf))):
                v += [x, -x]
        # Between the largest finite value and twice it (saturation, overflow).
        top = pos[-1]
        v += list(np.linspace(top, 2 * top, 41, dtype=np.float32))
        v += list(np.float32(pos[1]) * np.array([0.25, 0.5, 0.5001, 0.75, 1.5], dtype=np.float32))
    bits = list(f32_bits(np.array(v, dtype=np.float32)))
    bits += list(rng.integers(0, 2**32, size=4096, dtype=np.uint64).astype(np.uint32))
    # NaNs with payloads and both signs.
    bits += [0x7FC00001, 0xFFC00000, 0x7F800001, 0xFF812345]
    mag = rng.standard_normal(4096) * np.exp2(rng.integers(-30, 24, size=4096))
    bits += list(f32_bits(mag.astype(np.float32)))
    return np.array(bits, dtype=np.uint32)


def amax_inputs(rng):
    v = [0.0, 1e-45, 1e-38, 1e-13, 1e-12, 1.0000001e-12, 2e-12, 1e-6, 0.5, 1.0, 3.0, 448.0,
         1e4, 57344.0, 3.0e38, np.inf, np.nan]
    v += list(np.exp2(rng.uniform(-40, 40, size=2000)))
    v += list(448.0 / np.exp2(np.arange(-30, 30)))  # scales landing on powers of two
    v += list(57344.0 / np.exp2(np.arange(-30, 30)))
    return np.array(v, dtype=np.float32)


def pow2_inputs():
    v = []
    for k in range(-40, 60):
        p = np.float32(2.0) ** k
        v.append(p)
        for d in range(1, 16):
            v.append(np.float32(p * (1 - d * 2.0**-24)))
            v.append(np.float32(p * (1 + d * 2.0**-23)))
    return np.array(v, dtype=np.float32)


def cast_name(cc):
    if cc.scaling_type is ScalingType.DISABLED:
        return {"float8": False}
    return {
        "float8": True,
        "granularity": cc.scaling_granularity.value,
        "dtype": {torch.float8_e4m3fn: "e4m3fn", torch.float8_e5m2: "e5m2"}[cc.target_dtype],
    }


def recipe_config(name, emulate=True):
    c = Float8LinearConfig.from_recipe_name(name)
    return dataclasses.replace(c, emulate=emulate)


def recipe_json(name):
    c = recipe_config(name)
    return {
        "input": cast_name(c.cast_config_input),
        "weight": cast_name(c.cast_config_weight),
        "grad_output": cast_name(c.cast_config_grad_output),
        "weight_gi": cast_name(c.cast_config_weight_for_grad_input),
        "input_gw": cast_name(c.cast_config_input_for_grad_weight),
        "grad_output_gw": cast_name(c.cast_config_grad_output_for_grad_weight),
        "round_scales_to_power_of_2": c.round_scales_to_power_of_2,
    }


def operand_casts(c, x, w, dy):
    """The six casts exactly as matmul_with_hp_or_float8_args makes them, with
    the hp tensor, role and axiswise dim it passes; returned in the operand's
    own layout: (name, bits (rows, cols) uint8, scale per row / column / one)."""
    mm = LinearMMConfig()
    wt = w.t()
    todo = [
        ("input", x, c.cast_config_input, GemmInputRole.INPUT, -1, False),
        ("weight", wt, c.cast_config_weight, GemmInputRole.WEIGHT, 0, True),
        ("grad_output", dy, c.cast_config_grad_output, GemmInputRole.GRAD_OUTPUT, -1, False),
        ("weight_gi", wt, c.cast_config_weight_for_grad_input, GemmInputRole.WEIGHT, -1, True),
        ("grad_output_gw", dy, c.cast_config_grad_output_for_grad_weight,
         GemmInputRole.GRAD_OUTPUT, 0, False),
        ("input_gw", x, c.cast_config_input_for_grad_weight, GemmInputRole.INPUT, 0, False),
    ]
    out = []
    for name, t, cc, role, dim, transposed in todo:
        if cc.scaling_type is ScalingType.DISABLED:
            continue
        f8 = hp_tensor_to_float8_dynamic(
            t, cc.target_dtype, mm, gemm_input_role=role,
            scaling_granularity=cc.scaling_granularity,
            axiswise_dim=get_maybe_axiswise_dim(dim, cc.scaling_granularity),
            round_scales_to_power_of_2=c.round_scales_to_power_of_2)
        bits = f8._data.view(torch.uint8)
        if transposed:
            bits = bits.t()
        out.append((name, bits.contiguous().numpy(), f8._scale.reshape(-1).numpy()))
    return out


def draw_linear(rng, m, k, n):
    """Rows of x and columns of w over six decades (so rowwise and tensorwise
    scales differ), a zero row (amax 0: the epsilon), one outlier, and values
    that fall into float8's subnormals."""
    x = rng.standard_normal((m, k)) * np.exp2(rng.uniform(-10, 10, size=(m, 1)))
    x[1] = 0.0
    x[2, 3] = 3.0e4
    w = rng.standard_normal((n, k)) * 0.02 * np.exp2(rng.uniform(-8, 4, size=(1, k)))
    w[0, : k // 2] *= 1e-4
    dy = rng.standard_normal((m, n)) * 1e-3 * np.exp2(rng.uniform(-6, 6, size=(m, 1)))
    dy[:, 1] *= 1e3
    return [np.asarray(a, dtype=np.float32) for a in (x, w, dy)]


def linear_case(out, name, m, k, n, rng, batch=None):
    x, w, dy = draw_linear(rng, m, k, n)
    case = {"m": m, "k": k, "n": n, "x": write(out, f"{name}.x.f32", x, "<f4"),
            "w": write(out, f"{name}.w.f32", w, "<f4"),
            "dy": write(out, f"{name}.dy.f32", dy, "<f4"), "recipes": {}}
    for r in RECIPES:
        c = recipe_config(r)
        lin = torch.nn.Linear(k, n, bias=False)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w))
        f8 = Float8Linear.from_float(lin, config=c)
        xt = torch.from_numpy(x).clone()
        dyt = torch.from_numpy(dy).clone()
        if batch:  # the same rows as a (batch, m / batch, k) input
            xt = xt.reshape(batch, m // batch, k)
            dyt = dyt.reshape(batch, m // batch, n)
        xt.requires_grad_(True)
        y = f8(xt)
        y.backward(dyt)
        rc = {
            "y": write(out, f"{name}.{r}.y.f32", y.detach().reshape(m, n).numpy(), "<f4"),
            "dx": write(out, f"{name}.{r}.dx.f32", xt.grad.reshape(m, k).numpy(), "<f4"),
            "dw": write(out, f"{name}.{r}.dw.f32", f8.weight.grad.numpy(), "<f4"),
            "casts": {},
        }
        tx, tw, tdy = (torch.from_numpy(a) for a in (x, w, dy))
        for cname, bits, scale in operand_casts(c, tx, tw, tdy):
            rc["casts"][cname] = {
                "bits": write(out, f"{name}.{r}.{cname}.u8", bits, "u1"),
                "scale": write(out, f"{name}.{r}.{cname}.scale.f32", scale, "<f4"),
                "n_scales": int(scale.size),
            }
        case["recipes"][r] = rc
    return case


# Linears whose conversion torchtitan decides: Llama 3 8B / 70B / debugmodel
# shapes (N = out_features, K = in_features) and some that fail the rules.
FILTER_LINEARS = [
    ("layers.0.attention.wq", 4096, 4096), ("layers.0.attention.wk", 1024, 4096),
    ("layers.0.attention.wv", 1024, 4096), ("layers.0.attention.wo", 4096, 4096),
    ("layers.0.feed_forward.w1", 14336, 4096), ("layers.0.feed_forward.w2", 4096, 14336),
    ("layers.0.feed_forward.w3", 14336, 4096), ("output", 128256, 4096),
    ("layers.1.attention.wq", 8192, 8192), ("layers.1.attention.wk", 1024, 8192),
    ("layers.1.feed_forward.w1", 28672, 8192), ("layers.1.feed_forward.w2", 8192, 28672),
    ("layers.2.attention.wq", 256, 256), ("layers.2.feed_forward.w1", 768, 256),
    ("layers.2.feed_forward.w2", 256, 768), ("output", 2048, 256),
    ("layers.3.attention.wq", 4104, 4096), ("layers.3.attention.wk", 1024, 4100),
    ("layers.4.feed_forward.w1", 2048, 2048), ("layers.4.feed_forward.w2", 2064, 1040),
    ("layers.4.feed_forward.w3", 4096, 2048), ("layers.4.attention.wo", 4096, 2064),
    ("layers.4.attention.wv", 4112, 1024), ("layers.4.attention.wk", 1024, 4112),
    ("layers.5.attention.wq", 1040, 4096), ("layers.5.attention.wk", 1024, 4112),
    ("layers.10.attention.wq", 4096, 4096), ("layers.1.attention.wq_extra", 4096, 4096),
]
FILTER_CONFIGS = [
    ([], "tensorwise", False), (["output"], "tensorwise", False),
    (["attention.wq", "w2"], "tensorwise", False), (["layers.1"], "tensorwise", False),
    ([], "tensorwise", True), (["output"], "tensorwise", True), ([], "rowwise", True),
    (["output", "wk"], "rowwise", True), (["output"], "rowwise_with_gw_hp", False),
]


def filter_cases():
    from torchtitan.components.quantization.utils import module_filter_fn

    out = []
    with torch.device("meta"):
        mods = [(fqn, torch.nn.Linear(k, n, bias=False)) for fqn, n, k in FILTER_LINEARS]
    for fqns, recipe, auto in FILTER_CONFIGS:
        if auto:
            fn = _auto_filter_for_recipe(recipe, filter_fqns=list(fqns))
        else:
            fn = partial(module_filter_fn, filter_fqns=list(fqns))
        out.append({"filter_fqns": fqns + (["auto_filter_small_kn"] if auto else []),
                    "recipe": recipe, "convert": [bool(fn(m, fqn)) for fqn, m in mods]})
    return out


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/float8/golden"
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    rng = np.random.default_rng(20261203)
    index = {"torch": torch.__version__, "torchao": torchao.__version__, "seed": 20261203}

    for f, dt in FMTS.items():
        codes = torch.arange(256, dtype=torch.uint8).view(dt).float().numpy()
        index[f"codes_{f}"] = write(out, f"codes.{f}.f32", codes, "<f4")
        index[f"max_{f}"] = float(torch.finfo(dt).max)

    bits = cast_inputs(rng)
    x = torch.from_numpy(bits.view("<f4").copy())
    index["cast"] = {"n": int(bits.size), "in": write(out, "cast.in.u32", bits, "<u4")}
    for f, dt in FMTS.items():
        index["cast"][f] = write(out, f"cast.{f}.u8", x.to(dt).view(torch.uint8).numpy(), "u1")
        index["cast"][f + "_sat"] = write(out, f"cast.{f}.sat.u8",
                                          to_fp8_saturated(x, dt).view(torch.uint8).numpy(), "u1")

    amax = amax_inputs(rng)
    index["scale"] = {"n": int(amax.size), "amax": write(out, "scale.amax.f32", amax, "<f4"),
                      "eps": 1e-12}
    for f, dt in FMTS.items():
        for p in (False, True):
            s = amax_to_scale(torch.from_numpy(amax), dt, round_scales_to_power_of_2=p)
            key = f + (".pow2" if p else "")
            index["scale"][key] = write(out, f"scale.{key}.f32", s.numpy(), "<f4")

    p2 = pow2_inputs()
    index["pow2"] = {"n": int(p2.size), "in": write(out, "pow2.in.f32", p2, "<f4"),
                     "out": write(out, "pow2.out.f32",
                                  _round_scale_down_to_power_of_2(torch.from_numpy(p2)).numpy(),
                                  "<f4")}

    index["recipes"] = {r: recipe_json(r) for r in RECIPES}
    index["filter"] = {"linears": [[f, n, k] for f, n, k in FILTER_LINEARS],
                       "configs": filter_cases()}
    index["linear"] = {
        "small": linear_case(out, "small", 16, 32, 48, rng),
        "batched": linear_case(out, "batched", 12, 64, 32, rng, batch=3),
        "mid": linear_case(out, "mid", 64, 128, 96, rng),
    }
    with open(os.path.join(out, "index.json"), "w") as fp:
        json.dump(index, fp, indent=1, sort_keys=True)
        fp.write("\n")


if __name__ == "__main__":
    main()
