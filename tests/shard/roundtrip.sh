#!/bin/sh
# corpus -> titan-tokenize -> titan-shard -> cat -> titan-tokenize --decode gives
# the input text back, and cat gives exactly the ids a direct tokenize gives.
# Without titan-tokenize in $BIN, only the shard half runs, on a generated stream.
. tests/lib.sh
SH="$BIN/titan-shard"
TOK="$BIN/titan-tokenize"
set -u
if [ ! -x "$TOK" ]; then
	"$BUILD/tests/shard/test_gen" gen 11 2000 70000 200 >"$TMP/s.tts"
	"$SH" -q --out "$TMP/d" --shard-tokens 30000 --val-fraction 0.01 "$TMP/s.tts"
	"$SH" cat "$TMP/d" >"$TMP/c.tts"
	t_same "shard and cat round-trip a generated stream" "$TMP/s.tts" "$TMP/c.tts"
	t_skip "text round trip through titan-tokenize" "no $TOK"
	t_done
fi
t_need_fixture corpus/en.jsonl
t_need_fixture tokenizers/qwen3/tokenizer.json
TK="$(fx tokenizers/qwen3)"
head -n 400 "$(fx corpus/en.jsonl)" >"$TMP/c.jsonl"
t_run "tokenize the corpus" sh -c "'$TOK' -q -j 2 -t '$TK' <'$TMP/c.jsonl' >'$TMP/s.tts'"
t_run "shard it (zstd, val split)" \
	"$SH" -q --out "$TMP/d" --shard-tokens 20000 --val-fraction 0.05 --compress zstd "$TMP/s.tts"
t_run "verify" "$SH" verify "$TMP/d"
"$SH" cat "$TMP/d" >"$TMP/c.tts"
t_same "cat gives the ids of a direct tokenize" "$TMP/s.tts" "$TMP/c.tts"
"$TOK" -q -t "$TK" --decode <"$TMP/c.tts" | jq -r .text >"$TMP/out.txt"
jq -r .text <"$TMP/c.jsonl" >"$TMP/in.txt"
t_same "decode of cat gives the corpus text back" "$TMP/in.txt" "$TMP/out.txt"
t_done
