#!/bin/sh
# titan-encode on the cc12m test shard torchtitan's Flux debug model trains on
# (../shared/fixtures/torchtitan_assets/cc12m_test/cc12m-train-0000.tar, 32
# samples), with the tests' deterministic tiny encoders (test_fluxin mkmodels)
# and the Flux tokenizer fixtures: the records against torchtitan 0.3.0's
# flux_datasets + FluxEmbedder (tests/encode/golden/cc12m.safetensors,
# scripts/flux_encode_golden.py) and against lib/tok, lib/textenc and lib/image
# run on each sample alone; titan-shard's round trip of the stream.
. tests/lib.sh
REL=torchtitan_assets/cc12m_test/cc12m-train-0000.tar
t_need_fixture "$REL" tokenizers/clip_vit_l14/tokenizer.json \
	tokenizers/sentencepiece_unigram/tokenizer.json
TAR=$(fx "$REL")
T5TOK=$(fx tokenizers/sentencepiece_unigram/tokenizer.json)
CLIPTOK=$(fx tokenizers/clip_vit_l14/tokenizer.json)
TF="$BUILD/tests/encode/test_fluxin"
"$TF" mkmodels "$TMP/m" || { t_not_ok "the tiny encoders are made"; t_done; }
enc() { "$BIN/titan-encode" --t5 "$TMP/m/t5" --clip "$TMP/m/clip" --t5-tokenizer "$T5TOK" \
	--clip-tokenizer "$CLIPTOK" "$@"; }

enc --crop center <"$TAR" >"$TMP/s.ttfr" 2>"$TMP/err"
rc=$?
t_grep "the shard's 32 samples become 32 records" \
	'32 samples read: 32 records, 0 skipped' "$TMP/err"
t_grep "a throughput line in images/s ends the run" 'throughput: .* images/s' "$TMP/err"
if [ "$rc" = 0 ]; then t_ok "titan-encode exits 0"; else t_not_ok "titan-encode exits 0" "$(tail -3 "$TMP/err")"; fi

"$TF" golden "$TMP/s.ttfr" tests/encode/golden/cc12m.safetensors >"$TMP/g" 2>&1
if [ $? = 0 ] && ! grep -q DIFFERS "$TMP/g"; then
	t_ok "ids, offsets and pixels equal torchtitan's, encodings within 1e-5"
	sed 's/^/# /' "$TMP/g" | grep -e within -e weights
else
	t_not_ok "ids, offsets and pixels equal torchtitan's, encodings within 1e-5" "$(cat "$TMP/g")"
fi

OMP_NUM_THREADS=1 "$TF" recheck "$TMP/s.ttfr" "$TMP/m" "$T5TOK" "$CLIPTOK" "$TAR" >"$TMP/r" 2>&1
if [ $? = 0 ] && ! grep -q DIFFERS "$TMP/r"; then
	t_ok "every record equals lib/tok, lib/textenc and lib/image on its sample alone"
else
	t_not_ok "every record equals lib/tok, lib/textenc and lib/image on its sample alone" \
		"$(cat "$TMP/r")"
fi

S="$BIN/titan-shard"
t_run "titan-shard shards the record stream" "$S" -q --out "$TMP/sh" --shard-records 10 \
	--val-fraction 0.25 "$TMP/s.ttfr"
"$S" info "$TMP/sh" >"$TMP/info" 2>&1
t_grep "... into train and val shards" '^train  *3 shards, 24 records' "$TMP/info"
t_run "titan-shard verify passes" "$S" verify "$TMP/sh"
"$S" cat "$TMP/sh" >"$TMP/back.ttfr"
t_same "titan-shard cat gives the stream back byte for byte" "$TMP/s.ttfr" "$TMP/back.ttfr"

# the random crop: each record's offset is the seed's for its index, not the centre
enc -q --seed 5 <"$TAR" >"$TMP/r.ttfr" 2>"$TMP/err"
OMP_NUM_THREADS=1 "$TF" recheck "$TMP/r.ttfr" "$TMP/m" "$T5TOK" "$CLIPTOK" "$TAR" >"$TMP/r" 2>&1
t_grep "--crop random: the offsets are the seed's and the pixels lib/image's" \
	'^ok pixels, size and offset' "$TMP/r"
if cmp -s "$TMP/r.ttfr" "$TMP/s.ttfr"; then
	t_not_ok "--crop random differs from --crop center"
else
	t_ok "--crop random differs from --crop center"
fi

# two shards back to back on stdin, as titan-hf-fetch --stdout gives them
cat "$TAR" "$TAR" | enc --crop center -q >"$TMP/two.ttfr" 2>"$TMP/err"
"$S" -q --out "$TMP/two" "$TMP/two.ttfr" >>"$TMP/err" 2>&1
"$S" info "$TMP/two" >"$TMP/info2" 2>&1
t_grep "concatenated tars on stdin are read as one input (64 records)" \
	'^train  *1 shards, 64 records' "$TMP/info2"
t_done
