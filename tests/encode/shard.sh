#!/bin/sh
# titan-shard on Flux record streams: shards and a manifest, an interrupted
# run (a truncated stream) resumed to the same shards, the refusals (a
# complete folder, another stream into an interrupted folder, token-stream
# options), damage that verify finds, bfloat16 records, and cat's round trip.
. tests/lib.sh
t_need_fixture tokenizers/clip_vit_l14/tokenizer.json tokenizers/sentencepiece_unigram/tokenizer.json
TF="$BUILD/tests/encode/test_fluxin"
S="$BIN/titan-shard"
"$TF" mkmodels "$TMP/m" || { t_not_ok "the tiny encoders are made"; t_done; }
enc() { "$BIN/titan-encode" -q --t5 "$TMP/m/t5" --clip "$TMP/m/clip" --image-size 64 \
	--t5-tokenizer "$(fx tokenizers/sentencepiece_unigram/tokenizer.json)" \
	--clip-tokenizer "$(fx tokenizers/clip_vit_l14/tokenizer.json)" "$@"; }
I=tests/image/golden/img
set --
for k in 0 1 2; do
	for f in big_jpeg_256x256.jpg big_jpeg_300x257.jpg big_jpeg_512x384.jpg big_png_400x300.png; do
		n=$((n + 1))
		printf 'caption %s of %s' "$n" "$f" >"$TMP/c$n.txt"
		set -- "$@" "s$n.${f##*.}" "$I/$f" "s$n.txt" "$TMP/c$n.txt"
	done
done
"$TF" mktar "$TMP/in.tar" "$@" || { t_not_ok "the input tar is made"; t_done; }
enc <"$TMP/in.tar" >"$TMP/s.ttfr"
enc --seed 1 <"$TMP/in.tar" >"$TMP/other.ttfr"

size=$(wc -c <"$TMP/s.ttfr")
head -c $((size * 2 / 3)) "$TMP/s.ttfr" >"$TMP/cut.ttfr"
t_fails "a truncated stream ends the run, exit 1" 1 "$S" -q --out "$TMP/d" --shard-records 3 \
	--val-docs 2 "$TMP/cut.ttfr"
"$S" info "$TMP/d" >"$TMP/info" 2>&1
t_grep "... leaving the shards written so far, marked incomplete" 'INCOMPLETE' "$TMP/info"
t_fails "another stream into the interrupted folder is refused" 1 "$S" -q --out "$TMP/d" \
	--shard-records 3 --val-docs 2 "$TMP/other.ttfr"
t_grep "... saying why" 'another Flux record stream' "$TMP/.err"
t_fails "other options into the interrupted folder are refused" 1 "$S" -q --out "$TMP/d" \
	--shard-records 4 --val-docs 2 "$TMP/s.ttfr"
t_run "the whole stream resumes the run" "$S" --out "$TMP/d" --shard-records 3 --val-docs 2 \
	"$TMP/s.ttfr"
t_grep "... saying it resumed" 'resumed an interrupted run' "$TMP/.err"
"$S" info "$TMP/d" >"$TMP/info" 2>&1
t_grep "twelve records: 2 to val, 10 in 4 train shards" '^train  *4 shards, 10 records' "$TMP/info"
t_run "verify passes" "$S" verify "$TMP/d"
"$S" cat "$TMP/d" >"$TMP/back.ttfr"
t_same "cat gives the stream back byte for byte" "$TMP/s.ttfr" "$TMP/back.ttfr"
"$S" cat --split val "$TMP/d" >"$TMP/val.ttfr"
"$S" -q --out "$TMP/v" "$TMP/val.ttfr"
"$S" info "$TMP/v" >"$TMP/vinfo" 2>&1
t_grep "cat --split val gives the two val records" '^train  *1 shards, 2 records' "$TMP/vinfo"
t_fails "a complete folder is refused" 1 "$S" -q --out "$TMP/d" --shard-records 3 --val-docs 2 \
	"$TMP/s.ttfr"
t_fails "--compress is for token streams" 2 "$S" -q --out "$TMP/z" --compress zstd "$TMP/s.ttfr"
"$S" info --json "$TMP/d/train-000000.rec" >"$TMP/j" 2>&1
t_grep "info --json on a shard file gives its header" '"records": 3' "$TMP/j"

cp "$TMP/d/train-000001.rec" "$TMP/keep.rec"
printf 'Z' | dd of="$TMP/d/train-000001.rec" bs=1 seek=12000 conv=notrunc 2>/dev/null
t_fails "verify finds a damaged record" 1 "$S" verify "$TMP/d"
t_grep "... naming the shard and the record" 'train-000001.rec: record 0: record checksum' "$TMP/.err"
cp "$TMP/keep.rec" "$TMP/d/train-000001.rec"
cp "$TMP/keep.rec" "$TMP/d/train-000099.rec"
"$S" verify "$TMP/d" >"$TMP/out" 2>&1
t_grep "a shard file the manifest does not list is a warning" 'train-000099.rec: not listed' "$TMP/out"

enc --dtype bfloat16 <"$TMP/in.tar" >"$TMP/bf.ttfr"
"$S" info "$TMP/bf.ttfr" >"$TMP/binfo" 2>&1
t_grep "--dtype bfloat16 records say so" '^storage     bfloat16' "$TMP/binfo"
"$S" -q --out "$TMP/bf" "$TMP/bf.ttfr"
"$S" cat "$TMP/bf" >"$TMP/bfback.ttfr"
t_same "bfloat16 records make the round trip" "$TMP/bf.ttfr" "$TMP/bfback.ttfr"
t_done
