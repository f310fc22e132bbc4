#!/bin/sh
# titan-tokenize's default output is torchtitan's training stream: on the corpus
# fixture, the windows torchtitan 0.2.2's loader yields (HuggingFaceTextDataset,
# every document encoded with add_bos=True, add_eos=True) hold exactly titan's
# ids, in order.  The reference is tests/tokenize/stream_ref.txt, made by
# scripts/tokenize_stream_reference.py with torchtitan itself, per tokenizer and
# per build of the corpus (the first 16 hex digits of its SHA-256).
. tests/lib.sh
t_need_fixture corpus/en.jsonl
T="$BIN/titan-tokenize"
EN=$(fx corpus/en.jsonl)
SHA=$(sha256sum <"$EN" | cut -c1-16)
REF=tests/tokenize/stream_ref.txt

for name in llama3_1 qwen3 torchtitan_test; do
	test="$name: the default stream is what torchtitan's loader trains on"
	if ! t_have "tokenizers/$name/tokenizer.json"; then
		t_skip_fixture "$test" "tokenizers/$name/tokenizer.json"
		continue
	fi
	line=$(awk -v n="$name" -v s="$SHA" '$1 == n && $2 == s' "$REF")
	if [ -z "$line" ]; then
		t_skip_unless_ci "$test" "no line for $name and this en.jsonl (sha256 $SHA...) in $REF: scripts/tokenize_stream_reference.py makes it"
		continue
	fi
	set -- $line
	seq=$3 windows=$4 want=$5
	"$T" -q -t "$(fx "tokenizers/$name")" --ids "$EN" >"$TMP/$name.ids" 2>"$TMP/err"
	got=$(tr ' ' '\n' <"$TMP/$name.ids" | sed '/^$/d' | head -n $((windows * (seq + 1))) |
		sha256sum | cut -d' ' -f1)
	if [ "$got" = "$want" ]; then
		t_ok "$test"
	else
		t_not_ok "$test" "sha256 $got, torchtitan's $want; titan begins $(head -c 120 "$TMP/$name.ids"), torchtitan $6 $(cat "$TMP/err")"
	fi
done

# A plain encode adds nothing: the same ids without the first and last of each
# document (here the tokenizer adds both).
if t_have tokenizers/qwen3/tokenizer.json; then
	head -n 200 "$EN" >"$TMP/h.jsonl"
	"$T" -q -t "$(fx tokenizers/qwen3)" --ids --no-bos --no-eos "$TMP/h.jsonl" >"$TMP/plain" 2>"$TMP/err"
	"$T" -q -t "$(fx tokenizers/qwen3)" --ids "$TMP/h.jsonl" | sed 's/ 151645$//' >"$TMP/cut"
	t_same "qwen3: --no-bos --no-eos is the default stream without its EOS (Qwen3 has no BOS)" \
		"$TMP/cut" "$TMP/plain"
fi
t_done
