#!/bin/sh
# titan-train --module flux --config flux_debugmodel: torchtitan 0.3.0's
# FluxTrainer step for step.  The goldens (tests/fluxtrain/golden/,
# scripts/flux_train_golden.py) are 0.3.0's own trainer on the cc12m test
# shard at 64 px, its test tokenizer for both encoders, T5 length 16,
# float32, seed 7, with the deterministic encoders and autoencoder
# `test_fluxtrain mkmodels` writes and titan's initial weights: the loss
# within 1e-4 (1e-5 at step 1), the grad norm within 1e-4, the lr exactly, on
# one process (10 steps) and under FSDP 2 (4 steps; 0.3.0's under torchrun
# with gloo).
. tests/lib.sh
. tests/train/steps.inc
t_need_fixture torchtitan_assets/cc12m_test tokenizers/torchtitan_test
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 NO_COLOR=1

TOK=$(fx tokenizers/torchtitan_test)
GOLDEN=tests/fluxtrain/golden/flux_debugmodel.tsv
"$BUILD/tests/fluxtrain/test_fluxtrain" mkmodels "$TMP/m" ||
	{ t_not_ok "the test encoders are made"; t_done; }
# flux_run ARGS: flux_debugmodel at the goldens' settings, then ARGS; a file,
# so that the ranks mpirun starts run it too
cat >"$TMP/flux_run.sh" <<END
flux_run() {
	"$BIN/titan-train" --module flux --config flux_debugmodel \\
		--training.mixed_precision_param float32 --debug.seed 7 \\
		--dataloader.dataset_path "$(fx torchtitan_assets/cc12m_test)" \\
		--dataloader.img_size 64 --tokenizer.test_mode --tokenizer.max_t5_encoding_len 16 \\
		--tokenizer.t5_tokenizer_path "$TOK" --tokenizer.clip_tokenizer_path "$TOK" \\
		--encoder.t5_encoder "$TMP/m/t5" --encoder.clip_encoder "$TMP/m/clip" \\
		--encoder.autoencoder_path "$TMP/m/ae.safetensors" "\$@"
}
END
. "$TMP/flux_run.sh"

STEPS=10 FS=4
[ "${SAN:-0}" = 1 ] && STEPS=3 FS=2 # the sanitizers look at memory: a few steps show it
t_run "$STEPS steps of flux_debugmodel" flux_run --training.steps $STEPS --dump_folder "$TMP/a"
steps_of "$TMP/a/metrics.jsonl" >"$TMP/a.tsv"
t_steps "the loss, grad norm and lr equal 0.3.0's FluxTrainer's at every step" "$GOLDEN" \
	"$TMP/a.tsv" 1 $STEPS "" 1e-4 1e-4
max_rel "$GOLDEN" "$TMP/a.tsv"

# FSDP 2: each rank its seed (7 + rank) and every other sample, the
# gradients summed in float32
t_run "FSDP 2: $FS steps" env OMP_NUM_THREADS=1 $MPIRUN -np 2 \
	sh -c '. "$0"; flux_run "$@"' "$TMP/flux_run.sh" --training.steps $FS \
	--dump_folder "$TMP/fsdp2"
steps_of "$TMP/fsdp2/metrics.jsonl" >"$TMP/fsdp2.tsv"
t_steps "FSDP 2: the loss, grad norm and lr equal 0.3.0's FSDP 2 run's" \
	tests/fluxtrain/golden/flux_debugmodel_fsdp2.tsv "$TMP/fsdp2.tsv" 1 $FS "" 1e-4 1e-4
max_rel tests/fluxtrain/golden/flux_debugmodel_fsdp2.tsv "$TMP/fsdp2.tsv"

t_fails "bf16 mixed precision is refused until it is built" 1 flux_run --training.steps 1 \
	--training.mixed_precision_param bfloat16 --dump_folder "$TMP/b"
t_grep "saying why" 'mixed_precision_param bfloat16' "$TMP/.err"
t_fails "a missing encoder is refused naming the key" 1 flux_run --training.steps 1 \
	--encoder.t5_encoder "$TMP/none" --dump_folder "$TMP/b"
t_grep "naming it" "$TMP/none" "$TMP/.err"
t_fails "tensor parallelism is refused (0.3.0's flux has none)" 1 flux_run --training.steps 1 \
	--parallelism.tensor_parallel_degree 2 --dump_folder "$TMP/b"
t_done
