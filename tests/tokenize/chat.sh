#!/bin/sh
# titan-tokenize --chat: conversations through the tokenizer's chat template
# into ids and label masks, titan-shard's masked shards, and the loader's SFT
# packing give the rows torchtitan 0.3.0's ChatDataLoader gives
# (tests/tokenize/golden/sft_*.txt, from scripts/sft_golden.py over
# tests/tokenize/chat/chat.jsonl from scripts/chat_corpus.py): inputs,
# labels with the prompt masked (-100), positions, across epochs (0.3.0's
# reshuffles) and on one rank of two.  0.3.0's own refusals are titan's: the
# Llama 3 template without bos_token, a multi-turn conversation.
. tests/lib.sh
GEN="$BUILD/tests/shard/test_gen"
C=tests/tokenize/chat

# NAME DIR TOKENIZER SEQ B DP RANK CALLS GOLDEN [titan-tokenize options]:
# tokenize into $TMP/DIR, shard, compare the loader's rows with 0.3.0's
sft_case() {
	name=$1 dir=$TMP/$2 tk=$3 seq=$4 b=$5 dp=$6 rank=$7 calls=$8 gold=$9
	shift 9
	if ! t_have "$tk"; then
		t_skip_fixture "$name" "$tk"
		return
	fi
	if "$BIN/titan-tokenize" -q --chat "$@" --tokenizer "$(fx "$tk")" "$C/chat.jsonl" \
		>"$dir.tts" 2>"$TMP/.err" &&
		"$BIN/titan-shard" -q --out "$dir" --val-fraction 0 "$dir.tts" 2>>"$TMP/.err" &&
		"$GEN" sft "$dir" "$seq" "$b" "$dp" "$rank" "$calls" >"$dir.rows" 2>>"$TMP/.err"; then
		t_same "$name" "$gold" "$dir.rows"
	else
		t_not_ok "$name" "$(head -3 "$TMP/.err")"
	fi
}

sft_case "Qwen3: the rows of 0.3.0's ChatDataLoader, over two epochs" q3 \
	tokenizers/qwen3 48 4 1 0 16 tests/tokenize/golden/sft_qwen3.txt
sft_case "torchtitan's test tokenizer: rank 1 of 2, three epochs" tt \
	tokenizers/torchtitan_test 256 4 2 1 6 tests/tokenize/golden/sft_tt_test_dp2r1.txt
sft_case "Llama 3 with bos_token passed (--chat-special-tokens, as HF does)" l3 \
	tokenizers/llama3_1 64 4 1 0 8 tests/tokenize/golden/sft_llama3.txt --chat-special-tokens

if [ -f "$TMP/q3/manifest.json" ]; then
	t_run "titan-shard verify reads the masked shards" "$BIN/titan-shard" verify "$TMP/q3"
	"$BIN/titan-shard" info "$TMP/q3/train-000000.bin" >"$TMP/info" 2>&1
	t_grep "a masked shard is version 2" 'version 2 (label masks' "$TMP/info"
	"$BIN/titan-shard" cat "$TMP/q3" >"$TMP/back.tts" 2>"$TMP/.err"
	t_same "cat gives the masked stream back" "$TMP/q3.tts" "$TMP/back.tts"
	# one flipped bit of the label mask (the file's last byte)
	cp -r "$TMP/q3" "$TMP/bad"
	f="$TMP/bad/train-000000.bin"
	n=$(($(wc -c <"$f") - 1))
	last=$(od -An -tu1 -j"$n" -N1 "$f" | tr -d ' ')
	printf "$(printf '\\%03o' $((last ^ 1)))" | dd of="$f" bs=1 seek="$n" conv=notrunc 2>/dev/null
	t_fails "a damaged label mask fails verify" 1 "$BIN/titan-shard" verify "$TMP/bad"
	t_grep "naming the mask's checksum" 'label mask checksum' "$TMP/.err"
	t_fails "and the loader" 1 "$GEN" sft "$TMP/bad" 48 4 1 0 1
fi

Q=$(fx tokenizers/qwen3)
t_fails "multi-turn conversations are refused, as 0.3.0 refuses them" 1 \
	"$BIN/titan-tokenize" -q --chat --tokenizer "$Q" "$C/multi.jsonl"
t_grep "naming the line" 'multi.jsonl:1: expected single-turn \[user, assistant\], got' "$TMP/.err"
printf '{"question": "2 + 3?", "answer": "5"}\n' >"$TMP/qa.jsonl"
t_run "--chat-fields makes [user, assistant] of two fields (sft_debugmodel's processor)" \
	sh -c "'$BIN/titan-tokenize' -q --chat --chat-fields question,answer --tokenizer '$Q' \
		'$TMP/qa.jsonl' >'$TMP/qa.tts'"
if t_have tokenizers/llama3_1; then
	t_fails "Llama 3's template without bos_token fails, as in 0.3.0" 1 \
		"$BIN/titan-tokenize" -q --chat --tokenizer "$(fx tokenizers/llama3_1)" "$C/chat.jsonl"
	t_grep "naming the template's line and column" \
		"chat.jsonl:1: chat template line 3 col 99: 'bos_token' is undefined" "$TMP/.err"
fi
t_fails "--chat with --bos is a usage error" 2 "$BIN/titan-tokenize" --chat --bos --tokenizer "$Q"
t_done
