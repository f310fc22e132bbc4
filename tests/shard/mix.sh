#!/bin/sh
# titan-shard mix: a mixture of shard folders, its info and verify, and what
# it refuses (each with one line and exit 1, or 2 for bad usage).
. tests/lib.sh

GEN="$BUILD/tests/shard/test_gen"
SH="$BIN/titan-shard"

for s in 1 2 3; do
	"$GEN" gen $s 200 500 80 >"$TMP/s$s.tts"
	"$SH" -q --out "$TMP/src$s" --val-fraction 0.1 "$TMP/s$s.tts"
done
cd "$TMP" || exit 1
t_run "mix three folders" "$SH" mix --weight 0.7 src1 --weight 0.2 src2 --weight 0.1 src3 --out mix
t_grep "mix says what it wrote" 'mix: a mixture of 3 shard folders, seed 42' "$TMP/.err"
t_run "info on a mixture" "$SH" info mix
t_grep "info names the sources and their shares" 'source 2 .*weight 0.2 (20.00% of windows).*\.\./src2$' "$TMP/.out"
t_grep "info gives the seed" 'titan mixture of 3 shard folders, seed 42' "$TMP/.out"
t_run "info --json on a mixture" "$SH" info --json mix
if command -v jq >/dev/null; then
	got=$(jq -r '[.format, .seed, (.sources | length), .sources[0].path, .sources[2].weight] | join(" ")' "$TMP/.out")
	if [ "$got" = "titan-mixture 42 3 ../src1 0.1" ]; then t_ok "the JSON is the manifest"; else
		t_not_ok "the JSON is the manifest" "$got"; fi
	sha=$(sha256sum src2/manifest.json | cut -d' ' -f1)
	if [ "$(jq -r '.sources[1].manifest_sha256' mix/manifest.json)" = "$sha" ]; then
		t_ok "a source is named by its manifest's SHA-256"
	else
		t_not_ok "a source is named by its manifest's SHA-256"
	fi
else
	t_skip "the JSON is the manifest" "no jq"
fi
t_run "verify a mixture" "$SH" verify mix
t_grep "verify says ok" '^mix: ok$' "$TMP/.out"
t_run "--seed and equal weights" "$SH" mix --seed 7 src1 src2 --out mix7
"$SH" info mix7 >"$TMP/i7"
t_grep "equal weights by default" 'weight 1 (50.00% of windows)' "$TMP/i7"

# A source rebuilt after mixing: verify and info say so, in one line.
cp -r src3 src3.bak
"$SH" -q --out src3b --val-fraction 0.2 s3.tts
rm -rf src3 && mv src3b src3
t_fails "verify refuses a source whose manifest changed" 1 "$SH" verify mix
t_grep "naming the source and what to do" 'mixture source 3 (mix/../src3): its manifest.json changed since the mixture was made (SHA-256 .*run titan-shard mix again' "$TMP/.err"
if [ "$(wc -l <"$TMP/.err")" -eq 1 ]; then t_ok "in one line"; else t_not_ok "in one line" "$(cat "$TMP/.err")"; fi
t_run "info still describes it" "$SH" info mix
t_grep "and marks it" 'source 3 .*\[changed or missing since mixed' "$TMP/.out"
rm -rf src3 && mv src3.bak src3

# A damaged shard inside a source: verify reads the sources' shards too.
cp -r src2 src2.bak
printf 'X' | dd of=src2/train-000000.bin bs=1 seek=200 conv=notrunc 2>/dev/null
t_fails "verify reads every source's shards" 1 "$SH" verify mix
t_grep "naming the damaged shard" 'src2/train-000000.bin' "$TMP/.err"
rm -rf src2 && mv src2.bak src2
t_run "whole again" "$SH" verify mix

# Refusals.
t_fails "a negative weight" 1 "$SH" mix --weight -1 src1 --weight 1 src2 --out bad
t_grep "names the weight" 'weight -1 (source 1): weights must be finite and >= 0' "$TMP/.err"
t_fails "weights that sum to zero" 1 "$SH" mix --weight 0 src1 --weight 0 src2 --out bad
t_grep "says so" 'the weights sum to 0' "$TMP/.err"
t_fails "a missing source" 1 "$SH" mix src1 nowhere --out bad
t_grep "names it" '^titan-shard: nowhere: no such folder$' "$TMP/.err"
t_fails "a source named twice" 1 "$SH" mix src1 ./src1/ --out bad
t_grep "says which" 'sources 1 and 2 (./src1/) are the same data' "$TMP/.err"
t_fails "a copy of a source (same manifest)" 1 sh -c "cp -r '$TMP/src1' '$TMP/copy1' && '$SH' mix src1 copy1 --out bad"
t_fails "a mixture as a source" 1 "$SH" mix src1 mix --out bad
t_fails "weights not one per source" 2 "$SH" mix --weight 1 src1 src2 --out bad
t_fails "mix without --out" 2 "$SH" mix src1
t_fails "--weight outside mix" 2 "$SH" --weight 1 --out x s1.tts
if [ -e bad ]; then t_not_ok "nothing made for a refused mixture"; else t_ok "nothing made for a refused mixture"; fi
t_fails "a mixture into a shard folder" 1 "$SH" mix src1 src2 --out src3
t_fails "cat refuses a mixture" 1 "$SH" cat mix
t_grep "saying what it is" 'a mixture of shard folders (titan-shard mix), not a shard folder' "$TMP/.err"
t_run "a mixture is replaced by a new one" "$SH" mix --weight 1 src1 --weight 3 src2 --out mix
"$SH" info mix >"$TMP/i"
t_grep "with the new weights" 'weight 3 (75.00% of windows)' "$TMP/i"
t_done
