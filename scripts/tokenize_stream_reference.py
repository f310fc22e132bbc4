#!/usr/bin/env python3
"""torchtitan 0.2.2's training token stream over the corpus fixture, for
tests/tokenize/stream.sh.

    $PYTHON scripts/tokenize_stream_reference.py > tests/tokenize/stream_ref.txt

For each HF tokenizer folder among the fixtures (llama3_1, qwen3, torchtitan_test)
and each build of corpus/en.jsonl found ($TITAN_FIXTURES, default ../shared/fixtures,
and build/fixtures), this runs torchtitan's own HuggingFaceTextDataset, the loader
of its c4 datasets, with its own HuggingFaceTokenizer: every document is encoded
with add_bos=True, add_eos=True into one buffer, cut into windows of seq_len + 1
tokens.  The JSON Lines file is read by datasets' json loader in place of the Hub's
c4, through the same loader code.  One line per pair:

    TOKENIZER CORPUS_SHA16 SEQ_LEN WINDOWS SHA256 FIRST_IDS

CORPUS_SHA16 is the first 16 hex digits of the corpus file's SHA-256, WINDOWS the
number of windows the loader yields, SHA256 the digest of their tokens in order
(each window's input followed by its last label), written as decimal ids one per
line ("%d\\n"), and FIRST_IDS the first 16 of them, comma-separated, for a reader.
Needs torchtitan 0.2.2, torch, datasets and tokenizers.
"""
import hashlib
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX_DIRS = [os.environ.get("TITAN_FIXTURES", os.path.join(ROOT, "..", "shared", "fixtures")),
            os.path.join(ROOT, "build", "fixtures")]
TOKENIZERS = ["llama3_1", "qwen3", "torchtitan_test"]
SEQ_LEN = 2048


def sha16(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def first(rel):
    for d in FIX_DIRS:
        if os.path.exists(os.path.join(d, rel)):
            return os.path.join(d, rel)
    return None


def stream(tok_dir, corpus):
    from datasets import load_dataset
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    from torchtitan.hf_datasets import DatasetConfig
    from torchtitan.hf_datasets import text_datasets as td

    td.DATASETS["titan_corpus"] = DatasetConfig(
        path=corpus,
        loader=lambda path: load_dataset("json", data_files=path, split="train"),
        sample_processor=lambda sample: sample["text"])
    ds = td.HuggingFaceTextDataset("titan_corpus", corpus, HuggingFaceTokenizer(tok_dir),
                                   seq_len=SEQ_LEN, infinite=False)
    h = hashlib.sha256()
    windows, head = 0, []
    for inp, label in ds:
        ids = inp["input"].tolist() + [int(label[-1])]
        assert ids[1:] == label.tolist()
        h.update("".join(f"{i}\n" for i in ids).encode())
        head += ids[:16 - len(head)]
        windows += 1
    return windows, h.hexdigest(), head


def main():
    os.environ.setdefault("HF_DATASETS_CACHE", tempfile.mkdtemp(prefix="titan-ds-"))
    corpora = []
    for d in FIX_DIRS:
        p = os.path.join(d, "corpus", "en.jsonl")
        if os.path.exists(p) and sha16(p) not in [s for s, _ in corpora]:
            corpora.append((sha16(p), p))
    for name in TOKENIZERS:
        tok_dir = first(os.path.join("tokenizers", name))
        if tok_dir is None:
            print(f"tokenize_stream_reference.py: no fixture tokenizers/{name}", file=sys.stderr)
            continue
        for s, corpus in corpora:
            windows, digest, head = stream(tok_dir, corpus)
            print(f"{name} {s} {SEQ_LEN} {windows} {digest} {','.join(map(str, head))}",
                  flush=True)


if __name__ == "__main__":
    main()
