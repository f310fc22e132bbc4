#!/usr/bin/env python3
"""The reference side of scripts/bench/tokenize_process.sh: a one-thread Python
program doing titan-tokenize's job with tiktoken.  It loads a tiktoken file (Meta's
Llama 3 tokenizer.model, or cl100k_base), reads a JSON Lines corpus, encodes each
document's text with BOS and EOS when the encoding has them, and writes the ids to
stdout as little-endian uint32s.

    $PYTHON scripts/tok_bench_process.py TOKENIZER_FILE CORPUS.jsonl > ids.bin
"""
import array
import json
import os
import sys

import tiktoken
from tiktoken.load import load_tiktoken_bpe

LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def main():
    ranks = load_tiktoken_bpe(sys.argv[1])
    llama = len(ranks) == 128000
    specials = {"<|begin_of_text|>": 128000, "<|end_of_text|>": 128001} if llama else \
        {"<|endoftext|>": 100257}
    enc = tiktoken.Encoding(os.path.basename(sys.argv[1]), pat_str=LLAMA3_PAT,
                            mergeable_ranks=ranks, special_tokens=specials)
    head = [128000] if llama else []
    tail = [128001] if llama else [100257]
    out = sys.stdout.buffer
    with open(sys.argv[2], encoding="utf-8") as f:
        for line in f:
            ids = enc.encode_ordinary(json.loads(line)["text"])
            out.write(array.array("I", head + ids + tail).tobytes())


if __name__ == "__main__":
    main()
