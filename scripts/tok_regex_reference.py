#!/usr/bin/env python3
"""Reference splits for tests/tok/test_tok_regex.c, from HF tokenizers' regex engine.

    UD=/tmp/ud pip install --target $UD/15.0 unicodedata2==15.0.0   (and 15.1, 16.0)
    UNICODEDATA2_DIRS=$UD/15.0:$UD/15.1:$UD/16.0 $PYTHON scripts/tok_regex_reference.py \\
        > tests/tok/regex_vectors.h

The text holds, for every general category, characters that Unicode 15.0, 15.1
and 16.0 assigned with that category (the first, a middle and the last of each
version; unicodedata2 of each version tells them apart, the interpreter's own
unicodedata must be Unicode 14.0), the characters whose category changed since
14.0, the case pairs new since 14.0, and ASCII around them.  Each regex below
(general categories, the classes and anchors whose meaning differs between
Oniguruma and PCRE2, real tokenizers' pre-tokenizer regexes) is run by HF
tokenizers' Split pre-tokenizer (behavior Isolated, the regex engine HF runs for a
tokenizer.json) on the text, and the byte offsets where its pieces end are written
out.  titan's PCRE2 path must cut the text at the same offsets.
"""
import importlib.util
import os
import sys
import unicodedata as ud14

from tokenizers import Regex, pre_tokenizers

GC = ["Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe",
      "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn"]
LONG = ["Letter", "Mark", "Number", "Punctuation", "Symbol", "Separator", "Other", "LC",
        "Uppercase_Letter", "decimal number", "Any", "Assigned", "ASCII", "Word", "Space"]
FOLD_NEW = [(0x19B, 0xA7DC), (0x264, 0xA7CB), (0x1C89, 0x1C8A), (0xA7CC, 0xA7CD),
            (0xA7DA, 0xA7DB), (0x10D50, 0x10D70), (0x10D65, 0x10D85)]

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
O200K = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
         r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
         r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
DEEPSEEK = r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

REGEXES = (
    [r"\p{%s}+" % g for g in GC] + [r"\P{%s}+" % g for g in GC] +
    [r"[^\p{%s}\s]+" % g for g in GC] + [r"\p{%s}+" % n for n in LONG] +
    [r"\pL+", r"\p{^N}+", r"[\p{L}&&[^\p{Lu}]]+", r"[x[\p{N}\p{Mn}]]+",
     r"\w+", r"\W+", r"\d+", r"\D+", r"\s+", r"\S+", r"\h+", r"\H+", r"\b\p{L}", r"\B\p{L}",
     r"[[:punct:]]+", r"[[:space:]]+", r"[[:digit:]]+", r"[[:word:]]+", r"[[:graph:]]+",
     r"[[:print:]]+", r"[[:cntrl:]]+", r"[[:blank:]]+", r"[[:xdigit:]]+", r"[[:^space:]]+",
     r"^\p{L}+", r"\p{L}+$", r".+", r"(?m).+", r"\p{L}{,2}", r"\u00e9+|\x{1FAE8}",
     r"(?i)\p{Lu}+", r"(?i)\P{Lu}+", r"(?i)[\p{Lu}]+", r"(?i)[^\p{Ll}\s]+", r"(?i:ab)+",
     r"[\x{1F000}-\x{1FFFF}]+", r"\v|\t"] +
    [r"(?i)\x{%X}+" % a for a, _ in FOLD_NEW] + [r"(?i)[\x{%X}]+" % b for _, b in FOLD_NEW] +
    [r"(?i)[^\x{%X}\s]+" % a for a, _ in FOLD_NEW] +
    [LLAMA3, O200K, GPT2, DEEPSEEK])


def load_ud(path):
    spec = importlib.util.spec_from_file_location(
        "unicodedata2", [os.path.join(path, f) for f in os.listdir(path) if f.endswith(".so")][0])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def sample_chars():
    if ud14.unidata_version != "14.0.0":
        sys.exit("tok_regex_reference.py: the interpreter's unicodedata must be Unicode 14.0.0")
    versions = [load_ud(p) for p in os.environ["UNICODEDATA2_DIRS"].split(":")]
    names = [v.unidata_version for v in versions]
    if names != ["15.0.0", "15.1.0", "16.0.0"]:
        sys.exit(f"tok_regex_reference.py: want unicodedata2 15.0.0, 15.1.0, 16.0.0, got {names}")
    chars = set()
    prev = ud14
    for v in versions:
        for g in GC:
            new = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000 and
                   v.category(chr(c)) == g and prev.category(chr(c)) == "Cn"]
            if new:
                chars.update([new[0], new[len(new) // 2], new[-1]])
        prev = v
    last = versions[-1]
    changed = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000 and
               ud14.category(chr(c)) not in ("Cn", last.category(chr(c)))]
    chars.update(changed)
    for a, b in FOLD_NEW:
        chars.update([a, b])
    return sorted(chars), len(changed)


def make_text(chars):
    parts = ["Ab1 ", "x'S  \t\n"]
    for i, c in enumerate(chars):
        parts.append(chr(c) + chr(c) + "a" + chr(c) + "7 " + ("\n" if i % 7 == 6 else ""))
    parts.append("\u00e9\u0301 \x0b_9\r\n")
    return "".join(parts)


def c_string(b):
    out = []
    for x in b:
        out.append(chr(x) if 32 <= x < 127 and chr(x) not in '"\\?' else "\\%03o" % x)
    return '"' + "".join(out) + '"'


def main():
    chars, n_changed = sample_chars()
    text = make_text(chars)
    tb = text.encode("utf-8")
    # byte offset of each character offset
    off = [0]
    for ch in text:
        off.append(off[-1] + len(ch.encode("utf-8")))
    print("/* Generated by scripts/tok_regex_reference.py (HF tokenizers' regex engine): "
          "%d characters new in Unicode 15.0, 15.1 and 16.0 or recategorised since 14.0 "
          "(%d), for every general category. */" % (len(chars), n_changed))
    print("static const char regex_text[] = %s;" % c_string(tb))
    print("static const struct regex_vector {\n\tconst char *regex;\n\tint n;\n"
          "\tconst uint32_t *ends;\n} regex_vectors[] = {")
    for r in REGEXES:
        pt = pre_tokenizers.Split(Regex(r), behavior="isolated")
        ends = [off[e] for _, (s, e) in pt.pre_tokenize_str(text)]
        print("\t{%s, %d, (const uint32_t[]){%s}}," % (
            c_string(r.encode("utf-8")), len(ends), ", ".join(map(str, ends))))
    print("};")


if __name__ == "__main__":
    main()
