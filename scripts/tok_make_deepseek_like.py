#!/usr/bin/env python3
"""Write tests/tok/deepseek_like/tokenizer.json: a small self-made ByteLevel BPE
tokenizer with a pre-tokenizer in DeepSeek V3's style (three Isolated Splits:
numbers, CJK runs, a punctuation/letter/mark pattern with \\p{P} \\p{S} \\p{M};
then ByteLevel), a non-ASCII special token and merges as pairs.  It exercises
the PCRE2 path with several splits against HF tokenizers (scripts/tok_reference.py
--vectors encodes tests/tok/tok_vectors.h's strings with it)."""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def byte_chars():
    """GPT-2's bytes_to_unicode."""
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def main():
    b2u = byte_chars()
    vocab = {b2u[b]: b for b in range(256)}
    merges = []

    def bl(s):
        return "".join(b2u[x] for x in s.encode())

    def add(a, b):
        vocab.setdefault(a + b, len(vocab))
        merges.append([a, b])

    yi = bl("\u4e00")
    for a, b in [("t", "h"), ("th", "e"), (bl(" "), "the"), ("i", "n"), (bl(" "), "in"),
                 ("1", "2"), ("12", "3"), (yi[0], yi[1]), (yi[:2], yi[2]), (bl(","), bl(" ")),
                 ("e", "r"), (bl(" "), "t")]:
        add(a, b)
    split = lambda rx: {"type": "Split", "pattern": {"Regex": rx}, "behavior": "Isolated",
                        "invert": False}
    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": len(vocab), "content": "<\uff5cbegin\u2581of\u2581sentence\uff5c>",
                          "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            split("\\p{N}{1,3}"),
            split("[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"),
            split("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|"
                  "[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|"
                  "\\s*[\r\n]+|\\s+(?!\\S)|\\s+"),
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges}}
    out = os.path.join(ROOT, "tests", "tok", "deepseek_like")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(os.path.join(out, "tokenizer.json"), file=sys.stderr)


if __name__ == "__main__":
    main()
