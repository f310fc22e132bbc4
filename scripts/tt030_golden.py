#!/usr/bin/env python3
"""Golden runs of torchtitan 0.3.0 for tests/train/tt030.sh: a preset
(llama3_debugmodel: Llama3Model debugmodel, ChunkedLossWrapper over
cross-entropy, default_adamw, its lr schedule: warmup 2, decay_ratio 0.8,
linear; qwen3_debugmodel and deepseek_v3_debugmodel alike) trained for STEPS
steps in float32 on one CPU process, from titan's initialisation (for
llama3_debugmodel scripts/model_golden.py's replica of titan_init, the numbers
titan-train --debug.seed draws; for the others titan's seed checkpoint), on
the documents of a titan token stream packed by 0.3.0's own
HuggingFaceTextDataset (inputs doc[:-1], labels doc[1:], per-document
positions).  Each step is 0.3.0's Trainer.train_step: the valid tokens of the
step counted first, forward with the lm_head skipped, the chunked loss and its
backward, clip_grad_norm_ (its sum of squares in float64: see
clip_grad_norm), the optimizers' and schedulers' step.

Every preset registers the model's own post_optimizer_build_fn as 0.3.0's
trainer does (the MoE families: the layers' expert bias steps before each
optimizer step).  deepseek_v3_debugmodel_mtp adds one multi-token prediction
depth and 0.3.0's MTPLoss (unchunked, the lm_head applied by the model, the
per-document positions passed to the loss); 0.3.0's hook walks model.layers,
so the MTP block's expert_bias stays 0.

The one substitution: FlexAttention refuses its backward on the CPU, so its
block mask is replaced by the same mask as a dense boolean tensor (causal and
within the document, 0.3.0's get_document_mask_mod; GPT-OSS's sliding-window
one also within the window) and its kernel by torch's
scaled_dot_product_attention under that mask (by the softmax written out where
GPT-OSS's sinks need its log-sum-exp).  gpt_oss_debugmodel_flex stands for
gpt_oss_debugmodel, whose varlen attention needs CUDA: the same masks.  Its
experts return bfloat16 whatever their input (0.3.0 runs them in bfloat16, in
its bf16 runs the input's dtype), which float32's combine refuses: they are
cast back to the input's dtype, as the other families' GroupedExperts do.

With --bf16, the run is 0.3.0's bfloat16 one instead: its parallelize always
installs FSDP's MixedPrecisionPolicy (param bfloat16, reduce float32), even on
one rank, so the model goes through 0.3.0's own apply_fsdp_to_decoder over a
one-rank gloo group (parameters float32, each unit's forward and backward on
bfloat16 copies, gradients reduced to float32).

llama3_debugmodel_float8_emulate_lora runs 0.3.0's converters as the preset
builds them: torchao's Float8Linear with Float8LinearConfig(emulate=True)
(tensorwise, float8 values multiplied in float32: torchao must be on the
path) on every linear, then LoRAConverter, which wraps attention.wo alone
(target_modules wq, wkv, wo; q, k and v are qkv_linear.wqkv) and freezes
every other parameter; lora_a's kaiming-uniform draw comes from titan's seed
checkpoint like every other weight (lora_b is zeros), so the adapters train
from the values titan starts from.  It runs LORA_STEPS steps (its schedule
built for them), not STEPS: torchao's emulation is slow on the CPU.

sft_debugmodel runs on chat data instead: 0.3.0's own ChatDataset (its
HuggingFaceTokenizer over TOKENIZER, the preset's sample_processor, HF
datasets' json loader of CHAT.jsonl: torchtitan's tests/assets/sft_test
data.json as JSON Lines, BSD-3) at SFT_SEQ positions for SFT_STEPS steps,
prompt tokens masked; the loss is normalised by the valid (unmasked)
tokens of the step, as 0.3.0's trainer does.  Its weights are titan's
llama3_debugmodel init (the same model).

Writes tests/train/golden/tt030_<family>[_mtp][_lora][_bf16].tsv (tt030_sft.tsv): the settings in
its header, and per step the loss, grad_norm and lr (the step's, before the
scheduler steps); for the LoRA preset also tt030_llama3_lora.names, the names
of the model's and the optimizer's items of 0.3.0's checkpoint after the run.

qwen3_debugmodel_moe_param_groups (0.3.0's optimizer param groups: AdamW
without decay for tok_embeddings, Adam at lr 1e-4 for the routers' gates,
AdamW for the rest) writes tt030_qwen3_moe_param_groups.tsv and, beside it,
.params.pt: its final norms and layers 0 and 7's router gates (KEEP_PARAMS).
With --groups-of qwen3_debugmodel_moe_param_groups, another preset (the test's
deepseek_v3_debugmodel: 33M parameters against that model's 316M) runs with
that preset's optimizer, 0.3.0's own OptimizersContainer.Config object, taken
from its config_registry function unchanged: tt030_moe_param_groups.tsv and
.params.pt (the norms and layers 1 and 5's router gates).

With --muon GROUPS.toml (llama3_debugmodel): the preset's optimizer replaced
by the param groups of GROUPS.toml (tests/train/muon_groups.toml: 0.3.0's
DistMuon for the layers' matrices, AdamW for the rest), DistMuon run by
0.3.0's own code over a one-rank gloo group (its CUDA device check is the
one thing patched), the model fully_shard-ed over that rank in float32 so
that its parameters are DTensors; writes tt030_llama3_muon.tsv, .params.pt
and .names (0.3.0's checkpoint items: DistMuon's momentum_buffer and
param_groups beside AdamW's).

With --bf16-states (llama3_debugmodel): optimizer.implementation =
"fused_opt_states_bf16", 0.3.0's own OptimizersContainer with its step
pre-hook that creates exp_avg and exp_avg_sq in bfloat16 beside the float32
parameters.  torch runs such states only in its CUDA fused kernel
(FusedAdamMathFunctorMP); its CPU fused AdamW refuses them, so the one
substitution is torch._fused_adamw_ (and _fused_adam_) by fused_adam_mp below,
a transcription of that kernel's adam_math in float32 (its fused multiply-adds
as float64 sums of exact products, rounded once more to float32), the states
rounded to bfloat16 when stored.  Writes tt030_llama3_bf16_states.tsv,
.params.pt (KEEP_MUON's tensors) and .states (each optimizer state's name and
dtype in 0.3.0's checkpoint).

Run: PYTHONPATH=<torchtitan 0.3.0> $PYTHON scripts/tt030_golden.py [--bf16] [--bf16-states] [--steps N] [--muon GROUPS.toml] [--groups-of PRESET] [PRESET] TOKENS.tts [SEED]
     PYTHONPATH=<torchtitan 0.3.0> $PYTHON scripts/tt030_golden.py sft_debugmodel CHAT.jsonl TOKENIZER
     (torch, numpy, torchtitan 0.3.0; TOKENS from tests/shard/test_gen as
     tests/train/tt030.sh makes it: test_gen gen 11 400 2048 60; SEED: titan's
     seed checkpoint of the preset, which tests/train/tt030.sh writes with
     --checkpoint.create_seed_checkpoint --debug.seed 7, for the presets other
     than llama3_debugmodel, whose weights this script draws as titan does)
"""
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_golden import ffn_hidden, titan_init  # noqa: E402

from torchtitan.components.loss import ChunkedLossWrapper, IGNORE_INDEX  # noqa: E402
from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataset  # noqa: E402
from torchtitan.models.common import attention as tt_attention  # noqa: E402
from torchtitan.models.common import decoder as tt_decoder  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SEED, STEPS, BATCH, SEQ = 7, 15, 2, 64
LORA_STEPS = 8
SFT_STEPS, SFT_SEQ = 10, 128


def dense_document_mask(self, positions):
    """0.3.0's document mask as a boolean (b, 1, L, L): causal, same document."""
    doc = torch.cumsum((positions == 0).int(), dim=1) - 1
    L = positions.shape[1]
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    same = doc[:, :, None] == doc[:, None, :]
    return (causal[None] & same)[:, None]


def gpt_oss_masks(self, positions):
    """GptOssModel's two flex masks, dense: the document mask, and the same
    within the sliding window (a query sees itself and the window - 1 before)."""
    mask = dense_document_mask(self, positions)
    window = next(l.attention.sliding_window_size for l in self.config.layers
                  if l.attention.sliding_window_size is not None)
    L = positions.shape[1]
    i = torch.arange(L)
    near = (i[:, None] - i[None, :]) < window
    return {"basic_mask": mask, "sliding_window_mask": mask & near[None, None]}


def sdpa_under_mask(self, q, k, v, *, attention_masks, scale=None, enable_gqa=False,
                    out_transform=None, **kwargs):
    if out_transform is None:
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                             v.transpose(1, 2), attn_mask=attention_masks,
                                             scale=scale, enable_gqa=enable_gqa)
        return out.transpose(1, 2)
    # flex_attention's output and log-sum-exp, for GPT-OSS's sinks
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if enable_gqa:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    s = (q @ k.transpose(-1, -2)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    s = s.masked_fill(~attention_masks, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    out = torch.softmax(s, dim=-1) @ v
    return out_transform(out.transpose(1, 2), lse.transpose(1, 2))


class Docs:
    """The stream's documents as a dataset and a tokenizer 0.3.0's
    HuggingFaceTextDataset reads: sample i's text is i, encoded to document i
    (BOS and EOS already in the stream)."""

    def __init__(self, docs):
        self.docs = docs

    def encode(self, text, add_bos=True, add_eos=True):
        return list(self.docs[int(text)])


def read_docs(tts):
    gen = os.environ.get("TEST_GEN", os.path.join(ROOT, "build/tests/shard/test_gen"))
    out = subprocess.run([gen, "ids", tts], check=True, capture_output=True, text=True).stdout
    return [[int(x) for x in line.split()] for line in out.splitlines() if line.strip()]


def batches(docs):
    ds = HuggingFaceTextDataset.__new__(HuggingFaceTextDataset)
    ds.dataset_name, ds.seq_len, ds.infinite = "titan", SEQ, False
    ds._original_data = ds._data = [{"i": i} for i in range(len(docs))]
    ds._tokenizer, ds._text_processor = Docs(docs), lambda s: str(s["i"])
    ds._sample_idx, ds._epoch = 0, 0
    ds._inputs_buffer, ds._labels_buffer, ds._positions_buffer = [], [], []
    return stacked(iter(ds))


def stacked(rows):
    """BATCH rows of a 0.3.0 dataset at a time: inputs, positions, labels."""
    while True:
        got = [next(rows) for _ in range(BATCH)]
        yield (torch.stack([g[0]["input"] for g in got]),
               torch.stack([g[0]["positions"] for g in got]),
               torch.stack([g[1] for g in got]))


def sft_batches(cfg, data, tokenizer):
    """0.3.0's ChatDataset over the chat data, BATCH rows a step."""
    from datasets import load_dataset
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    from torchtitan.hf_datasets.text_datasets import ChatDataset
    ds = ChatDataset(load_dataset("json", data_files=data, split="train"),
                     HuggingFaceTokenizer(tokenizer_path=tokenizer),
                     cfg.dataloader.sample_processor, seq_len=SFT_SEQ, infinite=True)
    return stacked(iter(ds))


def tt030_name(fqn):
    if fqn == "output.weight":
        return "lm_head.weight"
    for w in ("wq", "wk", "wv"):
        fqn = fqn.replace(f".attention.{w}.", f".attention.qkv_linear.{w}.")
    return fqn


def load_llama3_titan_init(model):
    """llama3_debugmodel from scripts/model_golden.py's replica of titan's init."""
    a = dict(dim=256, n_layers=6, n_heads=16, n_kv_heads=16, vocab=2048, multiple_of=256,
             ffn_dim_multiplier=None, tied=False)
    a["ffn"] = ffn_hidden(256, 256, None)
    W = titan_init(a, SEED)
    sd = {tt030_name(k): torch.from_numpy(np.ascontiguousarray(v)) for k, v in W.items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if unexpected or [m for m in missing if "freqs" not in m and "cache" not in m]:
        sys.exit(f"tt030_golden.py: state dict mismatch: missing {missing}, unexpected "
                 f"{unexpected}")


def load_seed_checkpoint(model, folder):
    """titan's seed checkpoint (a DCP folder under 0.3.0's names), every tensor of
    the model's state dict read from it; the fused qkv merged by 0.3.0's own
    load hook."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    sd = model.state_dict()
    # (the same Parameter: data_ptr would not tell two DTensors of a
    # fully_shard-ed model apart)
    tied = model.lm_head.weight is model.tok_embeddings.weight
    # a tied model's lm_head is its embedding: titan's checkpoint holds it once
    dcp.load(sd, checkpoint_id=folder, planner=DefaultLoadPlanner(allow_partial_load=tied))
    if tied:
        sd["lm_head.weight"] = sd["tok_embeddings.weight"]
    model.load_state_dict(sd)


def install_bf16_policy(model, cfg):
    """0.3.0's parallelize on one rank: apply_fsdp_to_decoder over a one-rank
    mesh, which installs MixedPrecisionPolicy(param bf16, reduce float32)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torchtitan.distributed.fsdp import apply_fsdp_to_decoder
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("gloo", rank=0, world_size=1)
    mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("fsdp",))
    apply_fsdp_to_decoder(model, mesh, param_dtype=torch.bfloat16, reduce_dtype=torch.float32,
                          pp_enabled=False)
    cfg.training.mixed_precision_param = "bfloat16"


class OneRank:
    """ParallelDims of one process, as the MoE load-balancing hook reads it."""
    ep_enabled = False
    tp = 1

    def get_optional_mesh(self, name):
        return None


def train_parts(cfg, model, steps):
    """0.3.0's Trainer around model: in training mode, its chunked loss over
    the lm_head (which the model then skips; MTPLoss applies the lm_head
    itself), its optimizer and lr scheduler containers for `steps` steps, and
    the model's post_optimizer_build_fn (the MoE families' expert-bias update
    before each optimizer step, register_moe_load_balancing_hook)."""
    model.train()
    loss_fn = cfg.loss.build()
    if isinstance(loss_fn, ChunkedLossWrapper):
        loss_fn.set_lm_head(model.lm_head)
        model._skip_lm_head = True
    optimizers = cfg.optimizer.build(model_parts=[model])
    if cfg.model_spec.post_optimizer_build_fn is not None:
        cfg.model_spec.post_optimizer_build_fn(optimizers, [model], OneRank())
    schedulers = cfg.lr_scheduler.build(optimizers=optimizers, training_steps=steps)
    return loss_fn, optimizers, schedulers


def clip_grad_norm(parameters, max_norm):
    """0.3.0's dist_utils.clip_grad_norm_ on one rank (torch's get_total_norm,
    the DTensor's full_tensor, clip_grads_with_norm_), each gradient's sum of
    squares taken in float64 and the total rounded to float32.  On the CPU,
    torch's float32 L2 norm (linalg.vector_norm, which _foreach_norm calls per
    tensor there) adds every square into one float32 accumulator per vector
    lane, no cascade (pytorch/pytorch#169237): it reads lm_head's 524288
    gradients 8.6e-5 low on llama3_debugmodel and 1.7e-4 low on
    sft_debugmodel, which put 0.3.0's grad norm 7e-5 and 1.2-1.7e-4 under the
    norm of its own gradients (each of which agrees with float64 to 1e-7).
    0.3.0 runs on CUDA, whose _foreach_norm kernel (LpNormFunctor) adds a few
    squares per thread and sums the partials by block reductions, without
    that drift; titan sums the squares in double."""
    params = list(parameters)
    grads = [p.grad.double() for p in params if p.grad is not None]
    total = torch.nn.utils.get_total_norm(grads, 2.0, False, True)
    if hasattr(total, "full_tensor"):
        total = total.full_tensor()
    total = total.float()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total, foreach=True)
    return total


# presets whose golden is named apart from their family's, and the final
# parameters each golden keeps (small tensors whose values every group moves)
NAMED = {"qwen3_debugmodel_moe_param_groups": "qwen3_moe_param_groups"}
KEEP_PARAMS = r"(?:^norm|attention_norm|ffn_norm|q_norm|k_norm)\.weight$|^layers\.[07]\.moe\.router\.gate\.weight$"
# deepseek_v3_debugmodel's (layer 0 dense; MLA's norms)
KEEP_GROUPS = r"(?:^norm|attention_norm|ffn_norm|kv_norm|q_norm)\.weight$|^layers\.[15]\.moe\.router\.gate\.weight$"


# Muon's: one matrix Muon updates too
KEEP_MUON = KEEP_PARAMS + r"|^layers\.5\.attention\.wo\.weight$"


def write_params(model, out, keep_re=KEEP_PARAMS):
    """The final parameters whose names match keep_re (0.3.0's model state
    dict names), torch.save'd: titan-ckpt-convert diff compares titan's
    checkpoint with them."""
    import re
    keep = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone().contiguous()
            for k, v in model.state_dict().items() if re.search(keep_re, k)}
    torch.save(keep, out)
    print(f"wrote {out} ({len(keep)} tensors)")


def muon_optimizer(cfg, model, groups_toml):
    """cfg.optimizer as the param groups of groups_toml (titan's TOML spelling
    of 0.3.0's ParamGroupConfig list, which titan-train takes with
    --optimizer.param_groups), DistMuon's groups whole matrices (Owned over
    the one-rank dp_shard mesh), as 0.3.0's kimi presets build it; the model
    fully_shard-ed over that mesh in float32 so that its parameters are the
    DTensors DistMuon takes."""
    import re
    import tomllib
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torchtitan.components.optimizer import OptimizersContainer, ParamGroupConfig
    from torchtitan.distributed.flex_shard import BucketConfig, ComputeLayout, Owned
    from torchtitan.distributed.flex_shard import dist_muon
    with open(groups_toml, "rb") as f:
        groups = tomllib.load(f)["optimizer"]["param_groups"]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29519")
    if not dist.is_initialized():  # scripts/tt030_crossing.py's is
        dist.init_process_group("gloo", rank=0, world_size=1)
    mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("dp_shard",))
    for layer in model.layers.values():
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    # the one substitution: DistMuon asks for a CUDA device; its math and
    # redistribution run as they are on the CPU over gloo
    dist_muon.DistMuon._validate_parameter_storage = lambda self: torch.device("cpu")
    pgs, muon = [], []
    claimed = set()
    for g in groups:
        kw = {k: tuple(v) if isinstance(v, list) else v for k, v in g["optimizer_kwargs"].items()}
        if g["optimizer_name"] == "DistMuon":
            kw.update(fused=False, foreach=False)
        pgs.append(ParamGroupConfig(pattern=g["pattern"], optimizer_name=g["optimizer_name"],
                                    optimizer_kwargs=kw))
        for n, _ in model.named_parameters():
            if n not in claimed and re.search(g["pattern"], n):
                claimed.add(n)
                if g["optimizer_name"] == "DistMuon":
                    muon.append(n)
    owned = ComputeLayout(shardings_by_mesh_axis={"dp_shard": Owned()})
    cfg.optimizer = OptimizersContainer.Config(
        param_groups=pgs,
        optimizer_factory_kwargs_by_name={"DistMuon": {
            "compute_sharding_by_fqn": {n: owned for n in muon},
            "bucket_configs": (BucketConfig(patterns=tuple(muon), name="all"),)}})


def fused_adam_mp(orig, adamw):
    """torch._fused_adam(w)_ for float32 parameters with bfloat16 states as
    torch's CUDA FusedAdamMathFunctorMP computes it (ATen's
    fused_adam_utils.cuh, adam_math with opmath float): the hyper-parameters
    and the bias corrections (derived in double) rounded to float32;
    param -= lr * weight_decay * param as nvcc contracts it (one fma);
    exp_avg = fma(beta1, exp_avg, fma(-beta1, grad, grad)); exp_avg_sq the
    same with grad * grad; param -= lr / bc1 * exp_avg / (sqrt(exp_avg_sq) /
    sqrt(bc2) + eps); the states stored rounded to bfloat16.  Other dtypes go
    to torch's own kernel."""
    import math

    def f32(x):
        return torch.tensor(x, dtype=torch.float32)

    def fma(a, b, c):  # exact product, one rounding to double, then to float32
        return (a.double() * b.double() + c.double()).float()

    def step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, amsgrad,
             lr, beta1, beta2, weight_decay, eps, maximize, grad_scale=None, found_inf=None):
        if not exp_avgs or exp_avgs[0].dtype != torch.bfloat16:
            return orig(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
                        amsgrad=amsgrad, lr=lr, beta1=beta1, beta2=beta2,
                        weight_decay=weight_decay, eps=eps, maximize=maximize,
                        grad_scale=grad_scale, found_inf=found_inf)
        assert not amsgrad and not maximize and grad_scale is None and found_inf is None
        assert adamw or weight_decay == 0
        lr32, b1, b2, wd, ep = f32(float(lr)), f32(beta1), f32(beta2), f32(weight_decay), f32(eps)
        for p, g, m, v, st in zip(params, grads, exp_avgs, exp_avg_sqs, state_steps):
            n = float(st)
            bc1, sbc2 = f32(1 - beta1 ** n), f32(math.sqrt(1 - beta2 ** n))
            P, G = p.detach().float(), g.float()
            if weight_decay != 0:
                P = fma(-(lr32 * wd), P, P)
            M = fma(b1, m.float(), fma(-b1, G, G))
            GG = G * G
            V = fma(b2, v.float(), fma(-b2, GG, GG))
            # in numpy: torch's CPU division by a scalar multiplies by its
            # reciprocal, which the kernel does not
            f = np.float32
            step_size = f(lr32.item()) / f(bc1.item())
            denom = np.sqrt(V.numpy()) / f(sbc2.item()) + f(ep.item())
            P = torch.from_numpy(P.numpy() - (step_size * M.numpy()) / denom)
            p.detach().copy_(P)
            m.copy_(M.to(torch.bfloat16))
            v.copy_(V.to(torch.bfloat16))
    return step


def use_bf16_states(cfg):
    """cfg's optimizer with 0.3.0's fused_opt_states_bf16, torch's fused kernel
    for it the transcription fused_adam_mp."""
    cfg.optimizer.implementation = "fused_opt_states_bf16"
    if not getattr(torch._fused_adamw_, "mp", False):
        torch._fused_adamw_ = fused_adam_mp(torch._fused_adamw_, True)
        torch._fused_adam_ = fused_adam_mp(torch._fused_adam_, False)
        torch._fused_adamw_.mp = torch._fused_adam_.mp = True


def use_groups_of(cfg, preset):
    """cfg's optimizer replaced by preset's (0.3.0's own object)."""
    reg = __import__(f"torchtitan.models.{preset.split('_')[0]}.config_registry",
                     fromlist=[preset])
    cfg.optimizer = getattr(reg, preset)().optimizer


def main():
    args = sys.argv[1:]
    muon = None
    if "--muon" in args:
        i = args.index("--muon")
        muon = args[i + 1]
        del args[i:i + 2]
    groups_of = None
    if "--groups-of" in args:
        i = args.index("--groups-of")
        groups_of = args[i + 1]
        del args[i:i + 2]
    bf16 = "--bf16" in args
    bf16_states = "--bf16-states" in args
    args = [a for a in args if a not in ("--bf16", "--bf16-states")]
    steps_arg = None
    if "--steps" in args:
        i = args.index("--steps")
        steps_arg = int(args[i + 1])
        del args[i:i + 2]
    preset = args[0] if len(args) > 1 else "llama3_debugmodel"
    tokens = args[1] if len(args) > 1 else args[0]
    seed_ckpt = args[2] if len(args) > 2 else None
    tt_decoder.Decoder.get_attention_masks = dense_document_mask
    tt_attention.FlexAttention.forward = sdpa_under_mask
    from torchtitan.models.gpt_oss import model as gpt_oss_model
    from torchtitan.models.gpt_oss import moe as gpt_oss_moe
    gpt_oss_model.GptOssModel.get_attention_masks = gpt_oss_masks
    experts = gpt_oss_moe.GptOssGroupedExperts.forward
    gpt_oss_moe.GptOssGroupedExperts.forward = \
        lambda self, x, n: experts(self, x, n).type_as(x)
    torch.manual_seed(0)
    family = next(f for f in ("deepseek_v3", "gpt_oss", "llama3", "qwen3", "sft") if preset.startswith(f))
    reg = __import__(f"torchtitan.models.{'llama3' if family == 'sft' else family}.config_registry",
                     fromlist=[preset])
    cfg = getattr(reg, preset)()
    # the LoRA preset's emulated float8 is slow on the CPU: fewer steps
    sft = preset == "sft_debugmodel"
    steps = LORA_STEPS if preset.endswith("_lora") else SFT_STEPS if sft else STEPS
    steps = steps_arg or steps
    cfg.training.local_batch_size, cfg.training.steps = BATCH, steps
    cfg.training.seq_len = SFT_SEQ if sft else SEQ
    cfg.training.mixed_precision_param = "float32"
    model = cfg.model_spec.model.build()
    if seed_ckpt and not sft:
        load_seed_checkpoint(model, seed_ckpt)
    elif preset in ("llama3_debugmodel", "sft_debugmodel"):
        load_llama3_titan_init(model)
    else:
        sys.exit("tt030_golden.py: a preset other than llama3_debugmodel starts from titan's "
                 "seed checkpoint (third argument)")
    if bf16:
        install_bf16_policy(model, cfg)
    if muon:
        muon_optimizer(cfg, model, muon)
    if bf16_states:
        use_bf16_states(cfg)
    if groups_of:
        use_groups_of(cfg, groups_of)
    mtp = preset.endswith("_mtp")
    loss_fn, optimizers, schedulers = train_parts(cfg, model, steps)
    data = sft_batches(cfg, tokens, seed_ckpt) if sft else batches(read_docs(tokens))
    rows = []
    for step in range(1, steps + 1):
        optimizers.zero_grad()
        lr = optimizers.optimizers[0].param_groups[0]["lr"]
        inputs, positions, labels = next(data)
        valid = (labels != IGNORE_INDEX).sum()
        pred = model(inputs, positions=positions,
                     attention_masks=model.get_attention_masks(positions=positions))
        loss, _ = loss_fn(pred, labels, valid, positions=positions)
        loss.backward()
        gn = clip_grad_norm(model.parameters(), cfg.training.max_norm)
        optimizers.step()
        schedulers.step()
        rows.append(dict(step=step, loss=loss.item(), grad_norm=gn.item(), lr=lr))
        print(f"step {step:2d}  loss {loss.item():.6f}  grad_norm {gn.item():.6f}  lr {lr:.6g}")
    suffix, precision = ("_bf16", "bfloat16 (FSDP MixedPrecisionPolicy)") if bf16 else ("", "float32")
    name = NAMED.get(preset, family + ("_mtp" if mtp else "") +
                     ("_lora" if preset.endswith("_lora") else "")) + suffix
    if muon:
        name = family + "_muon"
    if groups_of:
        name = NAMED[groups_of].replace("qwen3_", "")
    if bf16_states:
        name = family + "_bf16_states"
    out = os.path.join(ROOT, f"tests/train/golden/tt030_{name}.tsv")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write(f"# torchtitan 0.3.0 {preset}, {precision}, seed {SEED}, local_batch_size "
                f"{BATCH}, seq_len {cfg.training.seq_len}, {steps} steps (scripts/tt030_golden.py)\n")
        f.write("# step\tloss\tgrad_norm\tlr\n")
        for r in rows:
            f.write(f"{r['step']}\t{r['loss']!r}\t{r['grad_norm']!r}\t{r['lr']!r}\n")
    print(f"wrote {out}")
    if preset.endswith("_lora") or muon:
        write_checkpoint_names(model, optimizers, out[:-len(".tsv")] + ".names")
    if preset in NAMED or muon or groups_of or bf16_states:
        write_params(model, out[:-len(".tsv")] + ".params.pt",
                     KEEP_MUON if muon or bf16_states else KEEP_GROUPS if groups_of else KEEP_PARAMS)
    if bf16_states:
        write_state_dtypes(optimizers, out[:-len(".tsv")] + ".states")


def write_checkpoint_names(model, optimizers, out):
    """The model's and the optimizers' items of 0.3.0's checkpoint (its
    CheckpointManager's ModelWrapper and OptimizersContainer state dicts, the
    optimizer's flattened under "optimizer."), one name a line, sorted."""
    from torchtitan.components.checkpoint import ModelWrapper
    names = list(ModelWrapper([model]).state_dict())
    names += ["optimizer." + k for k in optimizers.state_dict()]
    with open(out, "w") as f:
        f.write("".join(n + "\n" for n in sorted(names)))
    print(f"wrote {out}")


def write_state_dtypes(optimizers, out):
    """Each optimizer state tensor of 0.3.0's checkpoint ("optimizer." and its
    flattened name) and its dtype, sorted."""
    sd = optimizers.state_dict()
    rows = sorted(f"optimizer.{k}\t{str(v.dtype).replace('torch.', '')}"
                  for k, v in sd.items() if k.startswith("state.") and torch.is_tensor(v))
    with open(out, "w") as f:
        f.write("".join(r + "\n" for r in rows))
    print(f"wrote {out} ({len(rows)} states)")


if __name__ == "__main__":
    main()
