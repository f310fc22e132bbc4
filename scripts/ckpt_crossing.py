#!/usr/bin/env python3
# The torchtitan side of tests/ckpt/crossing.sh: checkpoints crossing between
# titan-train and torchtitan 0.2.2 in both directions, on the debugmodel
# flavor (vocab_size 2048, as torchtitan sizes it), with torchtitan's own
# model, AdamW and lr scheduler containers and its CheckpointManager.
#
#   titan-to-torchtitan DUMP TOKENS.tts SEED.safetensors LOSS4 STEP4.safetensors
#       DUMP/checkpoint holds titan's seed checkpoint step-0 and its full
#       checkpoint step-3.  torchtitan loads step-0 (its weights must equal
#       SEED, titan's own export, bit for bit) and step-3 (model, optimizer,
#       lr scheduler, train_state), trains step 4 on the windows titan's
#       step 4 read, and checks the loss against titan's (LOSS4) and the
#       weights against titan's step 4 (STEP4).
#   torchtitan-to-titan DUMP TOKENS.tts OUT_LOSS3 OUT_STEP3.safetensors
#       torchtitan initialises debugmodel (seed 0), trains steps 1 and 2 on
#       the first windows of TOKENS, saves DUMP/checkpoint/step-2 as its
#       trainer does (with a pickled data loader state titan cannot read),
#       then trains step 3 and writes its loss and weights for titan to match.
#   hf-load HFDIR MODEL.safetensors
#       torchtitan starts from titan's last save in HF safetensors
#       (checkpoint.initial_load_in_hf): its weights must equal MODEL, titan's
#       same model under torchtitan's names, bit for bit.
#   hf-save DUMP TOKENS OUT_LOSS1 OUT_MODEL.safetensors
#       torchtitan initialises debugmodel (seed 0) and saves it as its last
#       save in HF safetensors (checkpoint.last_save_in_hf) in
#       DUMP/checkpoint/step-1; writes the loss of step 1 from it and its
#       weights under torchtitan's names.
#
# TOKENS is the train split as a titan token stream (titan-shard cat --split
# train): windows of seq_len + 1 tokens without overlap, in order, are the
# batches of both trainers.  The settings below are the test's TOML's.
# Run: $PYTHON scripts/ckpt_crossing.py COMMAND ...  (torch, safetensors,
# torchtitan 0.2.2)
import os
import pickle
import struct
import sys

import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file

from torchtitan.components.checkpoint import CheckpointManager
from torchtitan.components.lr_scheduler import build_lr_schedulers
from torchtitan.components.optimizer import build_optimizers
from torchtitan.config import JobConfig
from torchtitan.distributed.parallel_dims import ParallelDims
from torchtitan.models.llama3 import Llama3StateDictAdapter, Transformer, llama3_args

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchtitan_train_state import TrainState  # noqa: E402

SEQ_LEN, BATCH = 16, 2


def job_config():
    jc = JobConfig()
    jc.optimizer.lr = 1e-3
    jc.lr_scheduler.warmup_steps = 2
    jc.lr_scheduler.total_steps = 10
    jc.training.steps = 10
    jc.training.max_norm = 1.0
    jc.training.mixed_precision_param = "float32"  # no autocast: float32 on both sides
    jc.checkpoint.enable = True
    jc.checkpoint.folder = "checkpoint"
    jc.checkpoint.interval = 1
    jc.checkpoint.keep_latest_k = 0
    jc.checkpoint.last_save_model_only = False
    return jc


def windows(path):
    """The token stream's ids, cut into windows of SEQ_LEN + 1."""
    with open(path, "rb") as f:
        b = f.read()
    if b[:4] != b"TTOK":
        sys.exit(f"{path}: not a titan token stream")
    hlen, width = struct.unpack_from("<II", b, 8)
    fmt = {2: "H", 4: "I"}[width]
    ids, p = [], hlen
    while True:
        (n,) = struct.unpack_from("<I", b, p)
        p += 4
        if n == 0xFFFFFFFF:
            break
        ids.extend(struct.unpack_from(f"<{n}{fmt}", b, p))
        p += n * width
    w = SEQ_LEN + 1
    return [torch.tensor(ids[i:i + w]) for i in range(0, len(ids) - w + 1, w)]


class Loader:
    """What torchtitan's ParallelAwareDataloader saves: a pickle of its state."""

    def __init__(self):
        self.sd = {"dp_rank_0": pickle.dumps({"sample_idx": 0, "token_buffer": []}),
                   "world_size": 1}

    def state_dict(self):
        return self.sd

    def load_state_dict(self, sd):
        self.sd = sd


def trainer(dump, jc=None, hf=False):
    torch.manual_seed(0)
    model = Transformer(llama3_args["debugmodel"])
    with torch.no_grad():
        model.init_weights()
    model.train()
    jc = jc or job_config()
    pd = ParallelDims(dp_replicate=1, dp_shard=1, cp=1, tp=1, pp=1, ep=1, etp=1, world_size=1)
    opt = build_optimizers([model], jc.optimizer, pd)
    sched = build_lr_schedulers(opt, jc.lr_scheduler, jc.training.steps)
    ts, loader = TrainState(), Loader()
    ckpt = CheckpointManager(dataloader=loader, model_parts=[model], optimizers=opt,
                             lr_schedulers=sched, states={"train_state": ts},
                             checkpoint_config=jc.checkpoint,
                             sd_adapter=Llama3StateDictAdapter(llama3_args["debugmodel"], None)
                             if hf else None, base_folder=dump)
    return model, opt, sched, ts, ckpt


def train_step(model, opt, sched, ts, wins, step):
    """torchtitan's step `step` (1-based): its BATCH windows, loss, clip, AdamW, schedule."""
    batch = torch.stack(wins[(step - 1) * BATCH: step * BATCH])
    logits = model(batch[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                             batch[:, 1:].reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters()], 1.0, foreach=True)
    opt.step()
    sched.step()
    opt.zero_grad()
    ts.step = step
    ts.ntokens_seen += BATCH * SEQ_LEN
    return loss.item()


def check_weights(model, path, what, tol):
    want = load_file(path)
    got = model.state_dict()
    if set(want) != set(got):
        sys.exit(f"{what}: keys differ: {sorted(set(want) ^ set(got))[:4]}")
    worst, where = max(((got[k].float() - want[k].float()).abs().max().item(), k) for k in want)
    if worst > tol:
        sys.exit(f"{what}: weights differ by up to {worst:.3g} in {where} (allowed {tol:.3g})")
    print(f"{what}: {len(want)} tensors, largest difference {worst:.3g} ({where})")


def titan_to_torchtitan(dump, tokens, seed, loss4, step4):
    wins = windows(tokens)
    model, opt, sched, ts, ckpt = trainer(dump)
    if not ckpt.load(step=0):
        sys.exit("torchtitan found no step-0 in titan's folder")
    check_weights(model, seed, "titan's seed checkpoint loaded by torchtitan", 0.0)
    if not ckpt.load(step=3):
        sys.exit("torchtitan found no step-3 in titan's folder")
    if ts.step != 3 or ts.ntokens_seen != 3 * BATCH * SEQ_LEN:
        sys.exit(f"train_state: step {ts.step}, ntokens_seen {ts.ntokens_seen}")
    last_epoch = sched.state_dict()["last_epoch"]
    if last_epoch != 3:
        sys.exit(f"lr_scheduler.last_epoch {last_epoch}, expected 3")
    st = opt.optimizers[0].state[model.tok_embeddings.weight]
    if int(st["step"]) != 3 or not torch.isfinite(st["exp_avg_sq"]).all():
        sys.exit(f"optimizer state: step {st['step']}")
    print(f"titan's step-3 loaded: train_state {ts.state_dict()}, lr {sched.schedulers[0].get_last_lr()}")
    got = train_step(model, opt, sched, ts, wins, 4)
    want = float(open(loss4).read())
    if abs(got - want) > 1e-4 * abs(want):
        sys.exit(f"step 4 after titan's step-3: torchtitan's loss {got:.7f}, titan's {want:.7f}")
    print(f"step 4: torchtitan's loss {got:.7f}, titan's {want:.7f}")
    check_weights(model, step4, "step 4 weights, torchtitan vs titan", 2e-6)
    ckpt.close()


def torchtitan_to_titan(dump, tokens, out_loss, out_weights):
    wins = windows(tokens)
    model, opt, sched, ts, ckpt = trainer(dump)
    losses = [train_step(model, opt, sched, ts, wins, s) for s in (1, 2)]
    ckpt.save(curr_step=2)
    losses.append(train_step(model, opt, sched, ts, wins, 3))
    ckpt.close()
    with open(out_loss, "w") as f:
        f.write(f"{losses[2]:.9g}\n")
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, out_weights)
    print(f"torchtitan losses {losses}; step-2 saved in {dump}/checkpoint")


def hf_load(hfdir, want):
    jc = job_config()
    jc.checkpoint.folder = "none-yet"  # no checkpoint folder: the initial load applies
    jc.checkpoint.initial_load_in_hf = True
    jc.checkpoint.initial_load_path = hfdir
    model, _, _, _, ckpt = trainer(os.path.dirname(os.path.abspath(hfdir)), jc, hf=True)
    if not ckpt.load():
        sys.exit("torchtitan loaded nothing")
    check_weights(model, want, "titan's HF last save loaded by torchtitan (initial_load_in_hf)", 0.0)
    ckpt.close()


def hf_save(dump, tokens, out_loss, out_weights):
    wins = windows(tokens)
    jc = job_config()
    jc.checkpoint.last_save_model_only = True
    jc.checkpoint.last_save_in_hf = True
    model, _, _, _, ckpt = trainer(dump, jc, hf=True)
    ckpt.save(curr_step=1, last_step=True)
    ckpt.close()
    batch = torch.stack(wins[0:BATCH])
    with torch.no_grad():
        logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                                 batch[:, 1:].reshape(-1))
    with open(out_loss, "w") as f:
        f.write(f"{loss.item():.9g}\n")
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, out_weights)
    print(f"torchtitan saved its model as HF in {dump}/checkpoint/step-1: "
          f"{sorted(os.listdir(os.path.join(dump, 'checkpoint', 'step-1')))}")


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29600 + os.getpid() % 1000))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        cmd, args = sys.argv[1], sys.argv[2:]
        if cmd == "titan-to-torchtitan" and len(args) == 5:
            titan_to_torchtitan(*args)
        elif cmd == "torchtitan-to-titan" and len(args) == 4:
            torchtitan_to_titan(*args)
        elif cmd == "hf-load" and len(args) == 2:
            hf_load(*args)
        elif cmd == "hf-save" and len(args) == 4:
            hf_save(*args)
        else:
            sys.exit("usage: ckpt_crossing.py titan-to-torchtitan DUMP TOKENS SEED LOSS4 STEP4 |"
                     " torchtitan-to-titan DUMP TOKENS OUT_LOSS3 OUT_STEP3 |"
                     " hf-load HFDIR MODEL | hf-save DUMP TOKENS OUT_LOSS1 OUT_MODEL")
    finally:
        dist.destroy_process_group()


main()
