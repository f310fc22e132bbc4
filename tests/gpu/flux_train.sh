#!/bin/sh
# titan-train --module flux on the CUDA backend (--backend cuda: the
# transformer on the GPU, the encoders and the autoencoder on the CPU)
# against the CPU backend.  Without a GPU: refused with one line saying why,
# and the GPU half reports skipped.  With one: flux_debugmodel at
# tests/fluxtrain/train.sh's settings (the cc12m test shard at 64 px, the
# test tokenizer, T5 length 16, seed 7), 3 steps on both backends, in float32
# and in the presets' bf16: the log names the CUDA backend and its memory is
# the arena's; each step's loss within 1e-3 (float32) and 5e-3 (bf16)
# relative of the CPU's, the grad norm within 1e-2 and 5e-2.  The bounds are
# derived, not measured (tests/gpu/test_gpu_flux holds one step's loss and
# gradients to the CPU's; three steps of AdamW on gradients near zero move
# the runs apart further, as float32 rounding does between torch and titan
# in train.sh): scripts/gpu/check.sh runs this where a GPU is lent.
. tests/lib.sh

TRAIN="$BIN/titan-train"
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} NO_COLOR=1
if [ ! -x "$TRAIN" ]; then
	t_skip "titan-train --module flux on the CUDA backend" "titan-train is not built"
	t_done
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${gpus:-0}" -eq 0 ]; then
	t_fails "--module flux --backend cuda without a GPU: refused" 1 "$TRAIN" --module flux \
		--config flux_debugmodel --backend cuda --dump_folder "$TMP/nogpu"
	t_grep "  saying why, in one line" '^titan-train: --backend cuda: no GPU for this process' \
		"$TMP/.err"
	t_skip "flux_debugmodel on the CUDA and the CPU backend" "no GPU on this machine"
	t_done
fi

t_need_fixture torchtitan_assets/cc12m_test tokenizers/torchtitan_test
TOK=$(fx tokenizers/torchtitan_test)
"$BUILD/tests/fluxtrain/test_fluxtrain" mkmodels "$TMP/m" ||
	{ t_not_ok "the test encoders are made"; t_done; }
flux_run() {
	"$TRAIN" --module flux --config flux_debugmodel --debug.seed 7 --training.steps 3 \
		--dataloader.dataset_path "$(fx torchtitan_assets/cc12m_test)" \
		--dataloader.img_size 64 --tokenizer.test_mode --tokenizer.max_t5_encoding_len 16 \
		--tokenizer.t5_tokenizer_path "$TOK" --tokenizer.clip_tokenizer_path "$TOK" \
		--encoder.t5_encoder "$TMP/m/t5" --encoder.clip_encoder "$TMP/m/clip" \
		--encoder.autoencoder_path "$TMP/m/ae.safetensors" "$@"
}
# steps DUMP OUT: "step loss grad_norm" lines of a run's metrics
steps() {
	sed -n 's/^{"step":\([0-9]*\),"loss":\([^,]*\),"grad_norm":\([^,]*\),.*/\1 \2 \3/p' \
		"$1/metrics.jsonl" >"$2"
}
for prec in float32 bfloat16; do
	for be in cpu cuda; do
		t_run "3 steps in $prec on the $be backend" flux_run --backend $be \
			--training.mixed_precision_param $prec --dump_folder "$TMP/$be-$prec"
		steps "$TMP/$be-$prec" "$TMP/$be-$prec.tsv"
	done
	t_grep "  the log names the CUDA backend" 'CUDA backend: the transformer on device' "$TMP/.err"
	lb=1e-3 gb=1e-2
	[ $prec = bfloat16 ] && lb=5e-3 gb=5e-2
	if awk -v lb=$lb -v gb=$gb 'NR == FNR { l[$1] = $2; g[$1] = $3; next }
		{ n++; dl = $2 - l[$1]; dg = $3 - g[$1]; if (dl < 0) dl = -dl; if (dg < 0) dg = -dg
		  if (!($1 in l) || dl > lb * l[$1] || dg > gb * g[$1]) bad = 1
		  printf "# step %d: loss %s vs %s, grad norm %s vs %s\n", $1, $2, l[$1], $3, g[$1] }
		END { exit bad || n != 3 }' "$TMP/cpu-$prec.tsv" "$TMP/cuda-$prec.tsv" >"$TMP/cmp"; then
		t_ok "$prec: the CUDA run's steps within $lb (loss) and $gb (grad norm) of the CPU's"
	else
		t_not_ok "$prec: the CUDA run's steps within $lb (loss) and $gb (grad norm) of the CPU's"
	fi
	cat "$TMP/cmp"
	sed 's/^{"step":\([0-9]*\),.*"memory_gib":\([0-9.]*\).*/result flux-train '$prec' step \1 arena_gib \2/p;d' \
		"$TMP/cuda-$prec/metrics.jsonl"
done
t_done
