#!/bin/sh
# titan-tokenize train: the trained tokenizer gives, through titan-tokenize,
# the ids HF tokenizers gives with its own BpeTrainer on the same documents
# (tests/tokenize/train_ref/PRE.SHA.ids, made by scripts/tokenize_train_reference.py
# from the corpus whose SHA-256 starts with SHA: the one in ../shared and the one
# scripts/fixtures_corpus.py builds from Debian packages); HF loads the file we
# write (when a Python with tokenizers is around).
. tests/lib.sh
t_need_fixture corpus/en.jsonl corpus/multi.jsonl
T="$BIN/titan-tokenize"
EN=$(fx corpus/en.jsonl)
MULTI=$(fx corpus/multi.jsonl)
REF_L3=tests/tokenize/train_ref/llama3.$(sha256sum <"$EN" | cut -c1-16).ids
REF_G2=tests/tokenize/train_ref/gpt2.$(sha256sum <"$MULTI" | cut -c1-16).ids

# The reference ids for this corpus, compared, or a skip (a failure under
# CI=true) naming the corpus that has none.
same_as_ref() { # name ref got corpus
	if [ -f "$2" ]; then
		t_same "$1" "$2" "$3"
	elif [ "${CI:-}" = true ]; then
		t_not_ok "$1" "no $2 for $4: scripts/tokenize_train_reference.py makes it"
	else
		t_skip "$1" "no $2 for $4 (other package versions?): scripts/tokenize_train_reference.py makes it"
	fi
}

# Line ranges as the reference script takes them (0-based, end excluded).
sed -n '1,2000p' "$EN" >"$TMP/en.train"
sed -n '20001,20030p' "$EN" >"$TMP/en.held"
sed -n '1,3000p' "$MULTI" >"$TMP/multi.train"
sed -n '30001,30030p' "$MULTI" >"$TMP/multi.held"

t_run "train llama3-style, vocab 2000" "$T" train -q --vocab-size 2000 -o "$TMP/l3" "$TMP/en.train"
"$T" -q -t "$TMP/l3" --ids --no-eos "$TMP/en.held" >"$TMP/l3.ids" 2>"$TMP/err"
same_as_ref "llama3 pre-tokenizer: ids on held-out text equal HF BpeTrainer's" "$REF_L3" "$TMP/l3.ids" "$EN"

gzip -c "$TMP/multi.train" >"$TMP/multi.train.gz"
t_run "train gpt2-style from gzip, vocab 1500, min frequency 3" \
	"$T" train -q --vocab-size 1500 --min-frequency 3 --pre-tokenizer gpt2 -o "$TMP/g2" "$TMP/multi.train.gz"
"$T" -q -t "$TMP/g2" --ids --no-eos "$TMP/multi.held" >"$TMP/g2.ids" 2>"$TMP/err"
same_as_ref "gpt2 pre-tokenizer: ids on held-out text equal HF BpeTrainer's" "$REF_G2" "$TMP/g2.ids" "$MULTI"

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
sed -n '1,10000p' "$EN" >"$TMP/en10k"
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
	"$T" -q -t "$TMP/v8k" --ids --no-eos "$TMP/en.held" >"$TMP/ti.ids" 2>"$TMP/err"
	t_same "HF tokenizers loads the trained tokenizer.json and gives titan's ids" "$TMP/hf.ids" "$TMP/ti.ids"
else
	t_skip "HF tokenizers loads the trained tokenizer.json and gives titan's ids" "no Python tokenizers"
fi
t_done
