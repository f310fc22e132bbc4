#!/usr/bin/env python3
"""Reference token ids for tests/tok/test_tok_corpus, from HF tokenizers and tiktoken.

    $PYTHON scripts/tok_reference.py                 write tests/tok/ref/*.zst
    $PYTHON scripts/tok_reference.py --show TOK CORPUS.jsonl DOC   one document's ids
    $PYTHON scripts/tok_reference.py --text TOK < file       ids of stdin's text
    $PYTHON scripts/tok_reference.py --vectors > tests/tok/tok_vectors.h
                                   tricky strings' ids, for tests/tok/test_tok.c

TOK is a folder under the fixtures' tokenizers/ (llama3_1, qwen3, torchtitan_test: HF
tokenizer.json loaded as torchtitan 0.2.2's HuggingFaceTokenizer loads its folder, so
the tokens tokenizer_config.json names are special added tokens, and encoded with
add_special_tokens=False; llama3_tiktoken, cl100k_base, o200k_base: tiktoken
encode_ordinary with the encoding's regex and specials).  Fixtures are looked for in
$TITAN_FIXTURES (default ../shared/fixtures), then build/fixtures (make fixtures).

The corpus references are keyed by document text, so that they hold for any build of
the corpus: every en and multi corpus found in those folders (../shared's and the one
scripts/fixtures_corpus.py builds from Debian packages) is read, and each distinct
document text is one entry.  Files (little-endian, compressed with zstd):
  ref/CORPUS.keys.zst      "TTKKEY1\\0", u32 n, n keys of 8 bytes (the first bytes of
                           SHA-256 of the text as UTF-8), ascending
  ref/TOK.CORPUS.bin.zst   "TTKREF2\\0", u32 n, SHA-256 of the uncompressed key file,
                           then per key u32 id count and the first 4 bytes of
                           SHA-256(ids as int32 little-endian)
Needs tokenizers, tiktoken, torchtitan, numpy and the zstd program.
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
FIX_DIRS = [os.environ.get("TITAN_FIXTURES", os.path.join(ROOT, "..", "shared", "fixtures")),
            os.path.join(ROOT, "build", "fixtures")]


def fixture(rel):
    """The first fixture folder's rel that exists."""
    for d in FIX_DIRS:
        if os.path.exists(os.path.join(d, rel)):
            return os.path.join(d, rel)
    sys.exit(f"tok_reference.py: no fixture {rel} in {FIX_DIRS} (make fixtures)")


def hf_tokenizer(path):
    """tokenizers.Tokenizer of a folder, loaded by torchtitan 0.2.2's HuggingFaceTokenizer
    (titan loads a folder the same way: tokenizer_config.json's tokens are specials)."""
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    return HuggingFaceTokenizer(path).tokenizer
HF = ["llama3_1", "qwen3", "torchtitan_test"]
# A self-made tokenizer in the repository (scripts/tok_make_deepseek_like.py).
LOCAL = {"deepseek_like": os.path.join(ROOT, "tests", "tok", "deepseek_like")}
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
    path = LOCAL.get(name) or fixture(os.path.join("tokenizers", name))
    if name in HF or name in LOCAL:
        t = hf_tokenizer(path)
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


def texts_of(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def corpus_texts(corpus):
    """Every distinct document text of every build of the corpus, by key."""
    by_key = {}
    for d in FIX_DIRS:
        path = os.path.join(d, "corpus", corpus + ".jsonl")
        if not os.path.exists(path):
            continue
        texts = texts_of(path)
        for t in texts:
            by_key.setdefault(hashlib.sha256(t.encode("utf-8")).digest()[:8], t)
        print(f"{path}: {len(texts)} documents", file=sys.stderr)
    if not by_key:
        sys.exit(f"tok_reference.py: no corpus/{corpus}.jsonl in {FIX_DIRS}")
    return [by_key[k] for k in sorted(by_key)], sorted(by_key)


def digest(ids):
    return hashlib.sha256(np.asarray(ids, dtype="<i4").tobytes()).digest()[:4]


def write_zst(raw, dst):
    with tempfile.NamedTemporaryFile(delete=False) as tmp:
        tmp.write(raw)
    subprocess.run(["zstd", "-q", "-f", "-19", tmp.name, "-o", dst], check=True)
    os.unlink(tmp.name)
    os.chmod(dst, 0o644)


def write_all(names):
    out_dir = os.path.join(ROOT, "tests", "tok", "ref")
    os.makedirs(out_dir, exist_ok=True)
    for corpus in CORPORA:
        texts, keys = corpus_texts(corpus)
        key_raw = b"TTKKEY1\0" + struct.pack("<I", len(keys)) + b"".join(keys)
        write_zst(key_raw, os.path.join(out_dir, f"{corpus}.keys.zst"))
        key_sha = hashlib.sha256(key_raw).digest()
        for name in names:
            encode = load(name)
            parts = [b"TTKREF2\0", struct.pack("<I", len(texts)), key_sha]
            for i in range(0, len(texts), 4096):
                for ids in encode(texts[i:i + 4096]):
                    parts.append(struct.pack("<I", len(ids)) + digest(ids))
            dst = os.path.join(out_dir, f"{name}.{corpus}.bin.zst")
            write_zst(b"".join(parts), dst)
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
    # Letters new in Unicode 15 (Kawi, Nag Mundari) and 16 (Tulu-Tigalari): the
    # references' tables know them; PCRE2's (Unicode 14) do not.
    "unicode16": "\U00011380's \U00011f04's \U0001e4d0's x\U00011380y",
    "cjk": "<\uff5cbegin\u2581of\u2581sentence\uff5c>\u6f22\u5b57\u304b\u306a\u30ab\u30ca123 "
           "the 12345 \u4e00\u4e8c\u4e09 in,the .Hello's (x)\r\n\r\n  ab\u0301c \u00bd!!",
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
    for name in HF + TT + list(LOCAL):
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
        texts = texts_of(args[2])
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
