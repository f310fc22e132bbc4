#!/bin/sh
# titan-shard as an attacker (or a crash) finds a folder: a resume over
# shards that are gone or replaced, a FIFO where a shard should be, write
# errors on standard output, --shard-tokens 0.  Each was a defect on main.
. tests/lib.sh

GEN="$BUILD/tests/shard/test_gen"
SH="$BIN/titan-shard"
T="timeout 30"

"$GEN" gen 7 400 1000 200 >"$TMP/s.tts"
size=$(wc -c <"$TMP/s.tts")
head -c $((size * 2 / 3)) "$TMP/s.tts" >"$TMP/trunc.tts"

# An interrupted run leaves listed shards; the resume must find them whole.
interrupted() { # DIR
	rm -rf "$1"
	"$SH" -q --out "$1" --shard-tokens 5000 "$TMP/trunc.tts" 2>/dev/null
	[ "$(ls "$1" | grep -c '^train-')" -ge 2 ]
}
if interrupted "$TMP/gone"; then t_ok "an interrupted run leaves listed shards"; else
	t_not_ok "an interrupted run leaves listed shards" "$(ls "$TMP/gone")"; fi
rm "$TMP/gone/train-000000.bin"
t_fails "a resume with a listed shard deleted is refused" 1 $T "$SH" -q --out "$TMP/gone" --shard-tokens 5000 "$TMP/s.tts"
t_grep "the refusal names the missing shard" 'cannot resume .*train-000000.bin' "$TMP/.err"
t_same_num() { if [ "$2" = "$3" ]; then t_ok "$1"; else t_not_ok "$1" "$2, expected $3"; fi; }
t_same_num "the folder is not marked complete" "$(jq .complete "$TMP/gone/manifest.json")" false

interrupted "$TMP/swap"
cp "$TMP/swap/train-000001.bin" "$TMP/swap/train-000000.bin"
t_fails "a resume with a listed shard replaced is refused" 1 $T "$SH" -q --out "$TMP/swap" --shard-tokens 5000 "$TMP/s.tts"
interrupted "$TMP/ok"
t_run "a resume over whole shards goes on" $T "$SH" -q --out "$TMP/ok" --shard-tokens 5000 "$TMP/s.tts"
"$SH" cat "$TMP/ok" >"$TMP/ok.tts"
t_same "and gives back the input" "$TMP/s.tts" "$TMP/ok.tts"

# A FIFO where a shard should be: refused, not waited on.
cp -r "$TMP/ok" "$TMP/fifo"
rm "$TMP/fifo/train-000001.bin"
mkfifo "$TMP/fifo/train-000001.bin"
t_fails "verify refuses a FIFO shard" 1 $T "$SH" verify "$TMP/fifo"
t_grep "as not a regular file" 'train-000001.bin: not a regular file' "$TMP/.err"
t_fails "info of a FIFO shard is refused" 1 $T "$SH" info "$TMP/fifo/train-000001.bin"
printf '[training]\ndataset_path = "%s"\nseq_len = 16\nlocal_batch_size = 2\nsteps = 1\n' "$TMP/fifo" >"$TMP/t.toml"
t_fails "titan-train refuses a FIFO shard" 1 $T "$BIN/titan-train" --config "$TMP/t.toml" \
	--job.dump_folder "$TMP/run" --activation_checkpoint.mode none
t_grep "and names it" 'train-000001.bin: not a regular file' "$TMP/.err"

# A flipped byte in a shard's data: titan-train refuses it as titan-shard
# verify does, naming the shard (on main it trained on it); a manifest whose
# vocabulary is not its shards' is refused before the first step (on main ids
# were checked against the model's vocabulary only).
cp -r "$TMP/ok" "$TMP/flip"
f="$TMP/flip/train-000000.bin"
b=$(od -An -tu1 -j 200 -N1 "$f" | tr -d ' ')
printf "\\$(printf %03o $((b ^ 1)))" | dd of="$f" bs=1 seek=200 conv=notrunc 2>/dev/null
t_fails "verify refuses a flipped data byte" 1 $T "$SH" verify "$TMP/flip"
t_grep "naming the shard" 'flip/train-000000.bin: data checksum' "$TMP/.err"
sed "s|$TMP/fifo|$TMP/flip|" "$TMP/t.toml" >"$TMP/flip.toml"
t_fails "titan-train refuses the flipped data byte" 1 $T "$BIN/titan-train" --config "$TMP/flip.toml" \
	--job.dump_folder "$TMP/run-flip" --activation_checkpoint.mode none
t_grep "naming the shard as verify does" 'flip/train-000000.bin: data checksum' "$TMP/.err"
cp -r "$TMP/ok" "$TMP/vocab"
jq -c '.tokenizer.vocab_size = 900' "$TMP/ok/manifest.json" >"$TMP/vocab/manifest.json"
sed "s|$TMP/fifo|$TMP/vocab|" "$TMP/t.toml" >"$TMP/vocab.toml"
t_fails "titan-train refuses shards of another vocabulary than the manifest's" 1 $T \
	"$BIN/titan-train" --config "$TMP/vocab.toml" --job.dump_folder "$TMP/run-vocab" \
	--activation_checkpoint.mode none
t_grep "naming the shard and both sizes" \
	'vocab/train-000000.bin: vocab mismatch with manifest.json (vocab_size 1000, the manifest.s 900)' \
	"$TMP/.err"

# Results on standard output that cannot be written are failures.
t_fails "info > /dev/full fails" 1 sh -c "'$SH' info '$TMP/ok' >/dev/full"
t_grep "saying why" 'standard output: No space left on device' "$TMP/.err"
t_fails "info --json > /dev/full fails" 1 sh -c "'$SH' info --json '$TMP/ok' >/dev/full"
t_fails "verify > /dev/full fails" 1 sh -c "'$SH' verify '$TMP/ok' >/dev/full"

t_fails "--shard-tokens 0 is refused, not read as 100M" 2 "$SH" -q --out "$TMP/zero" --shard-tokens 0 "$TMP/s.tts"
t_grep "the refusal says so" 'shard-tokens: must be at least 1' "$TMP/.err"

t_done
