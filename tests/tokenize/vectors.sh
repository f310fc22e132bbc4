#!/bin/sh
# titan-tokenize outputs: Llama 3 known vectors, BOS/EOS policy, JSON escapes,
# decode round trips, the stream's fingerprint check, a 10 MB document.
. tests/lib.sh
t_need_fixture corpus/en.jsonl tokenizers/qwen3/tokenizer.json \
	tokenizers/cl100k_base/cl100k_base.tiktoken
TK=$(fx tokenizers/qwen3) # a tokenizer.json kept in the repository
CL=$(fx tokenizers/cl100k_base/cl100k_base.tiktoken)
T="$BIN/titan-tokenize"

# Known vectors (shared/fixtures/README.md), written as JSON escapes.
cat >"$TMP/vec.jsonl" <<'EOF'
{"text":"This is a test sentence."}
{"text":"   Hello"}
{"text":"    Hello\n    Hello"}
{"text":"3333"}
{"text":"\n\n\n"}
{"text":"ied 4 \u00bd months"}
EOF
cat >"$TMP/vec.want" <<'EOF'
2028 374 264 1296 11914 13
256 22691
262 22691 198 262 22691
8765 18
1432
1142 220 19 220 27154 4038
EOF
if t_have tokenizers/llama3_1/tokenizer.json; then
	"$T" -q -t "$(fx tokenizers/llama3_1)" --format ids --no-bos --no-eos "$TMP/vec.jsonl" \
		>"$TMP/vec.out" 2>"$TMP/err"
	t_same "Llama 3 known vectors (--format ids --no-bos --no-eos)" "$TMP/vec.want" "$TMP/vec.out"
else
	t_skip_fixture "Llama 3 known vectors" tokenizers/llama3_1/tokenizer.json
fi
if t_have tokenizers/llama3_tiktoken/tokenizer.model; then
	"$T" -q -t "$(fx tokenizers/llama3_tiktoken/tokenizer.model)" --ids --no-bos --no-eos \
		"$TMP/vec.jsonl" >"$TMP/vec.tt" 2>"$TMP/err"
	t_same "Meta's tiktoken file gives the same ids" "$TMP/vec.want" "$TMP/vec.tt"
else
	t_skip_fixture "Meta's tiktoken file gives the same ids" tokenizers/llama3_tiktoken/tokenizer.model
fi
t_fails "--bos with a tokenizer that has none exits 1" 1 "$T" -q -t "$CL" --ids --bos "$TMP/vec.jsonl"

# JSON escapes: a lone surrogate is U+FFFD; \u0000 is a NUL byte.
printf '%s\n' '{"text":"a\ud800b"}' '{"text":"a\ufffdb"}' '{"text":"\ud83d\ude00"}' \
	'{"text":"\u00f0\u009f"}' >"$TMP/esc.jsonl"
"$T" -q -t "$TK" --ids --no-bos --no-eos "$TMP/esc.jsonl" >"$TMP/esc.out" 2>"$TMP/err"
printf '\360\237\230\200' >"$TMP/emoji.txt"
"$T" -q -t "$TK" --ids --no-bos --no-eos --format text "$TMP/emoji.txt" >"$TMP/emoji.ids" 2>"$TMP/err"
l1=$(sed -n 1p "$TMP/esc.out"); l2=$(sed -n 2p "$TMP/esc.out")
[ -n "$l1" ] && [ "$l1" = "$l2" ] && t_ok "a lone surrogate escape encodes as U+FFFD" ||
	t_not_ok "a lone surrogate escape encodes as U+FFFD" "$l1 / $l2"
[ "$(sed -n 3p "$TMP/esc.out")" = "$(cat "$TMP/emoji.ids")" ] &&
	t_ok "a surrogate pair is one code point (U+1F600)" ||
	t_not_ok "a surrogate pair is one code point (U+1F600)" "$(sed -n 3p "$TMP/esc.out")"
printf '%s\n' '{"text":"a\u0000b"}' >"$TMP/nul.jsonl"
"$T" -q -t "$TK" "$TMP/nul.jsonl" >"$TMP/nul.tts" 2>"$TMP/err"
"$T" -q -t "$TK" --decode "$TMP/nul.tts" >"$TMP/nul.back" 2>"$TMP/err"
t_same "\\u0000 survives a round trip as a NUL byte" "$TMP/nul.jsonl" "$TMP/nul.back"

# Decode round trip on the whole English corpus: exact through JSONL.
"$T" -q -t "$TK" "$(fx corpus/en.jsonl)" >"$TMP/en.tts" 2>"$TMP/err"
"$T" -q -t "$TK" --decode "$TMP/en.tts" >"$TMP/en.back" 2>"$TMP/err"
jq -c '{text}' "$(fx corpus/en.jsonl)" >"$TMP/en.want"
jq -c '{text}' "$TMP/en.back" >"$TMP/en.got"
[ -s "$TMP/en.want" ] && t_same "decode --format jsonl gives back every document of en.jsonl" \
	"$TMP/en.want" "$TMP/en.got" || t_not_ok "decode round trip" "jq failed"
"$T" -q -t "$TK" "$TMP/en.back" >"$TMP/en2.tts" 2>"$TMP/err"
t_same "re-encoding the decoded corpus gives the same stream" "$TMP/en.tts" "$TMP/en2.tts"
head -n 50 "$(fx corpus/en.jsonl)" >"$TMP/h.jsonl"
"$T" -q -t "$TK" --ids "$TMP/h.jsonl" >"$TMP/h.ids" 2>"$TMP/err"
"$T" -q -t "$TK" --decode --ids "$TMP/h.ids" >"$TMP/h.back" 2>"$TMP/err"
jq -c '{text}' "$TMP/h.jsonl" >"$TMP/h.want"
jq -c '{text}' "$TMP/h.back" >"$TMP/h.got"
t_same "decode --ids reads the --ids output back" "$TMP/h.want" "$TMP/h.got"
printf '%s\n' '{"text":"one line"}' '{"text":"two"}' >"$TMP/t.jsonl"
"$T" -q -t "$TK" "$TMP/t.jsonl" | "$T" -q -t "$TK" --decode --format text >"$TMP/t.txt" 2>"$TMP/err"
printf 'one line\ntwo\n' >"$TMP/t.want"
t_same "decode --format text prints one document per line" "$TMP/t.want" "$TMP/t.txt"
t_fails "decoding with another tokenizer is refused" 1 \
	"$T" -q -t "$CL" --decode "$TMP/en.tts"
t_grep "the refusal names the fingerprint" "another tokenizer" "$TMP/.err"
head -c 1000 "$TMP/en.tts" >"$TMP/cut.tts"
t_fails "decoding a stream without its trailer exits 1" 1 "$T" -q -t "$TK" --decode "$TMP/cut.tts"

# Plain text: one document per file, per blank-line block, per line.
printf 'para one\nstill one\n\n\npara two\n' >"$TMP/p.txt"
"$T" -q -t "$TK" --format text --ids --no-bos "$TMP/p.txt" >"$TMP/p.file" 2>"$TMP/err"
"$T" -q -t "$TK" --format text --split blank --ids --no-bos "$TMP/p.txt" >"$TMP/p.blank" 2>"$TMP/err"
"$T" -q -t "$TK" --format text --split line --ids --no-bos "$TMP/p.txt" >"$TMP/p.line" 2>"$TMP/err"
[ "$(wc -l <"$TMP/p.file")" -eq 1 ] && [ "$(wc -l <"$TMP/p.blank")" -eq 2 ] &&
	[ "$(wc -l <"$TMP/p.line")" -eq 3 ] && t_ok "--split file/blank/line make 1/2/3 documents" ||
	t_not_ok "--split file/blank/line make 1/2/3 documents" "$(wc -l "$TMP"/p.*)"

# A 10 MB document with a run of a million spaces: fast and exact.
{ head -c 4500000 "$(fx corpus/en.jsonl)"; head -c 1000000 /dev/zero | tr '\0' ' ';
  head -c 4500000 "$(fx corpus/en.jsonl)"; } >"$TMP/big.txt"
start=$(date +%s)
"$T" -q -t "$TK" --format text --no-bos "$TMP/big.txt" >"$TMP/big.tts" 2>"$TMP/err"
rc=$?
end=$(date +%s)
[ $rc -eq 0 ] && [ $((end - start)) -le 30 ] && t_ok "a 10 MB document finishes within 30 s ($((end - start)) s)" ||
	t_not_ok "a 10 MB document finishes within 30 s" "rc $rc, $((end - start)) s: $(cat "$TMP/err")"
"$T" -q -t "$TK" --decode --format text --no-bos "$TMP/big.tts" >"$TMP/big.back" 2>"$TMP/err"
printf '\n' >>"$TMP/big.txt"
t_same "the 10 MB document decodes to its exact bytes" "$TMP/big.txt" "$TMP/big.back"
t_done
