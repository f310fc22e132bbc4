#!/bin/sh
# titan-train --module flux from titan-encode's records: the samples encoded
# once (titan-encode, sharded by titan-shard or one record file) instead of
# every step.  On the demo's pieces (flux_shapes' 64-px images: square, so
# the crop a record fixed is the one the tar loader draws; the demo's T5 and
# CLIP with their tokenizers, its autoencoder), 4 steps of flux_debugmodel
# at titan's flux-tiny
# from the record folder (3 shards) and from the record file, the validator
# reading the same data, equal the run from the tar bit for bit (loss, grad
# norm, lr, validation loss): the same encodings and the
# same draws (records of non-square images keep the crop titan-encode drew;
# the run's own draw of it is made and unused).  FSDP 2 in bf16 from bfloat16 records (encoders in bf16, as the
# run's own are) likewise.  Records that do not fit the run are refused
# naming what differs: another image size, no autoencoder moments, another
# T5's weights.
. tests/lib.sh
. tests/train/steps.inc
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 NO_COLOR=1
DB=$BUILD/demo
A=scripts/demo/flux
for p in "$DB/flux_shapes" "$DB/flux_encoders" "$BIN/titan-encode" "$BIN/titan-shard"; do
	if [ ! -x "$p" ]; then
		t_skip "Flux training from records" "$p is not built (make)"
		t_done
	fi
done

"$DB/flux_shapes" -n 24 --seed 3 -o "$TMP/shapes.tar" 2>/dev/null
cp -r "$A/t5" "$A/clip" "$TMP/"
if ! "$DB/flux_encoders" t5 "$TMP/t5" || ! "$DB/flux_encoders" clip "$TMP/clip"; then
	t_not_ok "the demo's encoders are made"
	t_done
fi
# enc OUT ARGS: the tar's records with the autoencoder's moments (--no-ae:
# without)
enc() {
	out=$1
	shift
	ae="--autoencoder $A/ae.safetensors --ae-config $A/ae.json"
	[ "${1:-}" = --no-ae ] && ae= && shift
	# shellcheck disable=SC2086 # the autoencoder's options, split
	"$BIN/titan-encode" -q --t5 "$TMP/t5" --clip "$TMP/clip" $ae --image-size 64 \
		--t5-len 32 --crop center -o "$out" "$@" <"$TMP/shapes.tar"
}
t_run "titan-encode: the tar's 24 samples as records" enc "$TMP/s.ttfr"
t_run "titan-shard: 3 shards of them" "$BIN/titan-shard" -q --out "$TMP/recs" \
	--shard-records 8 "$TMP/s.ttfr"

# flux_run DUMP ARGS: flux_debugmodel at the demo's settings and flux-tiny
# (the records' part is the data; the trunk's width changes nothing of it),
# RS steps
RS=4
cat >"$TMP/flux_run.sh" <<END
flux_run() {
	d=\$1
	shift
	"$BIN/titan-train" --module flux --config flux_debugmodel --flavor flux-tiny \\
		--training.mixed_precision_param float32 --debug.seed 5 --training.steps $RS \\
		--dataloader.img_size 64 --tokenizer.max_t5_encoding_len 32 \\
		--encoder.t5_encoder "$TMP/t5" --encoder.clip_encoder "$TMP/clip" \\
		--encoder.autoencoder_path "$A/ae.safetensors" \\
		--tokenizer.t5_tokenizer_path "$TMP/t5" --tokenizer.clip_tokenizer_path "$TMP/clip" \\
		--dump_folder "$TMP/\$d" "\$@"
}
END
. "$TMP/flux_run.sh"
# the validator on the same data every 2 steps (its loss alone: no images)
val="--validator.enable --validator.steps 1 --validator.freq 2 --validator.dataloader.img_size 64
	--validator.save_img_count 0"
# steps_val METRICS: the training steps, then the validation losses
steps_val() {
	steps_of "$1"
	sed -n 's/^{"step":\([0-9]*\),"validation_loss":\([^,]*\),.*/val \1 \2/p' "$1"
}
# shellcheck disable=SC2086 # the validator's options, split
t_run "$RS steps from the tar" flux_run tar --dataloader.dataset_path "$TMP/shapes.tar" $val
steps_val "$TMP/tar/metrics.jsonl" >"$TMP/tar.tsv"
t_grep "  with the validator's losses" '^val 2 ' "$TMP/tar.tsv"
for src in recs s.ttfr; do
	# shellcheck disable=SC2086
	t_run "$RS steps from $src" flux_run "r-$src" --dataloader.dataset_path "$TMP/$src" $val
	steps_val "$TMP/r-$src/metrics.jsonl" >"$TMP/r-$src.tsv"
	t_same "from $src: the tar's steps and validation losses, bit for bit" "$TMP/tar.tsv" \
		"$TMP/r-$src.tsv"
done

# FSDP 2 in bf16: the encoders in bf16 under dp_shard, so bfloat16 records
# made by encoders in bf16; each rank every other record
# at the ranks' one thread: on AVX2 the split of a large product over the
# threads moves rows into OpenBLAS's tail kernels, other bits at other
# thread counts (titan-encode(1), -j)
OMP_NUM_THREADS=1
t_run "titan-encode: bfloat16 records" enc "$TMP/b.ttfr" --dtype bfloat16 \
	--model-dtype bfloat16
OMP_NUM_THREADS=2
for src in shapes.tar b.ttfr; do
	t_run "FSDP 2 in bf16 from $src" env OMP_NUM_THREADS=1 $MPIRUN -np 2 \
		sh -c '. "$0"; flux_run "$@"' "$TMP/flux_run.sh" "f-$src" --training.steps 3 \
		--training.mixed_precision_param bfloat16 --dataloader.dataset_path "$TMP/$src"
	steps_of "$TMP/f-$src/metrics.jsonl" >"$TMP/f-$src.tsv"
done
t_same "FSDP 2 in bf16: the records' steps are the tar's, bit for bit" \
	"$TMP/f-shapes.tar.tsv" "$TMP/f-b.ttfr.tsv"

# records that do not fit the run
enc "$TMP/small.ttfr" --image-size 32
t_fails "records of 32-px images are refused" 1 flux_run x --dataloader.dataset_path \
	"$TMP/small.ttfr"
t_grep "  naming the size and the setting" \
	'image_size 32 in the records, 64 for this run (dataloader.img_size)' "$TMP/.err"
enc "$TMP/nomoments.ttfr" --no-ae
t_fails "records without the autoencoder's moments are refused" 1 flux_run x \
	--dataloader.dataset_path "$TMP/nomoments.ttfr"
t_grep "  saying how to make them" 'titan-encode --autoencoder' "$TMP/.err"
# another T5: the same files but one weight's last byte
cp -r "$TMP/t5" "$TMP/t5b"
printf '\001' | dd of="$TMP/t5b/model.safetensors" bs=1 seek=$(($(wc -c <"$TMP/t5/model.safetensors") - 1)) \
	conv=notrunc 2>/dev/null
t_fails "records of another T5 are refused" 1 flux_run x --dataloader.dataset_path "$TMP/recs" \
	--encoder.t5_encoder "$TMP/t5b"
t_grep "  naming the encoder" "encoded with other encoders than this run's: encoder.t5_encoder's weights differ" "$TMP/.err"
t_done
