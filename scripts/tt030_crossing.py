#!/usr/bin/env python3
"""The torchtitan 0.3.0 side of tests/ckpt/crossing.sh: checkpoints crossing
between titan-train's 0.3.0 runs (--module F --config F_debugmodel) and
torchtitan 0.3.0 in both directions, with 0.3.0's own model, ChunkedLossWrapper,
optimizer and lr scheduler containers, data loader (HuggingFaceTextDataset
packing the documents of a titan token stream, as scripts/tt030_golden.py
feeds it; FlexAttention replaced by the same mask, dense) and its
CheckpointManager (DCP).  float32, local_batch_size 2, seq_len 64.

  titan-to-tt030 PRESET DUMP TOKENS.tts STEP STEPS
      DUMP/checkpoint/step-STEP is titan's full checkpoint (model, optimizer,
      lr_scheduler, train_state, dataloader).  0.3.0's CheckpointManager loads
      all of it, its data loader from titan's dataloader.dp_rank_0 pickle;
      every batch its loader then gives must be the one a fresh loader of 0.3.0
      gives after STEP batches (else it exits saying which); it trains steps
      STEP + 1 .. STEPS and prints "loss <step> <value>" for each: the first
      checks the model and the data position, the later ones the optimizer's
      state and the lr schedule.
  tt030-to-titan PRESET DUMP TOKENS.tts STEP STEPS
      0.3.0 starts from titan's seed checkpoint DUMP/checkpoint/step-0 (model
      only), trains STEPS steps, its CheckpointManager saving
      DUMP/checkpoint/step-STEP (everything, its own data loader state
      included); prints "loss <step> <value>" for every step.

  loader-golden OUT_DIR TOKENS.tts
      0.3.0's data loader over the documents at seq_len 64, local_batch_size
      2, after 3 and after 10 batches: OUT_DIR/step-<n>.pkl is what its
      ParallelAwareDataloader saves as dataloader.dp_rank_0 (the pickle), and
      OUT_DIR/step-<n>.next.tsv its next 2 batches, a line a row: "batch row",
      then the inputs, labels and positions, tab-separated, ids space-separated.

  manifest PRESET OUT.tsv
      What 0.3.0's CheckpointManager writes for PRESET (a full checkpoint): every key of layers 0 and 1 and every key outside the
      layers, with its kind, dtype and shape, sorted (tab-separated: key,
      "tensor" or "bytes", dtype, comma-separated shape).

  fused OUT_DIR
      A small checkpoint of 0.3.0's own (tests/ckpt/golden/tt030/fused):
      llama3_debugmodel's trainer with a model of dim 32, 1 layer, 4 query
      heads on 2 kv heads (head dim 8), vocab 64, its q/k/v fused as the
      presets fuse them, after 2 steps; OUT_DIR/step-2 as its
      CheckpointManager saved it (the fused optimizer state), and
      OUT_DIR/split.pt (torch.save) the optimizer's exp_avg and exp_avg_sq of wq,
      wk and wv under 0.2.2's names, split from the live fused state by
      0.3.0's own hook (_split_qkv_on_save), and every model tensor.

  --opt VARIANT before the command: the optimizer of scripts/tt030_golden.py's
  runs of that name instead of the preset's: muon=GROUPS.toml (DistMuon and
  AdamW groups, the model fully_shard-ed over one rank), bf16_states
  (fused_opt_states_bf16, its fused kernel transcribed) or groups_of=PRESET
  (that preset's param groups).

Run: PYTHONPATH=<torchtitan 0.3.0> $PYTHON scripts/tt030_crossing.py [--opt VARIANT] ...
     (torch, numpy, torchtitan 0.3.0; TOKENS as tests/ckpt/crossing.sh makes
     it: test_gen gen 11 400 2048 60, then titan-shard --val-fraction 0)
"""
import os
import sys

import torch
import torch.distributed as dist
from datasets import Dataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tt030_golden as g  # noqa: E402
from torchtitan_train_state import TrainState  # noqa: E402

from torchtitan.components.dataloader import ParallelAwareDataloader  # noqa: E402
from torchtitan.components.loss import IGNORE_INDEX  # noqa: E402
from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataset  # noqa: E402
from torchtitan.models.common import attention as tt_attention  # noqa: E402
from torchtitan.models.common import decoder as tt_decoder  # noqa: E402

STEPS_TOTAL = 6  # training.steps, the lr schedule's length, on both sides
OPT = ""  # --opt VARIANT


def loader(docs):
    """0.3.0's data loader over the documents: HuggingFaceTextDataset packing
    them, in ParallelAwareDataloader (a StatefulDataLoader) as its
    HuggingFaceTextDataLoader builds it."""
    ds = HuggingFaceTextDataset.__new__(HuggingFaceTextDataset)
    ds.dataset_name, ds.seq_len, ds.infinite = "titan", g.SEQ, False
    # a map-style datasets.Dataset, as load_dataset gives: its state is sample_idx
    ds._original_data = ds._data = Dataset.from_list([{"i": i} for i in range(len(docs))])
    ds._tokenizer, ds._text_processor = g.Docs(docs), lambda s: str(s["i"])
    ds._sample_idx, ds._epoch = 0, 0
    ds._inputs_buffer, ds._labels_buffer, ds._positions_buffer = [], [], []
    return ParallelAwareDataloader(ds, dp_rank=0, dp_world_size=1, batch_size=g.BATCH)


def config(preset):
    """PRESET's Trainer.Config at the crossing's settings."""
    tt_decoder.Decoder.get_attention_masks = g.dense_document_mask
    tt_attention.FlexAttention.forward = g.sdpa_under_mask
    family = next(f for f in ("deepseek_v3", "gpt_oss", "llama3", "qwen3") if preset.startswith(f))
    reg = __import__(f"torchtitan.models.{family}.config_registry", fromlist=[preset])
    cfg = getattr(reg, preset)()
    cfg.training.local_batch_size, cfg.training.seq_len = g.BATCH, g.SEQ
    cfg.training.steps = STEPS_TOTAL
    cfg.training.mixed_precision_param = "float32"
    return cfg


def trainer(cfg, dump, docs, interval=1000, exclude=(), folder="checkpoint"):
    """0.3.0's Trainer's parts for cfg: its model (initialised), loss,
    optimizer and lr scheduler containers, data loader and CheckpointManager."""
    torch.manual_seed(0)
    model = cfg.model_spec.model.build()
    with torch.no_grad():
        model.init_states()
    kind, _, arg = OPT.partition("=")
    if kind == "muon":
        g.muon_optimizer(cfg, model, arg)
    elif kind == "bf16_states":
        g.use_bf16_states(cfg)
    elif kind == "groups_of":
        g.use_groups_of(cfg, arg)
    elif kind:
        sys.exit(f"--opt {OPT}: expected muon=GROUPS.toml, bf16_states or groups_of=PRESET")
    loss_fn, opt, sched = g.train_parts(cfg, model, STEPS_TOTAL)
    ts, dl = TrainState(), loader(docs)
    cfg.checkpoint.enable = True
    cfg.checkpoint.interval = interval
    cfg.checkpoint.keep_latest_k = 0
    cfg.checkpoint.folder = folder
    cfg.checkpoint.exclude_from_loading = list(exclude)
    ckpt = cfg.checkpoint.build(dataloader=dl, model_parts=[model], optimizers=opt,
                                lr_schedulers=sched, states={"train_state": ts},
                                sd_adapter=None, base_folder=dump)
    return cfg, model, loss_fn, opt, sched, ts, dl, ckpt


def train_step(cfg, model, loss_fn, opt, sched, ts, batches):
    """0.3.0's Trainer.train_step on one rank, float32."""
    opt.zero_grad()
    (inp, labels) = next(batches)
    inputs, positions = inp["input"], inp["positions"]
    valid = (labels != IGNORE_INDEX).sum()
    pred = model(inputs, positions=positions,
                 attention_masks=model.get_attention_masks(positions=positions))
    loss, _ = loss_fn(pred, labels, valid, positions=positions)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.training.max_norm, foreach=True)
    opt.step()
    sched.step()
    ts.step += 1
    ts.ntokens_seen += labels.numel()
    return loss.item()


def titan_to_tt030(preset, dump, tokens, step, steps):
    step, steps = int(step), int(steps)
    docs = g.read_docs(tokens)
    cfg, model, loss_fn, opt, sched, ts, dl, ckpt = trainer(config(preset), dump, docs)
    if not ckpt.load(step=step):
        sys.exit(f"0.3.0 found no step-{step} in {dump}/checkpoint")
    if ts.step != step or ts.ntokens_seen != step * g.BATCH * g.SEQ:
        sys.exit(f"train_state after loading titan's step-{step}: {ts.state_dict()}")
    if sched.schedulers[0].last_epoch != step:
        sys.exit(f"lr_scheduler.last_epoch {sched.schedulers[0].last_epoch}, expected {step}")
    st = next(o.state[model.tok_embeddings.weight] for o in opt.optimizers
              if model.tok_embeddings.weight in o.state)
    if int(st["step"]) != step:
        sys.exit(f"optimizer state step {st['step']}, expected {step}")
    own = iter(loader(docs))  # 0.3.0's data where its own run is after `step` steps
    for _ in range(step):
        next(own)
    batches = checked(iter(dl), own, step)
    for s in range(step + 1, steps + 1):
        loss = train_step(cfg, model, loss_fn, opt, sched, ts, batches)
        print(f"loss {s} {loss!r}")
    ckpt.close()


def checked(batches, own, step):
    """batches, each checked against own's (0.3.0's own run's) batch."""
    for s, (got, want) in enumerate(zip(batches, own), start=step + 1):
        for k in ("input", "positions"):
            if not torch.equal(got[0][k], want[0][k]):
                sys.exit(f"step {s}: the {k} 0.3.0's loader gives after loading titan's "
                         f"dataloader.dp_rank_0 are not its own run's")
        if not torch.equal(got[1], want[1]):
            sys.exit(f"step {s}: the labels after loading titan's loader state differ")
        print(f"batch {s} same")
        yield got


def tt030_to_titan(preset, dump, tokens, step, steps):
    step, steps = int(step), int(steps)
    docs = g.read_docs(tokens)
    cfg, model, loss_fn, opt, sched, ts, dl, ckpt = trainer(config(preset), dump, docs,
                                                            interval=step)
    g.load_seed_checkpoint(model, os.path.join(dump, "checkpoint", "step-0"))
    batches = iter(dl)
    for s in range(1, steps + 1):
        loss = train_step(cfg, model, loss_fn, opt, sched, ts, batches)
        print(f"loss {s} {loss!r}")
        ckpt.save(curr_step=s)
    ckpt.close()


def loader_golden(out_dir, tokens):
    docs = g.read_docs(tokens)
    os.makedirs(out_dir, exist_ok=True)
    for step in (3, 10):
        dl = loader(docs)
        batches = iter(dl)
        for _ in range(step):
            next(batches)
        with open(os.path.join(out_dir, f"step-{step}.pkl"), "wb") as f:
            f.write(dl.state_dict()["dp_rank_0"])
        with open(os.path.join(out_dir, f"step-{step}.next.tsv"), "w") as f:
            for k in range(2):
                inp, labels = next(batches)
                for j in range(labels.shape[0]):
                    cols = (inp["input"][j], labels[j], inp["positions"][j])
                    f.write(f"{k} {j}\t" + "\t".join(" ".join(str(int(x)) for x in c)
                                                       for c in cols) + "\n")
    print(f"wrote {out_dir}: {sorted(os.listdir(out_dir))}")


def manifest(preset, out):
    import re
    import tempfile
    from torch.distributed.checkpoint import FileSystemReader
    with tempfile.TemporaryDirectory() as dump:
        docs = [[1, 5, 9, 2] * 40 for _ in range(8)]  # any: the save materialises the state
        ckpt = trainer(config(preset), dump, docs, interval=1)[-1]
        ckpt.save(curr_step=1)
        ckpt.close()
        md = FileSystemReader(os.path.join(dump, "checkpoint", "step-1")).read_metadata()
    rows = []
    for k, v in md.state_dict_metadata.items():
        m = re.search(r"(^|\.)layers\.(\d+)\.", k)
        if m and int(m.group(2)) > 1:
            continue
        if hasattr(v, "size"):
            dt = str(v.properties.dtype).replace("torch.", "")
            rows.append(f"{k}\ttensor\t{dt}\t{','.join(str(d) for d in v.size)}")
        else:
            rows.append(f"{k}\tbytes\t-\t-")
    with open(out, "w") as f:
        f.write("".join(r + "\n" for r in sorted(rows)))
    print(f"wrote {out}: {len(rows)} keys")


def small_llama3():
    """A Llama3Model.Config of llama3's own builders, small and with GQA."""
    import torchtitan.models.llama3 as L
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    dim, heads, kv_heads, vocab = 32, 4, 2, 64
    return L.Llama3Model.Config(
        dim=dim, vocab_size=vocab,
        tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=dim,
                                        param_init=L._EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=dim, param_init=L._NORM_INIT),
        lm_head=Linear.Config(in_features=dim, out_features=vocab,
                              param_init=L._output_linear_init(dim)),
        layers=L._build_llama3_layers(
            fuse_qkv=True, n_layers=1, dim=dim, n_heads=heads, n_kv_heads=kv_heads,
            hidden_dim=64,
            rope=ComplexRoPE.Config(dim=dim // heads, max_seq_len=256, theta=500000,
                                    scaling="llama"),
            attn_backend="flex"))


def fused(out_dir):
    docs = [[(7 * i + 3 * j) % 64 for j in range(40)] for i in range(12)]
    cfg = config("llama3_debugmodel")
    cfg.model_spec.model = small_llama3()
    cfg.loss.loss_fn.global_vocab_size = 64
    cfg, model, loss_fn, opt, sched, ts, dl, ckpt = trainer(cfg, out_dir, docs, interval=2,
                                                            folder=".")
    batches = iter(dl)
    for s in (1, 2):
        print(f"loss {s} {train_step(cfg, model, loss_fn, opt, sched, ts, batches)!r}")
    ckpt.save(curr_step=2)
    ckpt.close()
    attn = model.layers["0"].attention.qkv_linear
    st = opt.optimizers[0].state[attn.wqkv.weight]
    want = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    for name in ("exp_avg", "exp_avg_sq"):
        sd = {"p.wqkv.weight": st[name].detach().clone()}
        type(attn)._split_qkv_on_save(attn, sd, "p.", None)  # 0.3.0's own split
        for w in ("wq", "wk", "wv"):
            want[f"optimizer.state.layers.0.attention.{w}.weight.{name}"] = sd[f"p.{w}.weight"].contiguous()
    torch.save(want, os.path.join(out_dir, "split.pt"))
    print(f"wrote {out_dir}: {sorted(os.listdir(out_dir))}")


COMMANDS = {"titan-to-tt030": (titan_to_tt030, "PRESET DUMP TOKENS STEP STEPS"),
            "tt030-to-titan": (tt030_to_titan, "PRESET DUMP TOKENS STEP STEPS"),
            "loader-golden": (loader_golden, "OUT_DIR TOKENS"),
            "manifest": (manifest, "PRESET OUT"),
            "fused": (fused, "OUT_DIR")}


def main():
    global OPT
    if len(sys.argv) > 2 and sys.argv[1] == "--opt":
        OPT = sys.argv[2]
        del sys.argv[1:3]
    run, usage = COMMANDS.get(sys.argv[1] if len(sys.argv) > 1 else "", (None, ""))
    if run is None or len(sys.argv) - 2 != len(usage.split()):
        sys.exit("usage: tt030_crossing.py " +
                 " | ".join(f"{c} {u}" for c, (_, u) in COMMANDS.items()))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29700 + os.getpid() % 1000))
    dist.init_process_group("gloo", rank=0, world_size=1)  # CheckpointManager's DCP
    try:
        run(*sys.argv[2:])
    finally:
        dist.destroy_process_group()


main()
