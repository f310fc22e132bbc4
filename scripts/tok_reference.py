#!/usr/bin/env python3
"""Reference token ids for tests/tok/test_tok_corpus, from HF tokenizers and tiktoken.

    $PYTHON scripts/tok_reference.py                 write tests/tok/ref/*.bin.zst
    $PYTHON scripts/tok_reference.py --show TOK CORPUS DOC   print one document's ids
    $PYTHON scripts/tok_reference.py --text TOK < file       ids of stdin's text
    $PYTHON scripts/tok_reference.py --vectors > tests/tok/tok_vectors.h
                                   tricky strings' ids, for tests/tok/test_tok.c

TOK is a folder under ../shared/fixtures/tokenizers/ (llama3_1, qwen3, torchtitan_test:
HF tokenizer.json, encoded with add_special_tokens=False; llama3_tiktoken, cl100k_base,
o200k_base: tiktoken encode_ordinary with the encoding's regex and specials).  CORPUS
is en or multi (../shared/fixtures/corpus/CORPUS.jsonl).

Reference file format (little-endian), compressed with zstd: "TTKREF1\\0", u32 number
of documents, the corpus file's SHA-256 (32 bytes), then per document u32 id count and
the first 4 bytes of SHA-256(ids as int32 little-endian).  Needs tokenizers, tiktoken,
numpy and the zstd program.
"""
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.environ.get("TITAN_FIXTURES", os.path.join(ROOT, "..", "shared", "fixtures"))
HF = ["llama3_1", "qwen3", "torchtitan_test"]
TT = ["llama3_tiktoken", "cl100k_base", "o200k_base"]
CORPORA = ["en", "multi"]

LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def llama3_specials():
    """Meta's llama3 tokenizer.py: 256 specials after the 128,000 ranks."""
    first = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
             "<|reserved_special_token_1|>", "<|reserved_special_token_2|>",
             "<|reserved_special_token_3|>", "<|start_header_id|>", "<|end_header_id|>",
             "<|reserved_special_token_4|>", "<|eot_id|>"]
    names = first + [f"<|reserved_special_token_{i}|>" for i in range(5, 251)]
    return {n: 128000 + i for i, n in enumerate(names)}


def load(name):
    """Returns a function: list of str -> list of lists of ids."""
    path = os.path.join(FIX, "tokenizers", name)
    if name in HF:
        from tokenizers import Tokenizer
        t = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
        return lambda texts: [e.ids for e in t.encode_batch(texts, add_special_tokens=False)]
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    if name == "llama3_tiktoken":
        ranks = load_tiktoken_bpe(os.path.join(path, "tokenizer.model"))
        enc = tiktoken.Encoding("llama3", pat_str=LLAMA3_PAT, mergeable_ranks=ranks,
                                special_tokens=llama3_specials())
    else:
        from tiktoken_ext import openai_public
        import tiktoken.load
        real = tiktoken.load.load_tiktoken_bpe
        local = os.path.join(path, name + ".tiktoken")
        # The constructor names a URL; read the fixture instead (same hash).
        openai_public.load_tiktoken_bpe = lambda url, expected_hash=None: real(local, expected_hash)
        spec = getattr(openai_public, name)()
        enc = tiktoken.Encoding(**spec)
    return lambda texts: enc.encode_ordinary_batch(texts, num_threads=2)


def texts_of(corpus):
    path = os.path.join(FIX, "corpus", corpus + ".jsonl")
    with open(path, encoding="utf-8") as f:
        return path, [json.loads(line)["text"] for line in f if line.strip()]


def digest(ids):
    return hashlib.sha256(np.asarray(ids, dtype="<i4").tobytes()).digest()[:4]


def write_all(names):
    out_dir = os.path.join(ROOT, "tests", "tok", "ref")
    os.makedirs(out_dir, exist_ok=True)
    for corpus in CORPORA:
        path, texts = texts_of(corpus)
        with open(path, "rb") as f:
            sha = hashlib.sha256(f.read()).digest()
        for name in names:
            encode = load(name)
            parts = [b"TTKREF1\0", struct.pack("<I", len(texts)), sha]
            for i in range(0, len(texts), 4096):
                for ids in encode(texts[i:i + 4096]):
                    parts.append(struct.pack("<I", len(ids)) + digest(ids))
            raw = b"".join(parts)
            dst = os.path.join(out_dir, f"{name}.{corpus}.bin.zst")
            with tempfile.NamedTemporaryFile(delete=False) as tmp:
                tmp.write(raw)
            subprocess.run(["zstd", "-q", "-f", "-19", tmp.name, "-o", dst], check=True)
            os.unlink(tmp.name)
            os.chmod(dst, 0o644)
            print(f"{dst}: {len(texts)} documents", file=sys.stderr)


# Strings that exercise the regex traps: case-insensitive contractions (and
# U+017F, which folds to s), whitespace runs, marks, numbers of other scripts,
# NUL, o200k's case classes, long runs, and text that NFC changes.
VECTORS = {
    "contractions": "I'M he'S she'\u017f we'RE 'll 'Ll 've x'D ''s",
    "spaces": "a  \t b\u00a0\u00a0c \u3000d\r\n\r\n  \n x   ",
    "marks": "e\u0301 \u0301abc 1\u0301 \u01c4x \u02b0a",
    "numbers": "12345 \u0663\u0664\u0665\u0666 \u216b 1.5 x99y",
    "nul": "a\u0000b \u0000\u0000 c",
    "cases": "HelloWorld ABCdef aBC'S \u00c0\u00c9\u00ce/path//x \u0301\u0301a",
    "long": "a" * 300 + " " + "\u2500" * 100,
    "nfc": "Cafe\u0301 na\u0308ive \u1100\u1161\u11a8 \u212b",
    "specials": "<|endoftext|> <|begin_of_text|>x<|eot_id|><|im_end|>",
    "nel": "a\u0085b \u0085\u0085 c\u2028d \u180e e",
}


def c_string(b):
    out = []
    for x in b:
        if 32 <= x < 127 and chr(x) not in '"\\?':
            out.append(chr(x))
        else:
            out.append("\\%03o" % x)
    return '"' + "".join(out) + '"'


def write_vectors():
    print("/* Generated by scripts/tok_reference.py --vectors (HF tokenizers, tiktoken). */")
    print("static const struct tok_vector {\n\tconst char *tokenizer, *name, *text;\n"
          "\tsize_t len;\n\tint n;\n\tconst int32_t *ids;\n} tok_vectors[] = {")
    for name in HF + TT:
        enc = load(name)
        for key, text in VECTORS.items():
            b = text.encode("utf-8")
            ids = enc([text])[0]
            print("\t{%s, %s, %s, %d, %d, (const int32_t[]){%s}}," % (
                c_string(name.encode()), c_string(key.encode()), c_string(b), len(b),
                len(ids), ", ".join(map(str, ids)) or "0"))
    print("};")


def main():
    args = sys.argv[1:]
    if args and args[0] == "--show":
        _, texts = texts_of(args[2])
        print(" ".join(map(str, load(args[1])([texts[int(args[3])]])[0])))
    elif args and args[0] == "--vectors":
        write_vectors()
    elif args and args[0] == "--text":
        text = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
        print(" ".join(map(str, load(args[1])([text])[0])))
    else:
        write_all(args or HF + TT)


if __name__ == "__main__":
    main()
