#!/bin/sh
# titan-tokenize train: the trained tokenizer gives, through titan-tokenize,
# the ids HF tokenizers gives with its own BpeTrainer on the same documents
# (tests/tokenize/train_*.ids, made by scripts/tokenize_train_reference.py);
# HF loads the file we write (when a Python with tokenizers is around).
. tests/lib.sh
t_need_fixture corpus/en.jsonl
t_need_fixture corpus/multi.jsonl
T="$BIN/titan-tokenize"
HERE=tests/tokenize

# Line ranges as the reference script takes them (0-based, end excluded).
sed -n '1,2000p' "$FIXTURES/corpus/en.jsonl" >"$TMP/en.train"
sed -n '20001,20030p' "$FIXTURES/corpus/en.jsonl" >"$TMP/en.held"
sed -n '1,3000p' "$FIXTURES/corpus/multi.jsonl" >"$TMP/multi.train"
sed -n '30001,30030p' "$FIXTURES/corpus/multi.jsonl" >"$TMP/multi.held"

t_run "train llama3-style, vocab 2000" "$T" train -q --vocab-size 2000 -o "$TMP/l3" "$TMP/en.train"
"$T" -q -t "$TMP/l3" --ids "$TMP/en.held" >"$TMP/l3.ids" 2>"$TMP/err"
t_same "llama3 pre-tokenizer: ids on held-out text equal HF BpeTrainer's" "$HERE/train_llama3.ids" "$TMP/l3.ids"

gzip -c "$TMP/multi.train" >"$TMP/multi.train.gz"
t_run "train gpt2-style from gzip, vocab 1500, min frequency 3" \
	"$T" train -q --vocab-size 1500 --min-frequency 3 --pre-tokenizer gpt2 -o "$TMP/g2" "$TMP/multi.train.gz"
"$T" -q -t "$TMP/g2" --ids "$TMP/multi.held" >"$TMP/g2.ids" 2>"$TMP/err"
t_same "gpt2 pre-tokenizer: ids on held-out text equal HF BpeTrainer's" "$HERE/train_gpt2.ids" "$TMP/g2.ids"

t_grep "tokenizer_config.json names BOS" '"bos_token": "<|begin_of_text|>"' "$TMP/l3/tokenizer_config.json"
t_grep "tokenizer_config.json names EOS" '"eos_token": "<|end_of_text|>"' "$TMP/l3/tokenizer_config.json"
echo '{"text":"x"}' | "$T" -q -t "$TMP/l3" --ids --eos >"$TMP/eos.out" 2>"$TMP/err"
[ "$(cut -d' ' -f1 "$TMP/eos.out")" = 0 ] && [ "$(awk '{print $NF}' "$TMP/eos.out")" = 1 ] &&
	t_ok "trained specials are ids 0 (BOS) and 1 (EOS)" ||
	t_not_ok "trained specials are ids 0 (BOS) and 1 (EOS)" "$(cat "$TMP/eos.out" "$TMP/err")"

# Round trip through the trained tokenizer.
"$T" -q -t "$TMP/l3" "$TMP/en.held" | "$T" -q -t "$TMP/l3" --decode >"$TMP/back" 2>"$TMP/err"
jq -c '{text}' "$TMP/en.held" >"$TMP/want"
jq -c '{text}' "$TMP/back" >"$TMP/got"
t_same "text round-trips through the trained tokenizer" "$TMP/want" "$TMP/got"

# Speed: an 8k vocabulary from 3 MB on one core.
sed -n '1,10000p' "$FIXTURES/corpus/en.jsonl" >"$TMP/en10k"
start=$(date +%s)
"$T" train -q --vocab-size 8000 -o "$TMP/v8k" "$TMP/en10k" 2>"$TMP/err"
rc=$?
end=$(date +%s)
[ $rc -eq 0 ] && [ $((end - start)) -le 60 ] && t_ok "8k vocabulary from 3 MB within 60 s ($((end - start)) s)" ||
	t_not_ok "8k vocabulary from 3 MB within 60 s" "rc $rc, $((end - start)) s: $(cat "$TMP/err")"

t_fails "vocab size below specials + 256 exits 1" 1 "$T" train -q --vocab-size 100 -o "$TMP/x" "$TMP/en.held"
t_fails "train without --vocab-size is a usage error" 2 "$T" train -o "$TMP/x" "$TMP/en.held"
t_fails "--bos-token that is not a special exits 1" 1 \
	"$T" train -q --vocab-size 300 --bos-token '<s>' -o "$TMP/x" "$TMP/en.held"

# HF tokenizers loads our file and agrees with titan-tokenize (reference tool,
# not a CI dependency: skipped when the Python module is missing).
PY=${PYTHON:-python3}
if "$PY" -c 'import tokenizers' 2>/dev/null; then
	"$PY" - "$TMP/v8k/tokenizer.json" "$TMP/en.held" >"$TMP/hf.ids" <<'EOF'
import json, sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
for line in open(sys.argv[2], encoding="utf-8"):
    print(" ".join(map(str, tok.encode(json.loads(line)["text"]).ids)))
EOF
	"$T" -q -t "$TMP/v8k" --ids "$TMP/en.held" >"$TMP/ti.ids" 2>"$TMP/err"
	t_same "HF tokenizers loads the trained tokenizer.json and gives titan's ids" "$TMP/hf.ids" "$TMP/ti.ids"
else
	t_skip "HF tokenizers loads the trained tokenizer.json and gives titan's ids" "no Python tokenizers"
fi
t_done
