#!/usr/bin/env python3
"""Single-thread encode speed of the references on a JSON Lines corpus, for
scripts/bench/tokenize.sh.  Prints "NAME MB/s TOKENS PEAK_RSS_MB" per reference.

    $PYTHON scripts/tok_bench_ref.py FIXTURES CORPUS.jsonl

Times are CPU time of the encoding calls only (time.process_time around each
call), so a busy machine disturbs them less than wall time would; the best of
TITAN_BENCH_PASSES (default 3) passes counts, as in titan's driver."""
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"
import tok_reference  # noqa: E402


def run(name, encode, texts, passes):
    """Best of `passes` passes, like titan's driver (the least disturbed one)."""
    nbytes = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)
    best = float("inf")
    for _ in range(passes):
        cpu, ntok = 0.0, 0
        for t in texts:
            t0 = time.process_time()
            ids = encode(t)
            cpu += time.process_time() - t0
            ntok += len(ids)
        best = min(best, cpu)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{name} {nbytes / best / 1e6:.2f} {ntok} {rss:.0f}", flush=True)


def main():
    tok_reference.FIX_DIRS = [sys.argv[1]]
    with open(sys.argv[2], encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    from tokenizers import Tokenizer
    ranks = load_tiktoken_bpe(os.path.join(sys.argv[1], "tokenizers/llama3_tiktoken/tokenizer.model"))
    enc = tiktoken.Encoding("llama3", pat_str=tok_reference.LLAMA3_PAT, mergeable_ranks=ranks,
                            special_tokens=tok_reference.llama3_specials())
    passes = int(os.environ.get("TITAN_BENCH_PASSES", "3"))
    run("tiktoken", enc.encode_ordinary, texts, passes)
    hf = Tokenizer.from_file(os.path.join(sys.argv[1], "tokenizers/llama3_1/tokenizer.json"))
    run("hf-tokenizers", lambda t: hf.encode(t, add_special_tokens=False).ids, texts, passes)


if __name__ == "__main__":
    main()
