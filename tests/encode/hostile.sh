#!/bin/sh
# titan-encode on hostile inputs: images that are truncated, zero-size, claim
# a huge size in their header or are no image; tar members named with "..",
# an absolute path or a control character; a sample with no caption or one
# that is not UTF-8; a truncated tar.  Each bad sample is skipped (and each
# bad member refused) with a line naming it, never a crash; the good samples
# are encoded; an input that ends early leaves a stream that titan-shard
# refuses as truncated, and no --output file at all.
. tests/lib.sh
t_need_fixture tokenizers/clip_vit_l14/tokenizer.json tokenizers/sentencepiece_unigram/tokenizer.json
TF="$BUILD/tests/encode/test_fluxin"
S="$BIN/titan-shard"
"$TF" mkmodels "$TMP/m" || { t_not_ok "the tiny encoders are made"; t_done; }
enc() { "$BIN/titan-encode" --t5 "$TMP/m/t5" --clip "$TMP/m/clip" --image-size 64 \
	--t5-tokenizer "$(fx tokenizers/sentencepiece_unigram/tokenizer.json)" \
	--clip-tokenizer "$(fx tokenizers/clip_vit_l14/tokenizer.json)" "$@"; }
I=tests/image/golden/img
H=tests/image/golden/hostile
printf 'a photo of a cat' >"$TMP/cap.txt"
printf 'caf\303' >"$TMP/bad.txt"
printf 'GIF89a' >"$TMP/gif.jpg"
"$TF" mktar "$TMP/h.tar" \
	good1.jpg $I/big_jpeg_300x257.jpg good1.txt "$TMP/cap.txt" \
	trunc.jpg $H/truncated.jpg trunc.txt "$TMP/cap.txt" \
	huge.jpg $H/huge.jpg huge.txt "$TMP/cap.txt" \
	zero.jpg $H/zero_size.jpg zero.txt "$TMP/cap.txt" \
	gif.jpg "$TMP/gif.jpg" gif.txt "$TMP/cap.txt" \
	../evil.jpg $I/big_jpeg_300x257.jpg ../evil.txt "$TMP/cap.txt" \
	/etc/abs.jpg $I/big_jpeg_300x257.jpg \
	"$(printf 'ctl\001x.jpg')" $I/big_jpeg_300x257.jpg \
	small.jpg $I/jpeg_33x100_s0.jpg small.txt "$TMP/cap.txt" \
	nocap.jpg $I/big_jpeg_512x384.jpg \
	badcap.jpg $I/big_jpeg_512x384.jpg badcap.txt "$TMP/bad.txt" \
	png.png $I/big_png_400x300.png png.txt "$TMP/cap.txt" \
	empty.jpg - empty.txt "$TMP/cap.txt" \
	noimg.txt "$TMP/cap.txt" || { t_not_ok "the hostile tar is made"; t_done; }

enc <"$TMP/h.tar" >"$TMP/h.ttfr" 2>"$TMP/err"
rc=$?
if [ "$rc" = 0 ]; then t_ok "a tar of hostile samples is encoded, exit 0"; else
	t_not_ok "a tar of hostile samples is encoded, exit 0" "exit $rc: $(tail -3 "$TMP/err")"; fi
t_grep "a truncated JPEG is skipped, named" '^titan-encode: skipped trunc: image refused' "$TMP/err"
t_grep "a huge-header JPEG is skipped before decoding, named" '^titan-encode: skipped huge: image refused: .*limit' "$TMP/err"
t_grep "a zero-size member is skipped, named" '^titan-encode: skipped zero: image refused' "$TMP/err"
t_grep "a member empty in the tar is skipped, named" '^titan-encode: skipped empty: image refused' "$TMP/err"
t_grep "a GIF under .jpg is skipped, named" '^titan-encode: skipped gif: image refused' "$TMP/err"
t_grep "a \"..\" member name is refused, named" 'refused: -: member \.\./evil\.jpg refused' "$TMP/err"
t_grep "an absolute member name is refused, named" 'refused: -: member /etc/abs\.jpg refused' "$TMP/err"
t_grep "a control character in a name is refused, shown as \\\\x01" 'member ctl\\x01x\.jpg refused' "$TMP/err"
t_grep "an image under --image-size is skipped, named" '^titan-encode: skipped small: image 33x100 is smaller than 64' "$TMP/err"
t_grep "a sample without a caption is skipped, named" '^titan-encode: skipped nocap: no caption' "$TMP/err"
t_grep "a caption that is not UTF-8 is skipped, named" '^titan-encode: skipped badcap: caption is not UTF-8' "$TMP/err"
t_grep "a sample without an image is skipped, named" '^titan-encode: skipped noimg: no image' "$TMP/err"
t_grep "the summary counts each reason" '11 samples read: 2 records, 9 skipped (1 no image, 5 undecodable image, 1 too small, 1 no caption, 1 caption not UTF-8), 4 tar members refused' "$TMP/err"
"$S" -q --out "$TMP/sh" "$TMP/h.ttfr" >"$TMP/sherr" 2>&1
"$S" info "$TMP/sh" >"$TMP/info" 2>&1
t_grep "the good samples' two records shard and verify" '^train  *1 shards, 2 records' "$TMP/info"

# an archive cut short: the records before the cut, then no trailer
head -c 40000 "$TMP/h.tar" >"$TMP/cut.tar"
enc <"$TMP/cut.tar" >"$TMP/cut.ttfr" 2>"$TMP/err"
rc=$?
if [ "$rc" = 1 ]; then t_ok "a truncated tar ends the run with exit 1"; else
	t_not_ok "a truncated tar ends the run with exit 1" "exit $rc"; fi
t_grep "... saying so" 'titan-encode: -: .*[Tt]runcated' "$TMP/err"
t_fails "titan-shard refuses the stream it left" 1 "$S" -q --out "$TMP/cut" "$TMP/cut.ttfr"
t_grep "... as truncated" 'truncated Flux record stream' "$TMP/.err"
enc -o "$TMP/out.ttfr" <"$TMP/cut.tar" 2>/dev/null
if [ -e "$TMP/out.ttfr" ] || ls "$TMP"/out.ttfr.tmp.* >/dev/null 2>&1; then
	t_not_ok "--output: a failed run leaves no file"
else
	t_ok "--output: a failed run leaves no file"
fi
enc -q -o "$TMP/out.ttfr" <"$TMP/h.tar"
t_same "--output writes what stdout gets" "$TMP/h.ttfr" "$TMP/out.ttfr"

# damage in a record is refused naming it
cp "$TMP/h.ttfr" "$TMP/bad.ttfr"
printf 'X' | dd of="$TMP/bad.ttfr" bs=1 seek=20000 conv=notrunc 2>/dev/null
t_fails "a damaged record is refused" 1 "$S" -q --out "$TMP/bad" "$TMP/bad.ttfr"
t_grep "... naming it" 'record 0: record checksum' "$TMP/.err"

t_fails "a missing autoencoder is refused" 1 enc --autoencoder "$TMP/none.safetensors" -q <"$TMP/h.tar"
t_grep "... naming it" 'autoencoder .*none.safetensors' "$TMP/.err"
t_fails "--image-size not a multiple of the autoencoder's factor is refused" 1 enc -q \
	--autoencoder "$TMP/m/ae.safetensors" --ae-config "$TMP/m/ae.json" --image-size 66 <"$TMP/h.tar"
t_grep "... saying why" "not a multiple of the autoencoder's 4" "$TMP/.err"
t_fails "--t5 and --clip are required" 2 "$BIN/titan-encode" --t5 "$TMP/m/t5"
t_done
