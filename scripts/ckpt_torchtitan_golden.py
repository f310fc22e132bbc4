#!/usr/bin/env python3
# Writes tests/ckpt/golden/torchtitan/: a DCP checkpoint saved by torchtitan's
# own CheckpointManager after two real training steps of torchtitan's own
# Llama 3 model, optimizer and lr scheduler containers (CPU, one process),
# plus model.safetensors (every model tensor, saved independently),
# expect.pt (one parameter's AdamW state and the lr scheduler's state, from
# the live objects) and expect.json (the same in words, and the losses).
# Run: $PYTHON scripts/ckpt_torchtitan_golden.py [outdir]
# Needs torch and torchtitan 0.2.2 (pip install torchtitan==0.2.2).
import json
import os
import shutil
import sys
import tempfile

import torch
import torch.distributed as dist
from safetensors.torch import save_file

import torchtitan
from torchtitan.components.checkpoint import CheckpointManager
from torchtitan.components.lr_scheduler import build_lr_schedulers
from torchtitan.components.optimizer import build_optimizers
from torchtitan.config import JobConfig
from torchtitan.distributed.parallel_dims import ParallelDims
from torchtitan.models.llama3 import Transformer, TransformerModelArgs

out = sys.argv[1] if len(sys.argv) > 1 else "tests/ckpt/golden/torchtitan"

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29517")
dist.init_process_group("gloo", rank=0, world_size=1)

torch.manual_seed(0)
args = TransformerModelArgs(dim=32, n_layers=2, n_heads=4, n_kv_heads=2,
                            vocab_size=256, multiple_of=32, max_seq_len=32)
model = Transformer(args)
with torch.no_grad():  # as torchtitan's trainer does
    model.init_weights()
model.train()

jc = JobConfig()
jc.optimizer.name = "AdamW"
jc.optimizer.lr = 1e-3
jc.lr_scheduler.warmup_steps = 2
jc.training.steps = 10
jc.checkpoint.enable = True
jc.checkpoint.interval = 1
jc.checkpoint.async_mode = "disabled"
pd = ParallelDims(dp_replicate=1, dp_shard=1, cp=1, tp=1, pp=1, ep=1, etp=1,
                  world_size=1)
optimizers = build_optimizers([model], jc.optimizer, pd)
lr_schedulers = build_lr_schedulers(optimizers, jc.lr_scheduler, jc.training.steps)

work = tempfile.mkdtemp()
jc.checkpoint.folder = "ckpt"
ckpt = CheckpointManager(dataloader=None, model_parts=[model], optimizers=optimizers,
                         lr_schedulers=lr_schedulers, states={},
                         checkpoint_config=jc.checkpoint, sd_adapter=None,
                         base_folder=work)

g = torch.Generator().manual_seed(1)
losses = []
for step in (1, 2):
    tok = torch.randint(0, 256, (2, 17), generator=g)
    logits = model(tok[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, args.vocab_size), tok[:, 1:].reshape(-1))
    loss.backward()
    optimizers.step()
    lr_schedulers.step()
    optimizers.zero_grad()
    losses.append(loss.item())
ckpt.save(curr_step=2)
ckpt.close()

src = os.path.join(work, "ckpt", "step-2")
if os.path.isdir(out):
    shutil.rmtree(out)
os.makedirs(out)
shutil.copytree(src, os.path.join(out, "step-2"))
shutil.rmtree(work)

sd = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
save_file(sd, os.path.join(out, "model.safetensors"))
osd = optimizers.state_dict()
name = "layers.0.attention.wq.weight"
ea = osd[f"state.{name}.exp_avg"] if f"state.{name}.exp_avg" in osd else None
if ea is None:  # flattened key layout of get_optimizer_state_dict
    ea = optimizers.optimizers[0].state[model.layers["0"].attention.wq.weight]["exp_avg"]
lsd = lr_schedulers.state_dict()
exp = {
    "torch": torch.__version__,
    "torchtitan": getattr(torchtitan, "__version__", "0.2.2"),
    "losses": losses,
    "param": name,
    "exp_avg_first4": [float(x) for x in ea.reshape(-1)[:4]],
    "exp_avg_sum": float(ea.double().sum()),
    "lr_scheduler": {k: (v if isinstance(v, (int, float, str)) else str(v))
                     for k, v in lsd.items()},
    "optimizer_keys": sorted(osd.keys())[:8],
}
# The same values as torch objects, taken from the live optimizer and
# scheduler rather than from the checkpoint, nested as DCP flattens them
# ("optimizer.state.<param>.exp_avg", "lr_scheduler.last_epoch"), so that
# titan-ckpt-convert diff expect.pt step-2 compares them key by key.
st = optimizers.optimizers[0].state[model.layers["0"].attention.wq.weight]
torch.save({
    "optimizer": {"state": {name: {k: v.detach().clone() for k, v in st.items()}}},
    "lr_scheduler": {k: v for k, v in lsd.items() if k != "lr_lambdas"},
}, os.path.join(out, "expect.pt"))
with open(os.path.join(out, "expect.json"), "w") as f:
    json.dump(exp, f, indent=1, sort_keys=True)
dist.destroy_process_group()
print("wrote", out, "losses", losses)
