#!/bin/sh
# titan-encode --format coco: the COCO layout torchtitan's Flux validation
# reads (howard-hou/COCO-Text's parquet rows: an image struct, a caption list,
# an image_id), written by pyarrow four ways (tests/encode/golden/coco/:
# SNAPPY with dictionaries and v1 pages in two row groups, ZSTD with v2
# pages, GZIP plain, uncompressed with a dictionary and v2 pages).  Every
# layout gives the same records, equal to torchtitan 0.3.0's
# _coco_data_processor + FluxEmbedder at img_size 64
# (tests/encode/golden/coco.safetensors, scripts/flux_encode_golden.py
# --coco), and with lib/fluxae's tiny autoencoder the moments equal to
# torchtitan's AutoEncoder.encoder within 1e-5; damaged files are refused
# naming them.
. tests/lib.sh
t_need_fixture tokenizers/clip_vit_l14/tokenizer.json tokenizers/sentencepiece_unigram/tokenizer.json
TF="$BUILD/tests/encode/test_fluxin"
"$TF" mkmodels "$TMP/m" || { t_not_ok "the tiny encoders are made"; t_done; }
enc() { "$BIN/titan-encode" --t5 "$TMP/m/t5" --clip "$TMP/m/clip" --image-size 64 --crop center \
	--t5-tokenizer "$(fx tokenizers/sentencepiece_unigram/tokenizer.json)" \
	--clip-tokenizer "$(fx tokenizers/clip_vit_l14/tokenizer.json)" --format coco "$@"; }
G=tests/encode/golden/coco
enc "$G/coco_snappy_dict_v1.parquet" >"$TMP/ref.ttfr" 2>"$TMP/err"
t_grep "six rows, one too small: five records" '6 samples read: 5 records, 1 skipped (1 too small)$' "$TMP/err"
t_grep "the small one is named by its image_id" 'skipped 184613: image 160x48 is smaller than 64' "$TMP/err"
"$TF" golden "$TMP/ref.ttfr" tests/encode/golden/coco.safetensors >"$TMP/g" 2>&1
if [ $? = 0 ] && ! grep -q DIFFERS "$TMP/g"; then
	t_ok "ids, offsets and pixels equal torchtitan's COCO path, encodings within 1e-5"
else
	t_not_ok "ids, offsets and pixels equal torchtitan's COCO path, encodings within 1e-5" "$(cat "$TMP/g")"
fi
enc -q --autoencoder "$TMP/m/ae.safetensors" --ae-config "$TMP/m/ae.json" --pixels \
	"$G/coco_snappy_dict_v1.parquet" >"$TMP/ae.ttfr" 2>"$TMP/err"
"$TF" golden "$TMP/ae.ttfr" tests/encode/golden/coco.safetensors >"$TMP/g" 2>&1
if [ $? = 0 ] && ! grep -q DIFFERS "$TMP/g" && grep -q '^ok moments within' "$TMP/g"; then
	t_ok "--autoencoder: the moments are torchtitan's AutoEncoder.encoder's, within 1e-5"
	grep '^ok moments within' "$TMP/g" | sed 's/^/# /'
else
	t_not_ok "--autoencoder: the moments are torchtitan's AutoEncoder.encoder's, within 1e-5" \
		"$(cat "$TMP/g" "$TMP/err")"
fi
for v in zstd_v2 gzip_plain none_dict_v2; do
	enc -q "$G/coco_$v.parquet" >"$TMP/$v.ttfr" 2>"$TMP/err"
	t_same "the $v layout gives the same records" "$TMP/ref.ttfr" "$TMP/$v.ttfr"
done
enc -q "$G/coco_zstd_v2.parquet" "$G/coco_gzip_plain.parquet" >"$TMP/two.ttfr" 2>"$TMP/err"
"$BIN/titan-shard" -q --out "$TMP/sh" "$TMP/two.ttfr" 2>"$TMP/err"
"$BIN/titan-shard" info "$TMP/sh" >"$TMP/info" 2>&1
t_grep "two files are one input (ten records)" '^train  *1 shards, 10 records' "$TMP/info"

n=$(wc -c <"$G/coco_zstd_v2.parquet")
head -c $((n - 100)) "$G/coco_zstd_v2.parquet" >"$TMP/cut.parquet"
t_fails "a truncated parquet file is refused" 1 enc -q "$TMP/cut.parquet"
t_grep "... naming it" "cut.parquet: not a Parquet file" "$TMP/.err"
cp "$G/coco_zstd_v2.parquet" "$TMP/bad.parquet"
printf 'XXXXXXXX' | dd of="$TMP/bad.parquet" bs=1 seek=4 conv=notrunc 2>/dev/null
t_fails "a damaged page header is refused" 1 enc -q "$TMP/bad.parquet"
t_grep "... naming the file and the column" "bad.parquet: column image.bytes" "$TMP/.err"
t_fails "parquet on standard input is refused" 1 enc -q - <"$G/coco_zstd_v2.parquet"
t_grep "... saying why" "cannot come from standard input" "$TMP/.err"
t_done
