#!/bin/sh
# titan-shard end to end: stream -> shards -> cat round trips byte for byte,
# zstd shards hold standard zstd frames, bad input leaves nothing half-written,
# a killed run leaves a folder that verifies and a rerun finishes it.
. tests/lib.sh
GEN="$BUILD/tests/shard/test_gen"
SH="$BIN/titan-shard"
set -u

"$GEN" gen 7 3000 2048 300 >"$TMP/s.tts"          # 16-bit ids
"$GEN" gen 8 500 100000 300 >"$TMP/w.tts"         # 32-bit ids
"$GEN" gen 9 50 2048 300 9 >"$TMP/other.tts"      # another tokenizer fingerprint

t_run "shards a 16-bit stream with a val split" \
	"$SH" -q --out "$TMP/d" --shard-tokens 40000 --val-fraction 0.05 "$TMP/s.tts"
t_run "verify passes on a fresh folder" "$SH" verify "$TMP/d"
"$SH" cat "$TMP/d" >"$TMP/c.tts"
t_same "cat gives back the input stream byte for byte" "$TMP/s.tts" "$TMP/c.tts"
"$SH" info --json "$TMP/d" >"$TMP/info.json"
total=$("$GEN" ids "$TMP/s.tts" | wc -w)
t_same_num() { if [ "$2" = "$3" ]; then t_ok "$1"; else t_not_ok "$1" "$2 != $3"; fi; }
t_same_num "manifest token counts add up to the input's" \
	"$(jq '.train.tokens + .val.tokens' "$TMP/info.json")" "$total"
t_same_num "val holds floor(docs * 0.05) documents" "$(jq .val.docs "$TMP/info.json")" 150
sum=$(for f in "$TMP"/d/train-*.bin; do "$SH" info --json "$f" | jq .tokens; done | awk '{s+=$1} END {print s}')
t_same_num "shard headers agree with the manifest" "$sum" "$(jq .train.tokens "$TMP/info.json")"
"$SH" cat --split val "$TMP/d" | "$GEN" ids - >"$TMP/val.ids"
"$GEN" ids "$TMP/s.tts" | awk 'int(NR*0.05) > int((NR-1)*0.05)' >"$TMP/val.want"
t_same "cat --split val gives exactly the evenly spaced val documents" "$TMP/val.want" "$TMP/val.ids"

t_run "shards a 32-bit stream with zstd" \
	"$SH" -q --out "$TMP/z" --compress zstd:5 --frame-tokens 1000 --shard-tokens 30000 "$TMP/w.tts"
t_run "verify passes on zstd shards" "$SH" verify "$TMP/z"
"$SH" cat "$TMP/z" >"$TMP/cz.tts"
t_same "zstd cat gives back the input stream" "$TMP/w.tts" "$TMP/cz.tts"
# The data region is a standard zstd stream: the zstd tool decodes it to the
# same bytes an uncompressed shard stores.
"$SH" -q --out "$TMP/u" --shard-tokens 30000 "$TMP/w.tts"
zb=$("$SH" info --json "$TMP/z/train-000000.bin" | jq .data_bytes)
ub=$("$SH" info --json "$TMP/u/train-000000.bin" | jq .data_bytes)
tail -c +129 "$TMP/z/train-000000.bin" | head -c "$zb" | zstd -dcq >"$TMP/zd.bin" 2>"$TMP/zerr"
tail -c +129 "$TMP/u/train-000000.bin" | head -c "$ub" >"$TMP/ud.bin"
t_same "zstd(1) decodes the seekable data to the raw ids" "$TMP/ud.bin" "$TMP/zd.bin"

"$GEN" gen 12 100 2048 50 >"$TMP/b.tts"
t_run "several inputs are read as one stream" "$SH" -q --out "$TMP/two" "$TMP/s.tts" "$TMP/b.tts"
"$SH" cat "$TMP/two" | "$GEN" ids - >"$TMP/two.ids"
{ "$GEN" ids "$TMP/s.tts"; "$GEN" ids "$TMP/b.tts"; } >"$TMP/two.want"
t_same "they come back in order" "$TMP/two.want" "$TMP/two.ids"

# Bad input.
printf 'not a token stream at all, no sir\n' >"$TMP/junk"
t_fails "wrong magic is an error" 1 "$SH" -q --out "$TMP/bad1" "$TMP/junk"
t_grep "wrong magic is named" 'bad magic' "$TMP/.err"
t_fails "vocab mismatch between inputs is an error" 1 \
	"$SH" -q --out "$TMP/bad2" "$TMP/s.tts" "$TMP/other.tts"
t_grep "vocab mismatch is named" 'vocab mismatch between inputs' "$TMP/.err"
size=$(wc -c <"$TMP/s.tts")
head -c $((size * 2 / 3)) "$TMP/s.tts" >"$TMP/trunc.tts"
t_fails "truncated stream is an error" 1 "$SH" -q --out "$TMP/tr" --shard-tokens 40000 "$TMP/trunc.tts"
t_grep "truncation is named" 'truncated token stream (no trailer after' "$TMP/.err"
t_run "what a truncated stream leaves verifies" "$SH" verify "$TMP/tr"
left=$(ls "$TMP/tr" | grep -c -v -e '^manifest.json$' -e '^train-[0-9]*\.bin$' -e '^val-[0-9]*\.bin$')
t_same_num "no temporary files are left behind" "$left" 0
t_same_num "the truncated run is recorded as incomplete" "$(jq .complete "$TMP/tr/manifest.json")" false
t_fails "a different input does not resume a folder" 1 "$SH" -q --out "$TMP/tr" --shard-tokens 40000 "$TMP/w.tts"
cp "$TMP/tr/manifest.json" "$TMP/tr.before"
t_fails "other options do not resume a folder" 1 "$SH" -q --out "$TMP/tr" --shard-tokens 50000 "$TMP/s.tts"
t_same "a refused resume changes nothing" "$TMP/tr.before" "$TMP/tr/manifest.json"
t_run "the same input resumes the folder" "$SH" --out "$TMP/tr" --shard-tokens 40000 "$TMP/s.tts"
t_grep "the resume says so" 'resumed' "$TMP/.err"
"$SH" cat "$TMP/tr" >"$TMP/ctr.tts"
t_same "a resumed folder cats back to the input" "$TMP/s.tts" "$TMP/ctr.tts"
t_fails "a complete folder is not written again" 1 "$SH" -q --out "$TMP/tr" "$TMP/s.tts"
mkdir -p "$TMP/busy" && echo x >"$TMP/busy/notes.txt"
t_fails "a non-empty folder without a manifest is refused" 1 "$SH" -q --out "$TMP/busy" "$TMP/s.tts"
# Disk full, imitated with a file size limit (the write fails with EFBIG).
( trap '' XFSZ; ulimit -f 40; "$SH" -q --out "$TMP/full" --shard-tokens 40000 "$TMP/s.tts" ) 2>"$TMP/full.err"
rc=$?
if [ "$rc" -eq 1 ] && grep -q 'File too large' "$TMP/full.err"; then
	t_ok "a failed write is a clear error"
else
	t_not_ok "a failed write is a clear error" "exit $rc: $(cat "$TMP/full.err")"
fi
t_run "what a failed write leaves verifies" "$SH" verify "$TMP/full"
left=$(ls "$TMP/full" | grep -c -v -e '^manifest.json$' -e '^train-[0-9]*\.bin$' -e '^val-[0-9]*\.bin$')
t_same_num "a failed write leaves no temporary file" "$left" 0

# Kill -9 mid-run: the producer stalls after half the stream, so the kill lands
# while shards are committed and one is half-written.
half=$((size / 2))
mkfifo "$TMP/fifo"
{
	head -c "$half" "$TMP/s.tts"
	i=0; while [ ! -e "$TMP/go" ] && [ "$i" -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
	tail -c +$((half + 1)) "$TMP/s.tts"
} >"$TMP/fifo" 2>/dev/null &
producer=$!
"$SH" -q --out "$TMP/k" --shard-tokens 20000 --val-fraction 0.05 <"$TMP/fifo" &
pid=$!
n=0
while [ "$n" -lt 600 ] && kill -0 "$pid" 2>/dev/null; do
	c=$(jq '.train.shards | length' "$TMP/k/manifest.json" 2>/dev/null || echo 0)
	[ "${c:-0}" -ge 3 ] && ls "$TMP/k" | grep -q '\.tmp\.' && break
	sleep 0.1
	n=$((n + 1))
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
touch "$TMP/go"
wait "$producer" 2>/dev/null
t_grep "a half-written shard was there at the kill" '\.tmp\.' "$(ls "$TMP/k" >"$TMP/k.ls"; echo "$TMP/k.ls")"
t_same_num "the kill landed mid-run" "$(jq .complete "$TMP/k/manifest.json")" false
t_run "a killed run leaves a folder that verifies" "$SH" verify "$TMP/k"
t_run "rerunning finishes the killed run" "$SH" -q --out "$TMP/k" --shard-tokens 20000 --val-fraction 0.05 "$TMP/s.tts"
t_run "the finished folder verifies" "$SH" verify "$TMP/k"
"$SH" cat "$TMP/k" >"$TMP/ck.tts"
t_same "the finished folder cats back to the input" "$TMP/s.tts" "$TMP/ck.tts"

# Damage after the fact: verify names the file and the problem.
cp -r "$TMP/d" "$TMP/dmg"
printf 'X' | dd of="$TMP/dmg/train-000001.bin" bs=1 seek=300 conv=notrunc status=none
t_fails "verify fails on a flipped data byte" 1 "$SH" verify "$TMP/dmg"
t_grep "and names the shard and the checksum" 'train-000001.bin: data checksum' "$TMP/.err"
cp "$TMP/d/train-000000.bin" "$TMP/dmg/train-000001.bin"
t_fails "verify fails on a shard swapped for another" 1 "$SH" verify "$TMP/dmg"
truncate -s -3 "$TMP/dmg/train-000000.bin"
t_fails "verify fails on a truncated shard" 1 "$SH" verify "$TMP/dmg"
t_grep "and says it looks truncated" 'truncated' "$TMP/.err"

t_fails "bad usage exits 2" 2 "$SH" --val-docs 3 --val-fraction 0.1 --out "$TMP/x"
t_run "--help works" "$SH" --help
t_done
