#!/usr/bin/env python3
"""Reference ids for titan-tokenize's BPE trainer, from HF tokenizers.

Trains a ByteLevel BPE with HF tokenizers' BpeTrainer on a fixed slice of the
shared corpus fixture, the way `titan-tokenize train` does (Llama 3 or GPT-2
pre-tokenizer, the 256 ByteLevel symbols as initial alphabet, the given special
tokens first), then encodes a held-out slice and prints its ids, one document
per line, BOS first.  tests/tokenize/train.sh compares titan's ids with the
committed output for the corpus file it finds, by the first 16 hex digits of
the corpus file's SHA-256 (SHA below):

    $PYTHON scripts/tokenize_train_reference.py en.jsonl --held-out 20000:20030 \
        > tests/tokenize/train_ref/llama3.SHA.ids
    $PYTHON scripts/tokenize_train_reference.py multi.jsonl --pre-tokenizer gpt2 \
        --vocab-size 1500 --min-frequency 3 --train 0:3000 --held-out 30000:30030 \
        > tests/tokenize/train_ref/gpt2.SHA.ids

    options: [--pre-tokenizer llama3|gpt2] [--vocab-size N] [--min-frequency K]
        [--train A:B] [--held-out A:B] [--save DIR]

A:B are line ranges of the JSONL file (0-based, end excluded).  --save writes
HF's own tokenizer.json to DIR for a side-by-side look.
"""
import argparse
import json
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"


def line_range(s):
    a, b = s.split(":")
    return int(a), int(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("--pre-tokenizer", default="llama3", choices=["llama3", "gpt2"])
    ap.add_argument("--vocab-size", type=int, default=2000)
    ap.add_argument("--min-frequency", type=int, default=0)
    ap.add_argument("--train", type=line_range, default=(0, 2000))
    ap.add_argument("--held-out", type=line_range, default=(20000, 20100))
    ap.add_argument("--save")
    a = ap.parse_args()

    with open(a.corpus, encoding="utf-8") as f:
        lines = f.readlines()
    train = [json.loads(l)["text"] for l in lines[a.train[0]:a.train[1]]]
    held = [json.loads(l)["text"] for l in lines[a.held_out[0]:a.held_out[1]]]

    tok = Tokenizer(models.BPE())
    if a.pre_tokenizer == "llama3":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=a.vocab_size, min_frequency=a.min_frequency, show_progress=False,
        special_tokens=[BOS, EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(train, trainer=trainer)
    bos = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS}:1 $B:1", special_tokens=[(BOS, bos)])
    if a.save:
        tok.save(a.save + "/tokenizer.json")
    for text in held:
        print(" ".join(map(str, tok.encode(text).ids)))
    print(f"# vocab {tok.get_vocab_size()}, pre-tokenizer {a.pre_tokenizer}", file=sys.stderr)


if __name__ == "__main__":
    main()
