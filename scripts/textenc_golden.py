#!/usr/bin/env python3
"""Goldens for lib/textenc (tests/textenc/test_textenc.c): tiny random T5 v1.1
encoders and CLIP text models of the architectures Flux's FluxEmbedder loads
(torchtitan/models/flux/model/hf_embedder.py: T5EncoderModel's
last_hidden_state, CLIPTextModel's pooler_output, attention_mask=None), saved
with save_pretrained as safetensors, and transformers' float32 outputs on fixed
token ids.

Each case is a folder under tests/textenc/golden/<case>/ with the model
(config.json, model.safetensors or a sharded index) and io.safetensors:
"ids" int32 (B, L) and "out" float32 (T5: (B, L, d_model); CLIP: (B, hidden));
the T5 cases add "buckets" int32 (601): the relative position bucket of
-300 .. 300 (32 buckets, the case's max_distance).  The cases whose weights
are stored in bf16 add "out_bf16": the output of the model cast to bfloat16
as torchtitan's Flux trainer casts its encoders under FSDP
(training.mixed_precision_param), "out" being the float32 one of the same
weights.

Run from the repository root with the reference venv:
  python scripts/textenc_golden.py
"""
import os
import shutil

import torch
from safetensors.torch import load_file, save_file
from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

OUT = "tests/textenc/golden"


def t5_case(name, seed, max_distance, sharded, bf16_weights, b, l):
    torch.manual_seed(seed)
    cfg = T5Config(vocab_size=128, d_model=32, d_kv=8, num_heads=4, d_ff=48,
                   num_layers=2, relative_attention_num_buckets=32,
                   relative_attention_max_distance=max_distance,
                   feed_forward_proj="gated-gelu", layer_norm_epsilon=1e-6,
                   dropout_rate=0.0, is_encoder_decoder=False)
    model = T5EncoderModel(cfg).eval()
    # the default init leaves the relative bias and norms near-trivial: spread them
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "layer_norm" in n:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif "relative_attention_bias" in n:
                p.copy_(torch.randn_like(p))
    save(model, name, sharded, bf16_weights)
    model = T5EncoderModel.from_pretrained(os.path.join(OUT, name), dtype=torch.float32).eval()
    ids = torch.randint(0, 128, (b, l), dtype=torch.int64)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=None).last_hidden_state
        extra = {}
        if bf16_weights:  # torchtitan's encoders under FSDP: .to(mixed_precision_param)
            extra["out_bf16"] = model.to(torch.bfloat16)(
                input_ids=ids, attention_mask=None).last_hidden_state.float()
    # the bucket of every relative position out to +-300 (beyond max_distance)
    rel = torch.arange(-300, 301)
    buckets = model.encoder.block[0].layer[0].SelfAttention._relative_position_bucket(
        rel, bidirectional=True, num_buckets=32, max_distance=max_distance)
    io(name, ids, out, {"buckets": buckets.to(torch.int32), **extra})


def clip_case(name, seed, eos_token_id, b, l, prefix, bf16_weights):
    torch.manual_seed(seed)
    cfg = CLIPTextConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                         num_attention_heads=4, num_hidden_layers=2,
                         max_position_embeddings=32, hidden_act="quick_gelu",
                         layer_norm_eps=1e-5, bos_token_id=0, eos_token_id=eos_token_id,
                         pad_token_id=1)
    model = CLIPTextModel(cfg).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "layer_norm" in n:
                p.copy_((1 if n.endswith("weight") else 0) + 0.2 * torch.randn_like(p))
    save(model, name, False, bf16_weights)
    if bf16_weights:  # the float32 reference of the weights as stored
        model = model.to(torch.bfloat16).float()
    if prefix:  # the names transformers 4 wrote (Flux's checkpoints have them)
        path = os.path.join(OUT, name, "model.safetensors")
        tensors = load_file(path)
        save_file({"text_model." + k: v for k, v in tensors.items()}, path,
                  metadata={"format": "pt"})
    # CLIP's tokenizer: bos, words, the end token, then padding with the end
    # token itself (openai/clip-vit-large-patch14's pad is <|endoftext|>): the
    # pooled position is the first of equal ids; the words are below the end
    # token 127 (legacy) but cross eos_token_id 100 (the other case)
    hi = 127 if eos_token_id == 2 else 128
    ids = torch.randint(3, hi, (b, l), dtype=torch.int64)
    end_id = 127 if eos_token_id == 2 else eos_token_id
    for r in range(b):
        end = 3 + 4 * r
        ids[r, 0] = 0
        ids[r, end:] = end_id
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=None).pooler_output
        extra = {}
        if bf16_weights:
            extra["out_bf16"] = model.to(torch.bfloat16)(
                input_ids=ids, attention_mask=None).pooler_output.float()
    io(name, ids, out, extra)


def save(model, name, sharded, bf16_weights):
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    if bf16_weights:
        model = model.to(torch.bfloat16)
    model.save_pretrained(d, safe_serialization=True,
                          max_shard_size="16KB" if sharded else "5GB")
    assert os.path.exists(os.path.join(d, "model.safetensors.index.json")) == sharded


def io(name, ids, out, extra=None):
    save_file({"ids": ids.to(torch.int32).contiguous(), "out": out.float().contiguous(),
               **(extra or {})},
              os.path.join(OUT, name, "io.safetensors"))
    print(f"{name}: ids {tuple(ids.shape)} out {tuple(out.shape)}")


def main():
    os.makedirs(OUT, exist_ok=True)
    # distances up to 19 cross T5's exact buckets (8 per direction) into the
    # logarithmic ones; max_distance 16 also clamps the farthest to the last
    t5_case("t5", 20260501, 128, False, False, 2, 20)
    t5_case("t5_sharded_bf16", 20260502, 16, True, True, 2, 24)
    # eos_token_id 2: transformers pools at argmax(ids) (the legacy CLIP
    # configs, Flux's clip-vit-large-patch14); else at the first eos
    clip_case("clip", 20260503, 2, 3, 16, False, False)
    # its tensors named as transformers 4 named them (text_model.*), in bf16
    clip_case("clip_eos_prefixed_bf16", 20260504, 100, 3, 16, True, True)


if __name__ == "__main__":
    main()
