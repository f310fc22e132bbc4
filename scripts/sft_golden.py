#!/usr/bin/env python3
"""torchtitan 0.3.0's ChatDataset rows for titan's SFT tests
(tests/tokenize/golden/sft_<name>.txt).

0.3.0's own code end to end: its HuggingFaceTokenizer over the tokenizer
folder (tokenizer.json, tokenizer_config.json and its chat_template), HF
datasets' load_dataset("json") of the corpus (scripts/chat_corpus.py's
chat.jsonl), and ChatDataset (shuffle seed 42, split_dataset_by_node,
_tokenize_sample's prompt masking and seq_len drop, greedy packing, reloop
reshuffles with seed 42 + epoch, infinite).  Prints ROWS rows of dp rank RANK
of DP as titan's `test_gen sft` prints them: "in", "lab", "pos" lines.

--special-tokens renders with bos_token and eos_token (tokenizer_config.json's)
passed to the template, as HF's apply_chat_template does: 0.3.0 passes
messages alone, and the Llama 3 template's `bos_token + content` then fails
("'bos_token' is undefined"), so its rows exist only in this mode (titan's
--chat-special-tokens).

Run: PYTHONPATH=<torchtitan 0.3.0> $PYTHON scripts/sft_golden.py TOKENIZER_DIR CHAT.jsonl \
        SEQ_LEN ROWS [DP RANK] [--special-tokens] [--fields U,A] > OUT
"""
import sys

from datasets import load_dataset

from torchtitan.components.tokenizer import HuggingFaceTokenizer
from torchtitan.hf_datasets.text_datasets import ChatDataset


class SpecialTokens(HuggingFaceTokenizer):
    def apply_chat_template(self, messages, **kwargs):
        kwargs.setdefault("bos_token", self.bos_token)
        kwargs.setdefault("eos_token", self.eos_token)
        return super().apply_chat_template(messages, **kwargs)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    special = "--special-tokens" in sys.argv
    fields = None
    if "--fields" in sys.argv:
        fields = sys.argv[sys.argv.index("--fields") + 1].split(",")
        args.remove(",".join(fields))
    tok_dir, corpus, seq, rows = args[0], args[1], int(args[2]), int(args[3])
    dp, rank = (int(args[4]), int(args[5])) if len(args) > 5 else (1, 0)
    tok = (SpecialTokens if special else HuggingFaceTokenizer)(tokenizer_path=tok_dir)
    ds = load_dataset("json", data_files=corpus, split="train")
    if fields:
        def proc(s):
            return [{"role": "user", "content": s[fields[0]]},
                    {"role": "assistant", "content": s[fields[1]]}]
    else:
        def proc(s):
            return s["messages"]
    chat = ChatDataset(ds, tok, proc, seq_len=seq, dp_rank=rank, dp_world_size=dp, infinite=True)
    it = iter(chat)
    out = sys.stdout
    for _ in range(rows):
        x, labels = next(it)
        out.write("in " + " ".join(map(str, x["input"].tolist())) + "\n")
        out.write("lab " + " ".join(map(str, labels.tolist())) + "\n")
        out.write("pos " + " ".join(map(str, x["positions"].tolist())) + "\n")


if __name__ == "__main__":
    main()
