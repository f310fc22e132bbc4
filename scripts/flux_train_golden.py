#!/usr/bin/env python3
"""Golden for titan-train --module flux (tests/fluxtrain/train.sh): torchtitan
0.3.0's own FluxTrainer running its flux_debugmodel preset for 10 steps on one
CPU process in float32, from titan's initial weights.

The run: flux_debugmodel with --training.mixed_precision_param float32 (0.3.0
applies fully_shard to Flux even on one rank, so its bf16 default would cast
the transformer), --debug.seed 7, the cc12m test shard
(../shared/fixtures/torchtitan_assets/cc12m_test) at --dataloader.img_size 64,
--tokenizer.test_mode with torchtitan's test tokenizer for both encoders,
--tokenizer.max_t5_encoding_len 16, and the deterministic encoders
`test_fluxtrain mkmodels` writes (tests/support/flux_models.h: T5 of
flux-debug's 4096 width and CLIP of its 768, one layer each, and the small
16-channel autoencoder whose config and weights.json this script writes to
tests/fluxtrain/golden/ae).  The transformer's weights are replaced before
the first step by titan's flux_model_init(seed 7) (core/init_fill's streams,
replicated below): 0.3.0's distributions, titan's draws.  Everything else is
0.3.0's: the loader's draws, preprocess_data, the posterior's sample, the
noise and timesteps, MSELoss, clip_grad_norm_, AdamW and the schedule.

Writes tests/fluxtrain/golden/flux_debugmodel.tsv: step, loss, grad_norm, lr.
--flavor flux-tiny trains titan's own small flavor instead (lib/flux/flux_model.c:
flux-debug with hidden 256 and 2 heads, 0.3.0's flux-debug builder at those
numbers) and names the file flux_tiny.tsv; tests/fluxtrain/train.sh holds the
preset's flux-debug to flux_debugmodel.tsv and every other run to flux-tiny's
files.  With --bf16, training.mixed_precision_param bfloat16 (the preset's:
FSDP's bf16 parameters for the transformer; the encoders stay float32 on one
rank): flux_tiny_bf16.tsv.  With --validate, flux_debugmodel's validator on
as well (every 5 steps, 2 batches of the same shard, one image sampled with
guidance 5.0 in 4 steps): flux_tiny_val.tsv, its validation losses as "val
STEP LOSS" lines, and the images it saves,
tests/fluxtrain/golden/val_tiny/image_rank0_{5,10}.png (val/ at flux-debug).
Under torchrun --nproc_per_node 2 (gloo on the CPU) the same run under FSDP 2
(each rank its own seed, 7 + rank, and every other sample) writes
flux_tiny_fsdp2.tsv.  --cp N sets parallelism.context_parallel_degree and
--replicate N data_parallel_replicate_degree (data_parallel_shard_degree
takes the rest of the ranks); the file is named by the mesh, e.g.
flux_tiny_cp2.tsv (2 ranks, --cp 2), flux_tiny_fsdp2_cp2.tsv (4 ranks, --cp
2), flux_tiny_hsdp2_fsdp2.tsv (4 ranks, --replicate 2), then _val and _bf16
as above.

Run from the repository root after `make build/tests/fluxtrain/test_fluxtrain`:
  PYTHONPATH=<torchtitan 0.3.0> python scripts/flux_train_golden.py [--flavor flux-tiny]
  PYTHONPATH=<torchtitan 0.3.0> torchrun --nproc_per_node 2 scripts/flux_train_golden.py \
      --flavor flux-tiny --cp 2 --validate
"""
import inspect
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fluxae_golden  # noqa: E402  (its counter generator and weight spread)

# 0.3.0 picks "cuda" when no accelerator is found; its trainer runs on the CPU
# once its device helpers say "cpu".
import torchtitan.tools.utils as tu  # noqa: E402

tu.device_type, tu.device_module = "cpu", torch.cpu
import torchtitan.distributed.utils as du  # noqa: E402

du.device_type, du.device_module = "cpu", torch.cpu
du.set_pg_timeouts = lambda *a, **k: None  # a barrier on a device index; one rank needs none
import torchtitan.components.metrics as tm  # noqa: E402


class CpuMemory:
    """DeviceMemoryMonitor's interface without a device (torch.cpu has no
    memory statistics): zeros, which only the log line shows."""
    device_name, device_capacity_gib = "cpu", 0.0

    def get_peak_stats(self):
        return tm.DeviceMemStats(0.0, 0.0, 0.0, 0.0, 0, 0)

    def reset_peak_stats(self):
        pass


tm.build_device_memory_monitor = CpuMemory

from torchtitan.models.flux.config_registry import flux_debugmodel  # noqa: E402
from torchtitan.models.flux.model.autoencoder import AutoEncoder  # noqa: E402

GOLD = "tests/fluxtrain/golden"
FIX = os.environ.get("TITAN_FIXTURES", "../shared/fixtures")
SEED, STEPS, IMG, T5LEN = 7, 10, 64, 16
VALIDATE = "--validate" in sys.argv
BF16 = "--bf16" in sys.argv


def degree(flag):
    """--cp N, --replicate N: a parallelism degree (1 without the flag)."""
    return int(sys.argv[sys.argv.index(flag) + 1]) if flag in sys.argv else 1


CP, REPLICATE = degree("--cp"), degree("--replicate")
FLAVOR = sys.argv[sys.argv.index("--flavor") + 1] if "--flavor" in sys.argv else "flux-debug"
NAME = {"flux-debug": "flux_debugmodel", "flux-tiny": "flux_tiny"}[FLAVOR]
AE = dict(resolution=IMG, in_channels=3, ch=32, out_ch=3, ch_mult=[1, 1, 1, 1],
          num_res_blocks=1, z_channels=16, scale_factor=0.3611, shift_factor=0.1159)
CHUNK = 65536
M64 = (1 << 64) - 1


def write_ae():
    os.makedirs(f"{GOLD}/ae", exist_ok=True)
    ae = AutoEncoder.Config(**{k: tuple(v) if k == "ch_mult" else v for k, v in AE.items()}).build()
    manifest = fluxae_golden.weights(ae)
    with open(f"{GOLD}/ae/config.json", "w") as f:
        json.dump(AE, f, indent=2)
        f.write("\n")
    with open(f"{GOLD}/ae/weights.json", "w") as f:
        f.write('{"seed": %d, "tensors": [\n' % fluxae_golden.SEED)
        f.write(",\n".join("  " + json.dumps(t) for t in manifest))
        f.write("\n]}\n")


def splitmix(s):
    """(state + gamma, output) for arrays of uint64 states."""
    with np.errstate(over="ignore"):
        s = s + np.uint64(0x9E3779B97F4A7C15)
        z = s
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return s, z ^ (z >> np.uint64(31))


def uniform01(z):
    return ((z >> np.uint64(11)).astype(np.float64) + 0.5) * (1.0 / 9007199254740992.0)


def init_fill(n, std, uniform, seed, tensor):
    """core/init_fill.c: chunked splitmix64 streams; uniform(-std, std) or
    normal(0, std) without a cut (two uniforms per value)."""
    out = np.empty(n, np.float32)
    for c in range((n + CHUNK - 1) // CHUNK):
        m = min(CHUNK, n - c * CHUNK)
        s0 = (seed ^ ((tensor * 0xD1B54A32D192ED03) & M64) ^ ((c * 0x8CB92BA72F3D8DD7) & M64)) & M64
        s, _ = splitmix(np.array([s0], np.uint64))  # the stream's first output is thrown away
        k = 1 if uniform else 2
        idx = np.arange(1, k * m + 1, dtype=np.uint64)
        with np.errstate(over="ignore"):
            st = s[0] + idx * np.uint64(0x9E3779B97F4A7C15) - np.uint64(0x9E3779B97F4A7C15)
        _, z = splitmix(st)
        u = uniform01(z)
        if uniform:
            x = std * (2 * u - 1)
        else:
            u1, u2 = u[0::2], u[1::2]
            x = std * np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
        out[c * CHUNK:c * CHUNK + m] = x.astype(np.float32)
    return out


def plain(name):
    """A parameter's name without activation checkpointing's wrapper."""
    return name.replace("._checkpoint_wrapped_module", "")


def titan_init(model, seed):
    """lib/flux/flux_init.c's kinds, by name, in the state dict's order."""
    sd = {}
    for i, (name, p) in enumerate(model.state_dict().items()):
        name = plain(name)
        n = p.numel()
        if name.endswith(".bias"):
            v = np.zeros(n, np.float32)
        elif name.endswith("_norm.weight"):
            v = np.ones(n, np.float32)
        elif "_mod.lin." in name or ".modulation.lin." in name or name.startswith("final_layer."):
            v = np.zeros(n, np.float32)
        elif name.startswith("time_in.") or name.startswith("vector_in."):
            v = init_fill(n, 0.02, False, seed, i)
        else:
            v = init_fill(n, math.sqrt(6.0 / (p.shape[0] + p.shape[1])), True, seed, i)
        sd[name] = torch.from_numpy(v).reshape(p.shape)
    return sd


def register_tiny():
    """flux-tiny: 0.3.0's _flux_debug builder with titan's flux-tiny numbers
    (hidden 256, 2 heads of 128; everything else flux-debug's)."""
    import torchtitan.models.flux as fm
    src = inspect.getsource(fm._flux_debug)
    for old, new in (("_flux_debug", "_flux_tiny"), ("hidden_size = 1536", "hidden_size = 256"),
                     ("num_heads = 12", "num_heads = 2")):
        assert old in src, old
        src = src.replace(old, new)
    exec(src, fm.__dict__)
    fm.flux_configs["flux-tiny"] = fm._flux_tiny
    return fm.model_registry("flux-tiny")


def config(models, dump):
    cfg = flux_debugmodel()
    if FLAVOR == "flux-tiny":
        cfg.model_spec = register_tiny()
    tok = os.path.join(FIX, "tokenizers", "torchtitan_test")
    cfg.hf_assets_path = tok
    cfg.tokenizer.test_mode = True
    cfg.tokenizer.t5_tokenizer_path = cfg.tokenizer.clip_tokenizer_path = tok
    cfg.tokenizer.max_t5_encoding_len = T5LEN
    cfg.encoder.t5_encoder = f"{models}/t5"
    cfg.encoder.clip_encoder = f"{models}/clip"
    cfg.encoder.autoencoder_path = f"{models}/ae.safetensors"
    cfg.model_spec.model.autoencoder = AutoEncoder.Config(
        **{k: tuple(v) if k == "ch_mult" else v for k, v in AE.items()})
    cfg.dataloader.dataset_path = os.path.join(FIX, "torchtitan_assets", "cc12m_test")
    cfg.dataloader.img_size = IMG
    cfg.training.mixed_precision_param = "bfloat16" if BF16 else "float32"
    cfg.training.steps = STEPS
    cfg.debug.seed = SEED
    cfg.parallelism.context_parallel_degree = CP
    cfg.parallelism.data_parallel_replicate_degree = REPLICATE
    cfg.dump_folder = dump
    cfg.checkpoint.enable = False
    cfg.validator.enable = VALIDATE
    if VALIDATE:  # flux_debugmodel's validator (freq 5, CFG 5.0, 4 steps) for 2 batches
        cfg.validator.steps = 2
        cfg.validator.dataloader.dataset_path = cfg.dataloader.dataset_path
        cfg.validator.dataloader.img_size = IMG
    return cfg


def main():
    if os.environ.get("RANK", "0") == "0":
        write_ae()
    rows, vals = [], []
    with tempfile.TemporaryDirectory() as tmp:
        models = f"{tmp}/m"
        subprocess.run(["build/tests/fluxtrain/test_fluxtrain", "mkmodels", models], check=True)
        for k, v in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"),
                     ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29517")):
            os.environ.setdefault(k, v)  # torchrun sets them for FSDP 2
        from torchtitan.models.flux.trainer import FluxTrainer
        import safetensors.torch
        import torchtitan.models.flux.model.autoencoder as ae_mod
        # safetensors takes "cpu", not the trainer's "cpu:0"
        ae_mod.load_sft = lambda path, device: safetensors.torch.load_file(path, device="cpu")
        import torchtitan.models.flux.parallelize as fp
        from torch.distributed.fsdp import FSDPModule
        undivided = fp.disable_fsdp_gradient_division

        def sum_reduction(model):
            """Gloo has no PREMUL_SUM, which FSDP's reduce-scatter uses for a
            divide factor of 1: a plain SUM (then a division by 1) instead."""
            undivided(model)
            for m in model.modules():
                if isinstance(m, FSDPModule):
                    m.set_force_sum_reduction_for_comms(True)

        fp.disable_fsdp_gradient_division = sum_reduction
        for mod in list(sys.modules.values()):  # every `from ... import device_type`
            if getattr(mod, "__name__", "").startswith("torchtitan") and \
                    getattr(mod, "device_type", None) == "cuda":
                mod.device_type = "cpu"
                if hasattr(mod, "device_module"):
                    mod.device_module = torch.cpu
        cfg = config(models, f"{tmp}/out")
        trainer = FluxTrainer(cfg)
        model = trainer.model_parts[0]
        want = titan_init(model, SEED)
        with torch.no_grad():
            for name, p in model.named_parameters():
                w = want[plain(name)]
                if hasattr(p, "device_mesh"):  # FSDP's shard of it
                    from torch.distributed.tensor import distribute_tensor
                    w = distribute_tensor(w, p.device_mesh, p.placements).to_local()
                (p.to_local() if hasattr(p, "to_local") else p).copy_(w)
        log = trainer.metrics_processor.log

        def record(step, loss, max_loss, grad_norm, extra_metrics=None, **kw):
            rows.append((step, float(loss), float(grad_norm), float(extra_metrics["lr"])))
            return log(step, loss, max_loss, grad_norm, extra_metrics=extra_metrics, **kw)

        trainer.metrics_processor.log = record
        log_val = trainer.metrics_processor.log_validation

        def record_val(loss, step, **kw):
            vals.append((step, float(loss)))
            return log_val(loss=loss, step=step, **kw)

        trainer.metrics_processor.log_validation = record_val
        trainer.train()
        # the images of the one-process run alone (under context parallelism
        # 0.3.0's sampling gathers the other rank's keys, of another image)
        if VALIDATE and int(os.environ["WORLD_SIZE"]) == 1:
            val = f"{GOLD}/val" if FLAVOR == "flux-debug" else f"{GOLD}/val_tiny"
            os.makedirs(val, exist_ok=True)
            for step in (5, 10):
                name = f"image_rank0_{step}.png"
                shutil.copy(f"{tmp}/out/img/{name}", f"{val}/{name}")
    world = int(os.environ["WORLD_SIZE"])
    if int(os.environ["RANK"]) != 0:
        return
    shard = world // (CP * REPLICATE)
    mesh = "".join(f"_{name}{n}" for name, n in (("hsdp", REPLICATE), ("fsdp", shard), ("cp", CP))
                   if n > 1)
    out = f"{GOLD}/{NAME}{mesh}{'_val' if VALIDATE else ''}{'_bf16' if BF16 else ''}.tsv"
    with open(out, "w") as f:
        f.write(f"# torchtitan 0.3.0 flux_debugmodel{'' if FLAVOR == 'flux-debug' else ' at ' + FLAVOR}, {cfg.training.mixed_precision_param}, "
                f"seed {SEED}, img_size {IMG}, "
                f"T5 length {T5LEN}, test tokenizer, {world} rank(s): data_parallel_replicate "
                f"{REPLICATE}, data_parallel_shard {shard}, context_parallel {CP}, "
                f"torch {torch.__version__}\n")
        for r in rows:
            f.write("%d\t%.9g\t%.9g\t%.9g\n" % r)
        for step, loss in vals:
            f.write("val\t%d\t%.9g\n" % (step, loss))
    print(f"{out}: {len(rows)} steps", file=sys.stderr)


if __name__ == "__main__":
    main()
