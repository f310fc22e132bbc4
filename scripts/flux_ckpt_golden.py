#!/usr/bin/env python3
"""The torchtitan 0.3.0 side of lib/fluxckpt's tests (tests/flux/test_flux_ckpt.c,
tests/flux/ckpt_crossing.sh): 0.3.0's FluxModel on a small config (hidden 64,
4 heads of 16, MLP ratio 2.6 so that int(64 * 2.6) = 166 truncates, 2 double
and 2 single blocks, 16 input channels, 8 output channels, CLIP width 24, T5
width 32), built by 0.3.0's own _flux_debug with those numbers put in.

The weights are drawn, not committed: tensor t of the state dict (0-based, in
its order), element j is test_counter_draw(SEED, t, j) (tests/support/
testutil.h; scripts/flux_model_golden.py's generator); AdamW's exp_avg of
tensor t is test_counter_draw(SEED, 1000 + t, j), its exp_avg_sq the absolute
value of test_counter_draw(SEED, 2000 + t, j), its step STEP.

  golden
      tests/flux/golden/ckpt_hf.tsv: 0.3.0's FluxStateDictAdapter.to_hf of the
      drawn weights, a line per diffusers tensor in to_hf's order: name, shape
      (comma-separated), SHA-256 of its float32 little-endian bytes.  Checks
      that from_hf gives the weights back.
  load-titan DIR
      DIR is titan's full checkpoint of the drawn state (test_flux_ckpt save):
      torch.distributed.checkpoint loads it into 0.3.0's FluxModel state dict,
      its AdamW (flattened as 0.3.0's OptimizersContainer does:
      get_flat_optim_state_dict / load_flat_optim_state_dict), its lr
      scheduler, train_state and data loader items, as CheckpointManager lays
      them out; every value must be the drawn one.  Prints "ok ...".
  write DIR
      The drawn state saved by torch.distributed.checkpoint as 0.3.0's
      CheckpointManager lays it out (the model flattened to the top level),
      for titan to load (test_flux_ckpt check DIR).

Run: PYTHONPATH=<torchtitan 0.3.0> $PYTHON scripts/flux_ckpt_golden.py CMD ...
"""
import hashlib
import inspect
import os
import sys

import numpy as np
import torch
import torch.distributed.checkpoint as dcp

import torchtitan.models.flux as tt_flux
from torchtitan.components.optimizer.utils import (
    get_flat_optim_state_dict,
    init_optim_state,
    load_flat_optim_state_dict,
)
from torchtitan.models.flux.model.state_dict_adapter import FluxStateDictAdapter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flux_model_golden import splitmix  # noqa: E402  (the goldens' counter-based generator)

SEED = 20261206
STEP = 3
NTOKENS = 4096
LR, LR_NOW = 1e-4, 5e-5
LOADER = b"titan flux loader state"
# _flux_debug's numbers -> the small config's (the source's own lines)
SMALL = [
    ("hidden_size = 1536", "hidden_size = 64"),
    ("num_heads = 12", "num_heads = 4"),
    ("mlp_ratio = 4.0", "mlp_ratio = 2.6"),
    ("vec_in_dim = 768", "vec_in_dim = 24"),
    ("in_channels = 64", "in_channels = 16"),
    ("context_in_dim = 4096", "context_in_dim = 32"),
    ("out_channels=64", "out_channels=8"),
    ("out_features=1 * 1 * 64", "out_features=1 * 1 * 8"),
    ("axes_dim=(16, 56, 56)", "axes_dim=(4, 6, 6)"),
    ("dim=128", "dim=16"),
    ("def _flux_debug(", "def _flux_small("),
]
GOLDEN = "tests/flux/golden/ckpt_hf.tsv"


def small_config():
    src = inspect.getsource(tt_flux._flux_debug)
    for a, b in SMALL:
        assert a in src, a
        src = src.replace(a, b)
    env = dict(vars(tt_flux))
    exec(src, env)
    return env["_flux_small"]()


def draw(t, shape):
    n = int(np.prod(shape)) if len(shape) else 1
    u = (splitmix(SEED, t, n) >> np.uint64(40)).astype(np.int64) - (1 << 23)
    return torch.from_numpy(u.astype(np.float32) / np.float32(1 << 23)).reshape(shape)


def drawn_model():
    cfg = small_config()
    model = cfg.build()
    sd = {k: draw(t, tuple(v.shape)) for t, (k, v) in enumerate(model.state_dict().items())}
    model.load_state_dict(sd)
    return cfg, model, sd


def adamw(model):
    # torch's defaults for foreach and fused (None), as titan's checkpoint states them
    return torch.optim.AdamW(list(model.named_parameters()), lr=LR, betas=(0.9, 0.95), eps=1e-8,
                             weight_decay=0.1)


def drawn_optimizer(model):
    opt = adamw(model)
    init_optim_state(opt)
    for t, (name, p) in enumerate(model.named_parameters()):
        st = opt.state[p]
        st["exp_avg"].copy_(draw(1000 + t, tuple(p.shape)))
        st["exp_avg_sq"].copy_(draw(2000 + t, tuple(p.shape)).abs())
        st["step"].fill_(STEP)
    for g in opt.param_groups:
        g["lr"], g["initial_lr"] = LR_NOW, LR
    return opt


def golden():
    cfg, model, sd = drawn_model()
    ad = FluxStateDictAdapter(cfg, None)
    hf = ad.to_hf(sd)
    back = ad.from_hf(hf)
    assert list(back) == list(sd) or sorted(back) == sorted(sd)
    for k in sd:
        assert torch.equal(back[k], sd[k]), k
    with open(GOLDEN, "w") as fh:
        for k, v in hf.items():
            b = v.contiguous().float().numpy().astype("<f4").tobytes()
            fh.write(f"{k}\t{','.join(map(str, v.shape))}\t{hashlib.sha256(b).hexdigest()}\n")
    print(f"{len(sd)} tensors, {sum(v.numel() for v in sd.values())} values -> {len(hf)} "
          f"diffusers tensors ({GOLDEN})")


def manager_layout(model, opt, loader=None):
    """The state dict 0.3.0's CheckpointManager hands DCP."""
    sd = dict(model.state_dict())
    sd["optimizer"] = get_flat_optim_state_dict(opt)
    sd["lr_scheduler"] = {"last_epoch": 0}
    sd["train_state"] = {"step": 0, "ntokens_seen": 0}
    sd["dataloader"] = {"dp_rank_0": loader if loader is not None else b"", "world_size": 0}
    return sd


def load_titan(d):
    cfg, model, want = drawn_model()
    fresh = cfg.build()
    opt = adamw(fresh)
    init_optim_state(opt)
    for g in opt.param_groups:  # as 0.3.0's LambdaLR sets it
        g.setdefault("initial_lr", g["lr"])
    sd = manager_layout(fresh, opt)
    dcp.load(sd, checkpoint_id=d)
    fresh.load_state_dict({k: v for k, v in sd.items() if k in want})
    load_flat_optim_state_dict(opt, sd["optimizer"])
    for k, v in fresh.state_dict().items():
        assert torch.equal(v, want[k]), f"model {k}"
    for t, (name, p) in enumerate(fresh.named_parameters()):
        st = opt.state[p]
        assert torch.equal(st["exp_avg"], draw(1000 + t, tuple(p.shape))), f"exp_avg {name}"
        assert torch.equal(st["exp_avg_sq"], draw(2000 + t, tuple(p.shape)).abs()), name
        assert float(st["step"]) == STEP, f"step {name}"
    g = opt.param_groups[0]
    assert abs(g["lr"] - LR_NOW) < 1e-12 and abs(g["initial_lr"] - LR) < 1e-12, g
    assert g["betas"] == (0.9, 0.95) and g["weight_decay"] == 0.1 and g["eps"] == 1e-8, g
    assert sd["lr_scheduler"]["last_epoch"] == STEP, sd["lr_scheduler"]
    assert sd["train_state"] == {"step": STEP, "ntokens_seen": NTOKENS}, sd["train_state"]
    assert sd["dataloader"]["dp_rank_0"] == LOADER, sd["dataloader"]
    assert sd["dataloader"]["world_size"] == 1, sd["dataloader"]
    print(f"ok: 0.3.0's FluxModel, AdamW ({len(opt.state)} parameters' state, step {STEP}), "
          f"lr_scheduler, train_state and dataloader from titan's checkpoint")


def write(d):
    _, model, _ = drawn_model()
    opt = drawn_optimizer(model)
    sd = manager_layout(model, opt, LOADER)
    sd["lr_scheduler"] = {"last_epoch": STEP}
    sd["train_state"] = {"step": STEP, "ntokens_seen": NTOKENS}
    sd["dataloader"]["world_size"] = 1
    dcp.save(sd, checkpoint_id=d)
    print(f"ok: {len(sd)} top-level items written to {d}")


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "golden":
        golden()
    elif cmd == "load-titan" and len(sys.argv) == 3:
        load_titan(sys.argv[2])
    elif cmd == "write" and len(sys.argv) == 3:
        write(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
