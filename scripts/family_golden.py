#!/usr/bin/env python3
"""Golden data for titan's model families (tests/family/), made by Hugging Face
transformers' own modules on a random initialisation.

For each case, writes tests/family/golden/<case>/:
  hf/               the model as transformers' save_pretrained writes it
                    (config.json, model.safetensors): random weights (norm
                    weights too, so that a forgotten norm shows); or, for the
                    cases transformers has no model of (source "torchtitan":
                    the MoE options DeepSeek-V3 and Llama 4 use, run through
                    torchtitan's own Qwen3Model and MoE),
  weights.safetensors  the parameters and expert_bias buffers by torchtitan's
                    names
  ref.safetensors   ids, labels (int32, (b, t); -100 = ignored), the model's
                    logits (b, t, vocab), loss (float64, the mean over the valid
                    labels) and the gradient of that loss for every parameter
                    (computed in float64, stored rounded to float32); with
                    experts, counts.<layer>: torchtitan's tokens_per_expert after
                    the forward,
                    named as torchtitan names it ("grad.<fqn>", mapped by
                    torchtitan's own StateDictAdapter.from_hf)
  case.json         the shapes titan builds the same model with

The forward and backward run in float64 (model.double()); transformers
computes RoPE's cos and sin in float32 whatever the dtype, as torchtitan does.

Run: PYTHON=... $PYTHON scripts/family_golden.py [case ...]
     (transformers, torch, safetensors, torchtitan 0.2.2)
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "family",
                    "golden")

# Small shapes; head_dim differs from hidden / heads, as Qwen3's 128 does.
CASES = {
    "qwen3": dict(family="qwen3", vocab=128, dim=32, hidden=64, layers=2, heads=4, kv=2,
                  head_dim=16, tied=True, eps=1e-6, theta=1e6, b=2, t=13, seed=1601),
    # debugmodel_moe's routing (64 experts, top 8, softmax, normalised): some
    # experts get no token, some several.
    "qwen3_moe": dict(family="qwen3", flavor="debugmodel_moe", vocab=128, dim=32, hidden=64,
                      layers=2, heads=4, kv=2, head_dim=16, tied=False, eps=1e-6, theta=1e6,
                      experts=64, top_k=8, moe_inter=8, b=2, t=13, seed=1602),
    # Sigmoid scores steered by a random expert_bias, node-limited to 2 of 4
    # groups, route_scale, a shared expert, the experts' inputs weighted.
    "moe_routing": dict(family="qwen3", flavor="debugmodel_moe", source="torchtitan", vocab=128,
                        dim=32, hidden=64, layers=2, heads=4, kv=2, head_dim=16, tied=False,
                        eps=1e-6, theta=1e6, experts=16, top_k=4, moe_inter=8, shared=1,
                        score="sigmoid", route_scale=2.5, groups=4, limited=2,
                        score_before=True, b=2, t=13, seed=1603),
    # DeepSeek V3's debugmodel layout through torchtitan's own DeepSeekV3Model:
    # MLA without a q bottleneck, YaRN on (max_seq_len 128 > original_seq_len
    # 64, so the softmax takes mscale too), a dense first layer, softmax-routed
    # experts with two shared ones, a random expert_bias.
    "deepseek_v3": dict(family="deepseek_v3", source="torchtitan", vocab=128, dim=32,
                        hidden=64, layers=3, heads=4, kv=4, dense=1, q_lora=0, kv_lora=24,
                        qk_nope=16, qk_rope=16, v_head=12, mscale=0.7, rope_orig=64,
                        rope_factor=40.0, theta=10000.0, max_seq=128, eps=1e-5,
                        experts=8, top_k=3, moe_inter=16, shared=2, score="softmax",
                        route_norm=False, route_scale=1.0, score_before=False, tied=False,
                        b=2, t=13, seed=1701),
    # DeepSeek V3 (671B's routing and RoPE) through transformers'
    # DeepseekV3ForCausalLM: a q bottleneck, sigmoid scores with
    # e_score_correction_bias, 8 groups of which 4 kept, weights normalised
    # and scaled, YaRN over original_max_position_embeddings 4096.  HF's
    # q_a_layernorm / kv_a_layernorm keep eps 1e-6 whatever rms_norm_eps says.
    "deepseek_v3_hf": dict(family="deepseek_v3", flavor="671B", vocab=128, dim=32,
                           hidden=64, layers=3, heads=4, kv=4, dense=1, q_lora=12,
                           kv_lora=24, qk_nope=16, qk_rope=16, v_head=12, mscale=1.0,
                           rope_orig=4096, rope_factor=40.0, theta=10000.0, max_seq=8192,
                           eps=1e-5, final_eps=1e-5, mla_eps=1e-6, experts=32, top_k=8, moe_inter=8,
                           shared=1, score="sigmoid", route_norm=True, route_scale=2.5,
                           groups=8, limited=4, score_before=False, tied=False, b=2, t=13,
                           seed=1702),
    # GPT-OSS's debugmodel settings through transformers' GptOssForCausalLM:
    # sinks, biases, YaRN on halves, the router's bias, the clamped SwiGLU; 150
    # tokens so that the even layers' 128-token window cuts in.
    "gpt_oss": dict(family="gpt_oss", vocab=128, dim=32, hidden=64, layers=3, heads=4, kv=2,
                    head_dim=8, eps=1e-5, theta=150000.0, experts=8, top_k=4, moe_inter=16,
                    tied=False, b=1, t=150, seed=1801),
    # Llama 4 with HF's options torchtitan lacks, through transformers'
    # Llama4ForCausalLM: NoPE layers (0, 2) with the attention temperature
    # (floor_scale 4 so that it varies within 13 tokens), RoPE layers (1, 3)
    # chunked by 5 with QK-norm after RoPE, MoE on layers 1 and 3 (top-1
    # sigmoid weighting the input, a shared expert), Llama 4's RoPE scaling.
    "llama4": dict(family="llama4", flavor="debugmodel_irope", vocab=128, dim=32, hidden=48,
                   layers=4, heads=4, kv=2, head_dim=8, eps=1e-5, theta=500000.0, experts=4,
                   top_k=1, moe_inter=16, shared=1, nope_every=2, chunk=5, qk_l2=True,
                   temp_floor=4, temp_scale=0.1, interleave=2, score_before=True, tied=False,
                   b=2, t=13, seed=1901),
    # Llama 4's debugmodel_irope as torchtitan defines it (NoPE layers 0 and 4,
    # 256-token chunks elsewhere, no QK-norm, no temperature): 260 tokens so
    # that the chunks cut in; what titan's HF export must reproduce.
    "llama4_irope": dict(family="llama4", flavor="debugmodel_irope", vocab=128, dim=32,
                         hidden=48, layers=5, heads=4, kv=2, head_dim=8, eps=1e-5,
                         theta=500000.0, experts=4, top_k=1, moe_inter=16, shared=1,
                         nope_every=4, chunk=256, qk_l2=False, temp_floor=0, temp_scale=0.1,
                         interleave=2, score_before=True, tied=False, b=1, t=260, seed=1902),
}


def moe_args(c):
    from torchtitan.models.moe import MoEArgs
    return MoEArgs(num_experts=c["experts"], num_shared_experts=c["shared"], top_k=c["top_k"],
                   score_func=c["score"], route_norm=c.get("route_norm", True),
                   route_scale=c["route_scale"], score_before_experts=c["score_before"],
                   num_expert_groups=c.get("groups"), num_limited_groups=c.get("limited"),
                   use_grouped_mm=False, load_balance_coeff=1e-3)


def deepseek_args(c):
    from torchtitan.models.deepseek_v3.model.args import DeepSeekV3ModelArgs
    args = DeepSeekV3ModelArgs(
        vocab_size=c["vocab"], dim=c["dim"], inter_dim=c["hidden"], moe_inter_dim=c["moe_inter"],
        n_layers=c["layers"], n_dense_layers=c["dense"], n_heads=c["heads"], norm_eps=c["eps"],
        moe_args=moe_args(c), q_lora_rank=c["q_lora"], kv_lora_rank=c["kv_lora"],
        qk_nope_head_dim=c["qk_nope"], qk_rope_head_dim=c["qk_rope"], v_head_dim=c["v_head"],
        max_seq_len=c["max_seq"], original_seq_len=c["rope_orig"], rope_theta=c["theta"],
        rope_factor=c["rope_factor"], mscale=c["mscale"])
    args.moe_impl = "standard"  # what update_from_config sets from the job
    return args


def randomise(model):
    """Weights redrawn wider than init_weights' so that the routing's choices
    are far from ties; norms away from 1 so that a forgotten one shows."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif "router" in name:
                p.copy_(0.5 * torch.randn_like(p))
            elif "embeddings" not in name:
                p.copy_(0.15 * torch.randn_like(p))
        for name, b in model.named_buffers():
            if name.endswith("expert_bias"):
                b.copy_(0.05 * torch.randn_like(b))


def build_torchtitan(c):
    if c["family"] == "deepseek_v3":
        from torchtitan.models.deepseek_v3.model.model import DeepSeekV3Model
        torch.manual_seed(c["seed"])
        model = DeepSeekV3Model(deepseek_args(c))
        with torch.no_grad():
            model.init_weights(buffer_device=torch.device("cpu"))
        randomise(model)
        return model
    return build_torchtitan_qwen3(c)


def build_torchtitan_qwen3(c):
    """torchtitan's Qwen3Model with the case's MoEArgs (the for-loop experts:
    grouped_mm has no float64).  Weights redrawn wider than init_weights'
    so that the routing's choices are far from ties."""
    from torchtitan.models.qwen3.model.args import Qwen3ModelArgs
    from torchtitan.models.qwen3.model.model import Qwen3Model
    torch.manual_seed(c["seed"])
    moe = moe_args(c)
    args = Qwen3ModelArgs(dim=c["dim"], n_layers=c["layers"], n_heads=c["heads"],
                          n_kv_heads=c["kv"], vocab_size=c["vocab"], head_dim=c["head_dim"],
                          hidden_dim=c["hidden"], norm_eps=c["eps"], rope_theta=c["theta"],
                          qk_norm=True, max_seq_len=64, enable_weight_tying=c["tied"],
                          moe_enabled=True, moe_inter_dim=c["moe_inter"], moe_args=moe)
    model = Qwen3Model(args)
    with torch.no_grad():
        model.init_weights(buffer_device=torch.device("cpu"))
    randomise(model)
    return model


def build_hf(c):
    import transformers
    torch.manual_seed(c["seed"])
    if c["family"] == "qwen3" and c.get("experts"):
        cfg = transformers.Qwen3MoeConfig(
            vocab_size=c["vocab"], hidden_size=c["dim"], intermediate_size=c["hidden"],
            moe_intermediate_size=c["moe_inter"], num_experts=c["experts"],
            num_experts_per_tok=c["top_k"], norm_topk_prob=True, decoder_sparse_step=1,
            num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
            num_key_value_heads=c["kv"], head_dim=c["head_dim"], rms_norm_eps=c["eps"],
            rope_theta=c["theta"], tie_word_embeddings=c["tied"], max_position_embeddings=4096,
            initializer_range=0.08, attn_implementation="eager")
        model = transformers.Qwen3MoeForCausalLM(cfg)
        model.set_experts_implementation("eager")  # a loop over the experts, float64 too
    elif c["family"] == "qwen3":
        cfg = transformers.Qwen3Config(
            vocab_size=c["vocab"], hidden_size=c["dim"], intermediate_size=c["hidden"],
            num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
            num_key_value_heads=c["kv"], head_dim=c["head_dim"], rms_norm_eps=c["eps"],
            rope_theta=c["theta"], tie_word_embeddings=c["tied"], max_position_embeddings=4096,
            initializer_range=0.08, attn_implementation="eager")
        model = transformers.Qwen3ForCausalLM(cfg)
    elif c["family"] == "deepseek_v3":
        rope = {"type": "yarn", "rope_type": "yarn", "factor": c["rope_factor"], "beta_fast": 32,
                "beta_slow": 1, "mscale": c["mscale"], "mscale_all_dim": c["mscale"],
                "original_max_position_embeddings": c["rope_orig"]}
        cfg = transformers.DeepseekV3Config(
            vocab_size=c["vocab"], hidden_size=c["dim"], intermediate_size=c["hidden"],
            moe_intermediate_size=c["moe_inter"], num_hidden_layers=c["layers"],
            num_attention_heads=c["heads"], num_key_value_heads=c["heads"],
            n_shared_experts=c["shared"], n_routed_experts=c["experts"],
            routed_scaling_factor=c["route_scale"], kv_lora_rank=c["kv_lora"],
            q_lora_rank=c["q_lora"] or None, qk_rope_head_dim=c["qk_rope"],
            v_head_dim=c["v_head"], qk_nope_head_dim=c["qk_nope"], n_group=c["groups"],
            topk_group=c["limited"], num_experts_per_tok=c["top_k"],
            first_k_dense_replace=c["dense"], norm_topk_prob=c["route_norm"],
            max_position_embeddings=int(c["rope_orig"] * c["rope_factor"]),
            rope_scaling=rope, rope_theta=c["theta"], rope_interleave=True,
            rms_norm_eps=c["eps"], tie_word_embeddings=False, initializer_range=0.15,
            attn_implementation="eager")
        model = transformers.DeepseekV3ForCausalLM(cfg)
        model.set_experts_implementation("eager")
        with torch.no_grad():  # routing far from ties, a bias that steers it
            for name, p in model.named_parameters():
                if name.endswith("mlp.gate.weight"):
                    p.copy_(0.5 * torch.randn_like(p))
            for name, b in model.named_buffers():
                if name.endswith("e_score_correction_bias"):
                    b.copy_(0.05 * torch.randn_like(b))
    elif c["family"] == "gpt_oss":
        cfg = transformers.GptOssConfig(
            vocab_size=c["vocab"], hidden_size=c["dim"], intermediate_size=c["moe_inter"],
            num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
            num_key_value_heads=c["kv"], head_dim=c["head_dim"], num_local_experts=c["experts"],
            num_experts_per_tok=c["top_k"], sliding_window=128, rope_theta=c["theta"],
            rms_norm_eps=c["eps"], tie_word_embeddings=False, initializer_range=0.1,
            attn_implementation="eager")
        model = transformers.GptOssForCausalLM(cfg)
        model.set_experts_implementation("eager")
        with torch.no_grad():  # the router far from ties; sinks and biases not 0
            for name, p in model.named_parameters():
                if "router" in name:
                    p.copy_(0.5 * torch.randn_like(p))
                elif name.endswith(("bias", "sinks")):
                    p.copy_(0.3 * torch.randn_like(p))
    elif c["family"] == "llama4":
        layers = range(c["layers"])
        cfg = transformers.Llama4TextConfig(
            vocab_size=c["vocab"], hidden_size=c["dim"], intermediate_size=c["moe_inter"],
            intermediate_size_mlp=c["hidden"], num_hidden_layers=c["layers"],
            num_attention_heads=c["heads"], num_key_value_heads=c["kv"], head_dim=c["head_dim"],
            num_local_experts=c["experts"], num_experts_per_tok=c["top_k"],
            moe_layers=[l for l in layers if (l + 1) % c["interleave"] == 0],
            no_rope_layers=[int(l % c["nope_every"] != 0) for l in layers],  # torchtitan's
            attention_chunk_size=c["chunk"], use_qk_norm=c["qk_l2"],
            attn_temperature_tuning=c["temp_floor"] > 0, floor_scale=c["temp_floor"] or 8192,
            attn_scale=c["temp_scale"], rms_norm_eps=c["eps"], rope_theta=c["theta"],
            rope_scaling={"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 1.0, "original_max_position_embeddings": 8192},
            tie_word_embeddings=False, initializer_range=0.1, attn_implementation="eager")
        model = transformers.Llama4ForCausalLM(cfg)
        with torch.no_grad():  # the fused experts start at 0 in transformers
            for name, p in model.named_parameters():
                if "experts" in name:
                    p.copy_(0.1 * torch.randn_like(p))
                elif "router" in name:
                    p.copy_(0.5 * torch.randn_like(p))
    else:
        raise SystemExit("unknown family " + c["family"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
    return model


def per_expert(hf):
    """transformers 5 keeps each layer's experts as fused 3-D parameters
    (gate_up_proj, down_proj); the checkpoints (and torchtitan's adapter) name
    one tensor per expert."""
    out = {}
    for name, t in hf.items():
        if name.endswith("mlp.experts.gate_up_proj"):
            gate, up = t.chunk(2, dim=1)
            for e in range(t.shape[0]):
                out[name.replace("gate_up_proj", f"{e}.gate_proj.weight")] = gate[e]
                out[name.replace("gate_up_proj", f"{e}.up_proj.weight")] = up[e]
        elif name.endswith("mlp.experts.down_proj"):
            for e in range(t.shape[0]):
                out[name.replace("down_proj", f"{e}.down_proj.weight")] = t[e]
        else:
            out[name] = t
    return out


def titan_names(c, hf_grads):
    """HF names -> torchtitan's, by torchtitan's own adapter."""
    if c["family"] == "qwen3":
        from torchtitan.models.moe import MoEArgs
        from torchtitan.models.qwen3.model.args import Qwen3ModelArgs
        from torchtitan.models.qwen3.model.state_dict_adapter import Qwen3StateDictAdapter
        moe = {}
        if c.get("experts"):
            moe = dict(moe_enabled=True, moe_inter_dim=c["moe_inter"],
                       moe_args=MoEArgs(num_experts=c["experts"], num_shared_experts=0,
                                        top_k=c["top_k"], score_func="softmax", route_norm=True,
                                        route_scale=1.0, score_before_experts=False))
        args = Qwen3ModelArgs(dim=c["dim"], n_layers=c["layers"], n_heads=c["heads"],
                              n_kv_heads=c["kv"], vocab_size=c["vocab"], head_dim=c["head_dim"],
                              hidden_dim=c["hidden"], norm_eps=c["eps"], rope_theta=c["theta"],
                              qk_norm=True, enable_weight_tying=c["tied"], **moe)
        return Qwen3StateDictAdapter(args, None).from_hf(per_expert(hf_grads))
    if c["family"] == "deepseek_v3":
        from torchtitan.models.deepseek_v3.model.state_dict_adapter import (
            DeepSeekV3StateDictAdapter)
        return DeepSeekV3StateDictAdapter(deepseek_args(c), None).from_hf(per_expert(hf_grads))
    if c["family"] == "gpt_oss":
        # torchtitan's adapter names the MXFP4 release's *_blocks; transformers'
        # unquantized fused experts are those (experts, in, out), transposed.
        from torchtitan.models.gpt_oss.model.state_dict_adapter import GptOssStateDictAdapter
        from torchtitan.models.gpt_oss.model.args import GptOssModelArgs
        plain = {n.replace("_proj", "_proj_blocks") if n.endswith(("gate_up_proj", "down_proj"))
                 else n: (t.transpose(-1, -2) if n.endswith(("gate_up_proj", "down_proj")) else t)
                 for n, t in hf_grads.items()}
        return GptOssStateDictAdapter(GptOssModelArgs(), None).from_hf(plain)
    if c["family"] == "llama4":
        # torchtitan's adapter reads the multimodal checkpoint's names
        # ("language_model." first) and has no entry for the dense layers'
        # feed_forward (its names are Llama's: w1 gate, w3 up, w2 down).
        from torchtitan.models.llama4.model.args import TransformerModelArgs
        from torchtitan.models.llama4.model.state_dict_adapter import Llama4StateDictAdapter
        dense = {"gate_proj": "w1", "up_proj": "w3", "down_proj": "w2"}
        out = Llama4StateDictAdapter(TransformerModelArgs(), None).from_hf(
            {"language_model." + n: t for n, t in hf_grads.items()})
        for n, t in hf_grads.items():
            parts = n.split(".")  # model.layers.L.feed_forward.P.weight
            if len(parts) == 6 and parts[3] == "feed_forward" and parts[4] in dense:
                out[f"layers.{parts[2]}.feed_forward.{dense[parts[4]]}.weight"] = t
        return out
    raise SystemExit("unknown family " + c["family"])


def make(name, c):
    out = os.path.join(ROOT, name)
    os.makedirs(out, exist_ok=True)
    titan = c.get("source") == "torchtitan"
    if titan:
        # histc has no CPU kernel for int64 (torchtitan runs it on GPUs);
        # bincount counts the same integers in [0, experts).
        torch.histc = lambda x, bins, min, max: torch.bincount(x.view(-1), minlength=bins)
        model = build_torchtitan(c)
        state = {n: t.detach().float().contiguous().clone() for n, t in model.state_dict().items()
                 if "rope_cache" not in n and "tokens_per_expert" not in n}
        save_file(state, os.path.join(out, "weights.safetensors"))
    else:
        model = build_hf(c)
        model.save_pretrained(os.path.join(out, "hf"), safe_serialization=True)
    model = model.double()
    g = torch.Generator().manual_seed(c["seed"] + 1)
    b, t, v = c["b"], c["t"], c["vocab"]
    ids = torch.randint(0, v, (b, t), generator=g)
    labels = torch.randint(0, v, (b, t), generator=g)
    labels[torch.rand((b, t), generator=g) < 0.15] = -100
    logits = model(ids) if titan else model(input_ids=ids).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, v), labels.reshape(-1),
                                             ignore_index=-100)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    ref = {"ids": ids.to(torch.int32), "labels": labels.to(torch.int32),
           "logits": logits.detach().float(), "loss": loss.detach().reshape(1)}
    for fqn, gr in (grads if titan else titan_names(c, grads)).items():
        ref["grad." + fqn] = gr.float().contiguous().clone()
    for n, b in model.named_buffers():
        if n.endswith("tokens_per_expert"):
            ref["counts." + n.split(".")[1]] = b.float().clone()
    save_file(ref, os.path.join(out, "ref.safetensors"))
    import transformers
    case = dict(c, n_valid=int((labels != -100).sum()), loss=loss.item(),
                torch=torch.__version__, transformers=transformers.__version__)
    with open(os.path.join(out, "case.json"), "w") as f:
        json.dump(case, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"{name}: loss {loss.item():.6f}, {len(ref) - 4} gradients -> {out}")


def main():
    names = sys.argv[1:] or sorted(CASES)
    for n in names:
        make(n, CASES[n])


if __name__ == "__main__":
    main()
