#!/usr/bin/env python3
"""The tokenizers and text-encoder configs of make demo-flux
(scripts/demo/flux/{t5,clip}/), small ones over the demo's caption words, in
the forms Flux's real ones take, so that lib/tok runs the same code paths:

  t5/    a SentencePiece-style Unigram tokenizer.json as T5Tokenizer builds
         it (WhitespaceSplit + Metaspace, Unigram, "$A </s>", <pad> 0,
         </s> 1, <unk> 2): one piece per caption word, the letters besides
         so that other text still tokenizes; and a T5 v1.1 config.json
         (gated-gelu) with d_model 4096, flux-debug's context_in_dim.
  clip/  a CLIP-style byte-level BPE tokenizer.json (NFC, whitespace runs
         to one space, lowercase; CLIP's Split regex then ByteLevel; merges
         with the "</w>" suffix; <|startoftext|> ... <|endoftext|>, padded
         with <|endoftext|>), trained by HF tokenizers on the captions; and
         a CLIPTextModel config.json with hidden 768, flux-debug's vec_in_dim,
         whose eos_token_id is <|endoftext|>'s id (pooled at the first one).

The configs are one layer, narrow elsewhere; the weights are not committed:
build/demo/flux_encoders draws them at demo time.  Each tokenizer is checked
against transformers' T5TokenizerFast / CLIPTokenizerFast loading it.

    python3 scripts/demo_flux_tokenizers.py SHAPES.tar OUT_DIR
"""
import json
import math
import os
import sys
import tarfile
from collections import Counter

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, \
    processors, trainers

CLIP_SPLIT = (r"<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]"
              r"|[^\s\p{L}\p{N}]+")


def captions(path):
    out = []
    with tarfile.open(path) as t:
        for m in t:
            if m.name.endswith(".txt"):
                out.append(t.extractfile(m).read().decode())
    return out


def t5_tokenizer(caps):
    words = Counter(w for c in caps for w in c.split())
    total = sum(words.values())
    # Unigram scores are log probabilities: the words by frequency, then
    # single letters and digits well below any word so that a word is
    # always one piece.
    vocab = [["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0]]
    for w, n in sorted(words.items(), key=lambda kv: (-kv[1], kv[0])):
        vocab.append(["\u2581" + w, math.log(n / total)])
    vocab.append(["\u2581", -20.0])
    for ch in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,;:!?'-":
        vocab.append([ch, -25.0])
    special = lambda i, s: {"id": i, "content": s, "single_word": False, "lstrip": False,
                            "rstrip": False, "normalized": False, "special": True}
    meta = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
            "split": True}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [special(0, "<pad>"), special(1, "</s>"), special(2, "<unk>")],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence",
                          "pretokenizers": [{"type": "WhitespaceSplit"}, meta]},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "</s>", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 0}},
                     {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}},
        "decoder": meta,
        "model": {"type": "Unigram", "unk_id": 2, "vocab": vocab, "byte_fallback": False},
    }


def clip_tokenizer(caps):
    tok = Tokenizer(models.BPE(unk_token="<|endoftext|>", end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(CLIP_SPLIT), behavior="removed", invert=True),
         pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=4096, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  end_of_word_suffix="</w>", special_tokens=[])
    tok.train_from_iterator(caps, trainer)
    d = json.loads(tok.to_str())
    vocab = d["model"]["vocab"]
    # every byte may end a word: its "</w>" form, as CLIP's vocabulary has
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        if ch + "</w>" not in vocab:
            vocab[ch + "</w>"] = len(vocab)
    start, end = len(vocab), len(vocab) + 1
    vocab["<|startoftext|>"], vocab["<|endoftext|>"] = start, end
    special = lambda i, s: {"id": i, "content": s, "single_word": False, "lstrip": False,
                            "rstrip": False, "normalized": False, "special": True}
    d["added_tokens"] = [special(start, "<|startoftext|>"), special(end, "<|endoftext|>")]
    d["post_processor"] = {"type": "RobertaProcessing", "sep": ["<|endoftext|>", end],
                           "cls": ["<|startoftext|>", start], "trim_offsets": False,
                           "add_prefix_space": False}
    d["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True}
    return d, end


def write(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    caps, out = captions(sys.argv[1]), sys.argv[2]
    t5, (clip, clip_eos) = t5_tokenizer(caps), clip_tokenizer(caps)
    for sub in ("t5", "clip"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    write(os.path.join(out, "t5", "tokenizer.json"), t5)
    write(os.path.join(out, "t5", "tokenizer_config.json"), {
        "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>",
        "model_max_length": 512, "tokenizer_class": "T5Tokenizer"})
    write(os.path.join(out, "t5", "config.json"), {
        "architectures": ["T5EncoderModel"], "model_type": "t5",
        "vocab_size": len(t5["model"]["vocab"]), "d_model": 4096, "d_kv": 16,
        "num_heads": 4, "d_ff": 64, "num_layers": 1, "feed_forward_proj": "gated-gelu",
        "is_gated_act": True, "dense_act_fn": "gelu_new",
        "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
        "layer_norm_epsilon": 1e-6, "tie_word_embeddings": False, "torch_dtype": "float32"})
    write(os.path.join(out, "clip", "tokenizer.json"), clip)
    write(os.path.join(out, "clip", "tokenizer_config.json"), {
        "bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>", "unk_token": "<|endoftext|>", "model_max_length": 77,
        "tokenizer_class": "CLIPTokenizer"})
    write(os.path.join(out, "clip", "config.json"), {
        "architectures": ["CLIPTextModel"], "model_type": "clip_text_model",
        "vocab_size": len(clip["model"]["vocab"]), "hidden_size": 768,
        "intermediate_size": 128, "num_attention_heads": 12, "num_hidden_layers": 1,
        "max_position_embeddings": 77, "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5,
        "bos_token_id": clip_eos - 1, "eos_token_id": clip_eos, "pad_token_id": clip_eos,
        "projection_dim": 768, "torch_dtype": "float32"})
    check(out, caps)


def check(out, caps):
    """transformers' fast tokenizers on the written files, as FluxTokenizer
    calls them (truncation, max_length padding)."""
    from transformers import CLIPTokenizerFast, T5TokenizerFast
    t5 = T5TokenizerFast(tokenizer_file=os.path.join(out, "t5", "tokenizer.json"),
                         eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
                         extra_ids=0)
    clip = CLIPTokenizerFast(tokenizer_file=os.path.join(out, "clip", "tokenizer.json"),
                             bos_token="<|startoftext|>", eos_token="<|endoftext|>",
                             pad_token="<|endoftext|>", unk_token="<|endoftext|>")
    for c in sorted(set(caps))[:3] + ["A Red CIRCLE, at the top!"]:
        a = t5(c, truncation=True, max_length=32, padding="max_length")["input_ids"]
        b = clip(c, truncation=True, max_length=77, padding="max_length")["input_ids"]
        print(repr(c), a[:12], b[:12], file=sys.stderr)


if __name__ == "__main__":
    main()
