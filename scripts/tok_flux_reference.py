#!/usr/bin/env python3
"""Reference ids for Flux's text-encoder tokenizers (tests/tok/flux/), made the
way torchtitan 0.3.0 makes them: torchtitan.models.flux.tokenizer.FluxTokenizer,
i.e. transformers' CLIPTokenizer / T5Tokenizer called with truncation=True,
max_length=N, padding="max_length".

    PYTHONPATH=<torchtitan 0.3.0> python3 scripts/tok_flux_reference.py t5-json SPM_DIR OUT_DIR
        OUT_DIR/tokenizer.json (+ tokenizer_config.json): what T5Tokenizer builds
        from SPM_DIR/spiece.model when a checkpoint has no tokenizer.json (as
        google/t5-v1_1-xxl has none): Precompiled normalizer, WhitespaceSplit +
        Metaspace, Unigram, "$A </s>".  Makes the committed
        tests/tok/fixtures/tokenizers/sentencepiece_unigram/ from ALBERT's
        spiece.model (../shared/fixtures/tokenizers/sentencepiece_unigram/).

    PYTHONPATH=<torchtitan 0.3.0> python3 scripts/tok_flux_reference.py goldens FIXTURES OUT_DIR
        OUT_DIR/captions.jsonl: the corpus (torchtitan's cc12m test captions
        when FIXTURES has them, and generated captions: accents composed and
        not, CJK, emoji sequences, scripts with conjuncts, whitespace runs and
        controls, special tokens' text, case, long lines for truncation, empty);
        OUT_DIR/clip.ref (CLIP ViT-L/14, 77) and OUT_DIR/t5_unigram.ref (the
        T5 path on ALBERT's Unigram model, 256 = max_t5_encoding_len):
        per caption the ids up to the padding (the attention mask's ones);
        With FIXTURES/tokenizers/t5_v1_1_xxl/spiece.model (google/t5-v1_1-xxl's,
        from the Hub), also FIXTURES/tokenizers/t5_v1_1_xxl/tokenizer.json and
        OUT_DIR/t5_v1_1_xxl.ref, which test_tok_flux then checks.

    PYTHONPATH=DIR python3 scripts/tok_flux_reference.py graphemes OUT_DIR
        OUT_DIR/graphemes.ref: extended grapheme clusters of generated strings
        (the regex module's \\X at Unicode 16.0.0, which transformers cannot
        import beside it: pip install --target DIR regex==2024.11.6), for
        lib/unicode.

Each reference is checked against HF tokenizers run alone on the written
tokenizer.json (Tokenizer.from_file with the same truncation and padding):
the script says how many captions differ (none is expected).
"""
import json
import os
import random
import sys
import shutil
import tarfile
import tempfile

CLIP_LEN = 77
T5_LEN = 256  # torchtitan's flux_debugmodel / flux_schnell max_t5_encoding_len


def t5_json(spm_dir, out_dir):
    from transformers import T5Tokenizer
    tok = T5Tokenizer.from_pretrained(spm_dir)
    tok.save_pretrained(out_dir)
    # Only what a load reads: the paths of this machine stay out.
    cfg_path = os.path.join(out_dir, "tokenizer_config.json")
    cfg = json.load(open(cfg_path))
    for key in ("is_local", "local_files_only", "name_or_path"):
        cfg.pop(key, None)
    json.dump(cfg, open(cfg_path, "w"), indent=2, ensure_ascii=False)
    open(cfg_path, "a").write("\n")


def cc12m_captions(fixtures):
    path = os.path.join(fixtures, "torchtitan_assets/cc12m_test/cc12m-train-0000.tar")
    if not os.path.exists(path):
        return []
    out = []
    with tarfile.open(path) as tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            if m.name.endswith(".txt"):
                out.append(tar.extractfile(m).read().decode("utf-8"))
    return out


HAND = [
    "", " ", "   ", "\t\n", "a photo of a cat, 2024!", "A PHOTO OF A CAT", "Hello  world",
    "  leading and trailing  ", "tab\tseparated\tcaption", "line one\nline two\r\nline three",
    "café au lait", "cafe\u0301 au lait", "A\u030a and \u00c5", "Ａ\u0301 fullwidth with accent",
    "ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ ①②③ ⅫⅣ x² H₂O", "ﬁne ﬂour ﬀ ㎏ ㍿ ™ ℃ ½ ¼",
    "東京タワーの夜景、美しい。", "北京烤鸭 and 上海 skyline", "ﾊﾞﾅﾅ ｶﾀｶﾅ", "한국어 문장입니다", "\u1100\u1161\u11a8 jamo",
    "ภาษาไทยสวยงาม", "हिन्दी में क्षत्रिय और क्\u200dष", "ক্ষ বাংলা", "العربية جميلة", "עברית",
    "Ελληνικά ΣΊΣΥΦΟΣ", "İstanbul ıi İI", "Straße GROẞE", "Русский текст ЁЖИК",
    "emoji 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇩🇪 🏳️‍🌈 ❤️", "ZWJ\u200d and ZWNJ\u200c and\u200bZWSP",
    "nbsp\u00a0here and\u3000ideographic space", "soft\u00adhyphen", "control\x01\x02\x1f chars\x7f",
    "</s> <pad> <unk> <extra_id_0> <extra_id_99>", "<|startoftext|>hi<|endoftext|>",
    "<|ENDOFTEXT|> shouted", "don't it's we'll I'M THEY'RE you've", "''quotes'' ``ticks``",
    "https://example.com/path?q=1&x=y#frag", "email@example.org", "3.14159 1,000,000 -42 1e10",
    "!!!??? ... --- *** ### $$$", "C++ and C# and F#", "snake_case camelCase kebab-case",
    "\u0301 leading combining", "a\u0308\u0301\u0323 stacked", "\U0001e5ee unicode 16 mark",
    "ª\u0897 ª\u0301 \r\n", "Σ final sigma ΟΔΟΣ", "\u2581 already metaspace \u2581\u2581",
    "x" * 300, ("word " * 400).strip(), ("長い文章です。" * 80),
    "A red fox jumping over a lazy dog in a snowy forest at dawn, cinematic lighting, 8k, "
    "highly detailed, trending on artstation, by Greg Rutkowski and Alphonse Mucha " * 6,
]

POOL = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,!?'-\"()") +
        list("éèêëàâäöüñçÉÀÖÜßøåæœ") + ["e\u0301", "a\u0308", "o\u0302\u0323"] +
        list("的一是不了人我在有他这中大来上国個東京日本語한국어ภาษาไทยहिन्दीक्ष") +
        ["😀", "👍🏽", "👨‍👩‍👧", "🇯🇵", "❤️", "\u200d", "\u200b"] +
        list("ＡＢＣａｂｃ１２３①②ⅣⅫ²₂ﬁﬂ™½") + [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000"] +
        ["</s>", "<pad>", "<|endoftext|>", "<extra_id_5>", "İ", "Σ", "ẞ", "\u2581"])


def generated(n, seed):
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        k = rnd.choice([1, 3, 8, 20, 60, 150])
        out.append("".join(rnd.choice(POOL) for _ in range(k)))
    return out


def corpus(fixtures):
    return cc12m_captions(fixtures) + HAND + generated(240, 20260512)


def flux_tokenizer(path, max_length):
    from torchtitan.models.flux.tokenizer import FluxTokenizer
    return FluxTokenizer(path, max_length=max_length)


def reference_rows(tok, texts, max_length, json_path):
    """Per text: the ids under the attention mask, and the number of texts on
    which HF tokenizers alone (json_path) disagrees."""
    from tokenizers import Tokenizer
    enc = tok._tokenizer(texts, truncation=True, max_length=max_length, padding="max_length")
    flux = tok.encode(texts).tolist()  # what torchtitan's dataloader gets
    plain = Tokenizer.from_file(json_path)
    plain.enable_truncation(max_length)
    plain.enable_padding(length=max_length, pad_id=tok._tokenizer.pad_token_id)
    rows, bad = [], 0
    for i, text in enumerate(texts):
        ids, mask = enc["input_ids"][i], enc["attention_mask"][i]
        assert ids == flux[i] and len(ids) == max_length
        n = sum(mask)
        assert mask == [1] * n + [0] * (max_length - n)
        rows.append(ids[:n])
        bad += plain.encode(text).ids != ids
    return rows, bad


def write_ref(path, rows, max_length, pad_id):
    with open(path, "w") as f:
        f.write("# max_length %d pad_id %d: per caption, the ids under the mask\n" %
                (max_length, pad_id))
        for r in rows:
            f.write(" ".join(map(str, r)) + "\n")


def graphemes(out_dir):
    import regex
    if not regex.match(r"\p{Mn}", "\u0897") or not regex.match(r"\p{Cn}", "\U00016EA0"):
        sys.exit("tok_flux_reference.py: graphemes need regex at Unicode 16.0.0 "
                 "(regex==2024.11.6 on PYTHONPATH)")
    rnd = random.Random(7)
    cps = [0x0d, 0x0a, 0x01, 0x41, 0x301, 0x200d, 0x1f1e6, 0x1f1eb, 0x600, 0x903, 0x1100,
           0x1161, 0x11a8, 0xac00, 0xac01, 0x1f600, 0x1f3fd, 0x2764, 0xfe0f, 0x915, 0x94d,
           0x937, 0x93c, 0x995, 0x9cd, 0xe01, 0xe33, 0x20, 0x897, 0xaa]
    lines = []
    for _ in range(400):
        s = "".join(chr(rnd.choice(cps)) for _ in range(rnd.randint(1, 12)))
        ends, pos = [], 0
        for m in regex.finditer(r"\X", s):
            pos += len(m.group().encode())
            ends.append(pos)
        lines.append(s.encode().hex() + " " + " ".join(map(str, ends)))
    with open(os.path.join(out_dir, "graphemes.ref"), "w") as f:
        f.write("# UTF-8 hex, then each extended grapheme cluster's end offset\n")
        f.write("\n".join(lines) + "\n")


def goldens(fixtures, out_dir):
    texts = corpus(fixtures)
    with open(os.path.join(out_dir, "captions.jsonl"), "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    clip_dir = os.path.join(fixtures, "tokenizers/clip_vit_l14")
    clip = flux_tokenizer(clip_dir, CLIP_LEN)
    rows, bad = reference_rows(clip, texts, CLIP_LEN, os.path.join(clip_dir, "tokenizer.json"))
    write_ref(os.path.join(out_dir, "clip.ref"), rows, CLIP_LEN, clip._tokenizer.pad_token_id)
    print(f"clip: {len(texts)} captions, {bad} differ between transformers and tokenizers alone")
    spm = {"t5_unigram": os.path.join(fixtures, "tokenizers/sentencepiece_unigram"),
           "t5_v1_1_xxl": os.path.join(fixtures, "tokenizers/t5_v1_1_xxl")}
    for name, d in spm.items():
        if not os.path.exists(os.path.join(d, "spiece.model")):
            print(f"{name}: no {d}/spiece.model, skipped")
            continue
        tmp = tempfile.mkdtemp()
        t5_json(d, tmp)
        t5 = flux_tokenizer(d, T5_LEN)
        rows, bad = reference_rows(t5, texts, T5_LEN, os.path.join(tmp, "tokenizer.json"))
        write_ref(os.path.join(out_dir, name + ".ref"), rows, T5_LEN, t5._tokenizer.pad_token_id)
        print(f"{name}: {len(texts)} captions, {bad} differ between transformers and tokenizers alone")
        if name == "t5_v1_1_xxl":
            for f in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(os.path.join(tmp, f), os.path.join(d, f))
        shutil.rmtree(tmp)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "t5-json":
        t5_json(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "goldens":
        goldens(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "graphemes":
        graphemes(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
