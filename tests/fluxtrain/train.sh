#!/bin/sh
# titan-train --module flux --config flux_debugmodel: torchtitan 0.3.0's
# FluxTrainer step for step.  The goldens (tests/fluxtrain/golden/,
# scripts/flux_train_golden.py) are 0.3.0's own trainer on the cc12m test
# shard at 64 px, its test tokenizer for both encoders, T5 length 16,
# float32, seed 7, with the deterministic encoders and autoencoder
# `test_fluxtrain mkmodels` writes and titan's initial weights: the loss
# within 1e-4 (1e-5 at step 1), the grad norm within 1e-4, the lr exactly.
# The preset's own flavor (flux-debug, 258 M parameters) on one process;
# the rest on titan's flux-tiny (--flavor flux-tiny, 8.3 M: the same layers,
# 0.3.0's builder at its numbers), whose steps cost a CPU a thirtieth:
# one process (10 steps), FSDP 2 (0.3.0's under torchrun with gloo), context
# parallelism 2 with the validator, 4 ranks (HSDP 2 x FSDP 2, FSDP 2 x CP 2),
# and in bf16 within bf16's bounds; kill -9 and resume bit for bit; the
# validator and --sample; activation checkpointing's steps the same bits as
# without it.
. tests/lib.sh
. tests/train/steps.inc
t_need_fixture torchtitan_assets/cc12m_test tokenizers/torchtitan_test
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 NO_COLOR=1
# flux-tiny's checkpoints are 100 MB, the resumed runs' copies hard links
t_need_disk 1 "flux-tiny's checkpoints"

TOK=$(fx tokenizers/torchtitan_test)
G=tests/fluxtrain/golden
GOLDEN=$G/flux_tiny.tsv
"$BUILD/tests/fluxtrain/test_fluxtrain" mkmodels "$TMP/m" ||
	{ t_not_ok "the test encoders are made"; t_done; }
# flux_at FLAVOR ARGS: flux_debugmodel at the goldens' settings with the
# model FLAVOR, then ARGS; flux_run ARGS: at flux-tiny.  A file, so that the
# ranks mpirun starts run it too.
cat >"$TMP/flux_run.sh" <<END
flux_run() {
	flux_at flux-tiny "\$@"
}
flux_at() {
	fa_flavor=\$1
	shift
	"$BIN/titan-train" --module flux --config flux_debugmodel --flavor "\$fa_flavor" \\
		--training.mixed_precision_param float32 --debug.seed 7 \\
		--dataloader.dataset_path "$(fx torchtitan_assets/cc12m_test)" \\
		--dataloader.img_size 64 --tokenizer.test_mode --tokenizer.max_t5_encoding_len 16 \\
		--tokenizer.t5_tokenizer_path "$TOK" --tokenizer.clip_tokenizer_path "$TOK" \\
		--encoder.t5_encoder "$TMP/m/t5" --encoder.clip_encoder "$TMP/m/clip" \\
		--encoder.autoencoder_path "$TMP/m/ae.safetensors" "\$@"
}
END
. "$TMP/flux_run.sh"

# the preset's flux-debug: its 10 steps (3 under the sanitizers, which look
# at memory) against 0.3.0's
DS=10
[ "${SAN:-0}" = 1 ] && DS=3
t_run "$DS steps of flux_debugmodel (flux-debug)" flux_at flux-debug --training.steps $DS \
	--dump_folder "$TMP/d"
steps_of "$TMP/d/metrics.jsonl" >"$TMP/d.tsv"
t_steps "flux-debug: the loss, grad norm and lr equal 0.3.0's FluxTrainer's at every step" \
	$G/flux_debugmodel.tsv "$TMP/d.tsv" 1 $DS "" 1e-4 1e-4
max_rel $G/flux_debugmodel.tsv "$TMP/d.tsv"
rm -rf "${TMP:?}/d"

STEPS=10 FS=4
t_run "$STEPS steps of flux-tiny" flux_run --training.steps $STEPS --dump_folder "$TMP/a"
steps_of "$TMP/a/metrics.jsonl" >"$TMP/a.tsv"
t_steps "the loss, grad norm and lr equal 0.3.0's FluxTrainer's at every step" "$GOLDEN" \
	"$TMP/a.tsv" 1 $STEPS "" 1e-4 1e-4
max_rel "$GOLDEN" "$TMP/a.tsv"

# FSDP 2: each rank its seed (7 + rank) and every other sample, the
# gradients summed in float32; each rank holds its rows of every parameter,
# gradient and AdamW state (lib/fluxfsdp), and saves them (step FK: the
# checkpoint's two chunks of each tensor, one per rank)
FK=$((FS / 2))
fsdp2() { # DIR ARGS
	fd=$1
	shift
	env OMP_NUM_THREADS=1 $MPIRUN -np 2 sh -c '. "$0"; flux_run "$@"' "$TMP/flux_run.sh" \
		--training.steps $FS --checkpoint.enable --checkpoint.last_save_model_only \
		--dump_folder "$fd" "$@"
}
t_run "FSDP 2: $FS steps" fsdp2 "$TMP/fsdp2" --checkpoint.interval $FK
steps_of "$TMP/fsdp2/metrics.jsonl" >"$TMP/fsdp2.tsv"
t_steps "FSDP 2: the loss, grad norm and lr equal 0.3.0's FSDP 2 run's" \
	$G/flux_tiny_fsdp2.tsv "$TMP/fsdp2.tsv" 1 $FS "" 1e-4 1e-4
max_rel $G/flux_tiny_fsdp2.tsv "$TMP/fsdp2.tsv"
# a rank's memory: the whole model's weights, gradients and AdamW are 133 MB
# (8.3 M parameters), a rank's shard half that, beside one unit (a double
# block: 28 % of the model) gathered at a time; its peak (the log's memory,
# before the step-FK save's host images) at least 0.02 GiB under the one
# process's (measured 0.191 and 0.220 GiB; at flux-debug 2.73 and 3.99)
mem_max() { # METRICS LAST: the largest memory_gib of steps 1..LAST
	sed -n 's/^{"step":\([0-9]*\),.*"memory_gib":\([0-9.]*\).*/\1 \2/p' "$1" |
		awk -v k="$2" '$1 <= k && $2 > m { m = $2 } END { print m + 0 }'
}
one=$(mem_max "$TMP/a/metrics.jsonl" $STEPS) two=$(mem_max "$TMP/fsdp2/metrics.jsonl" $FK)
if [ "${SAN:-0}" = 1 ]; then
	t_skip "FSDP 2: a rank's peak at least 0.02 GiB under the one process's" "judged in make check"
elif awk -v a="$one" -v b="$two" 'BEGIN { exit !(a > 0 && b > 0 && b < a - 0.02) }'; then
	t_ok "FSDP 2: a rank's peak ${two} GiB, the one process's ${one} GiB"
else
	t_not_ok "FSDP 2: a rank's peak at least 0.02 GiB under the one process's" "$two vs $one GiB"
fi
ck=$TMP/fsdp2/checkpoint/step-$FK
s0=$(wc -c <"$ck/__0_0.distcp" 2>/dev/null || echo 0)
s1=$(wc -c <"$ck/__1_0.distcp" 2>/dev/null || echo 0)
# the weights and AdamW's two states of 8,314,944 parameters: 49.9 MB a rank
if awk -v a="$s0" -v b="$s1" 'BEGIN { exit !(a > 4.9e7 && b > 4.9e7 && a < 1.1 * b && b < 1.1 * a) }'; then
	t_ok "FSDP 2: each rank wrote its half of the checkpoint"
else
	t_not_ok "FSDP 2: each rank wrote its half of the checkpoint" "$s0 and $s1 bytes"
fi
# resumed on 2 ranks from the sharded step FK: the steps after it are the
# uninterrupted run's bits (the shards, AdamW's, every rank's draws)
mkdir -p "$TMP/fr/checkpoint"
cp -al "$ck" "$TMP/fr/checkpoint/"
t_run "FSDP 2 resumed from its sharded step $FK" fsdp2 "$TMP/fr" --checkpoint.interval 100
t_grep "from its checkpoint" "loading the checkpoint .*step-$FK" "$TMP/.err"
steps_of "$TMP/fr/metrics.jsonl" | cut -f1-3 >"$TMP/fr.tsv"
awk -v k=$FK '$1 > k' "$TMP/fsdp2.tsv" | cut -f1-3 >"$TMP/fk.tsv"
t_same "FSDP 2: steps $((FK + 1))-$FS after the resume are the uninterrupted run's, bit for bit" \
	"$TMP/fk.tsv" "$TMP/fr.tsv"
rm -rf "${TMP:?}/fr" "${TMP:?}/fsdp2/checkpoint"

# kill -9 during step 6, 7 or 8 (after the checkpoint of step 4), then
# resumed: steps 5-8 are the uninterrupted run's bit for bit (the model,
# AdamW, the schedule, every rank's torch generator and loader position come
# back).  The resumed copies below link its last checkpoint rather than copy
# it.
KS=8 KC=4
flux_run --training.steps $KS --checkpoint.enable --checkpoint.interval $KC \
	--dump_folder "$TMP/k" >"$TMP/k.log" 2>&1 &
t_kill_after $! "$TMP/k" $KC $((KC + 1))
if grep -q "^{\"step\":$KS," "$TMP/k/metrics.jsonl"; then
	t_not_ok "killed before its end" "it finished before the kill"
else
	t_ok "killed before its end"
fi
t_run "resumed from step $KC" flux_run --training.steps $KS --checkpoint.enable \
	--checkpoint.interval $KC --dump_folder "$TMP/k"
t_grep "from its checkpoint" "loading the checkpoint .*step-$KC" "$TMP/.err"
steps_of "$TMP/k/metrics.jsonl" | awk -F'\t' '{ last[$1] = $0 } END { for (s in last) print last[s] }' |
	sort -n | awk -v c=$KC -v k=$KS '$1 > c && $1 <= k' | cut -f1-3 >"$TMP/k.tsv"
awk -v c=$KC -v k=$KS '$1 > c && $1 <= k' "$TMP/a.tsv" | cut -f1-3 >"$TMP/a3.tsv"
t_same "steps $((KC + 1))-$KS after the kill are the uninterrupted run's, bit for bit" \
	"$TMP/a3.tsv" "$TMP/k.tsv"
t_grep "the checkpoint has 0.3.0's keys" 'optimizer.state.img_in.weight.exp_avg' \
	"$TMP/k/checkpoint/step-$KS/.metadata"

# checkpoint.exclude_from_loading optimizer: the weights, draws and loader
# come back (the next step's loss and grad norm are the uninterrupted run's
# bits), AdamW starts afresh (the step after differs).  lr_scheduler: its
# schedule starts again (warmup 12, clamped to the run's 10 steps: lr
# 0.8e-3 / 10 and 2 x that at steps 9 and 10), the rest goes on (step 9 the
# same bits).
# All four parts left out: the run of the checkpoint's weights alone
# (checkpoint.initial_load_path) from step 1, bit for bit.
# resume_without NAME PARTS STEPS ARGS: the killed run's last checkpoint
# (hard links: a save never rewrites a file) resumed to step STEPS
# without PARTS, its last save the model alone; $TMP/NAME.tsv its steps
resume_without() {
	rw_name=$1 rw_parts=$2 rw_steps=$3
	shift 3
	mkdir -p "$TMP/$rw_name/checkpoint"
	cp -al "$TMP/k/checkpoint/step-$KS" "$TMP/$rw_name/checkpoint/"
	t_run "resumed without $rw_parts" flux_run --training.steps "$rw_steps" \
		--checkpoint.enable --checkpoint.interval 100 --checkpoint.last_save_model_only \
		--checkpoint.exclude_from_loading "$rw_parts" --dump_folder "$TMP/$rw_name" "$@"
	steps_of "$TMP/$rw_name/metrics.jsonl" >"$TMP/$rw_name.tsv"
	rm -rf "${TMP:?}/$rw_name"
}
awk -F'\t' -v k=$KS '$1 > k && $1 <= k + 2' "$TMP/a.tsv" | cut -f1-3 >"$TMP/ax.tsv"
resume_without kx optimizer $((KS + 2))
cut -f1-3 "$TMP/kx.tsv" >"$TMP/kx3.tsv"
if [ "$(head -1 "$TMP/kx3.tsv")" = "$(head -1 "$TMP/ax.tsv")" ] &&
	[ "$(sed -n 2p "$TMP/kx3.tsv")" != "$(sed -n 2p "$TMP/ax.tsv")" ]; then
	t_ok "without the optimizer: step $((KS + 1)) the same bits, step $((KS + 2)) not"
else
	t_not_ok "without the optimizer: step $((KS + 1)) the same bits, step $((KS + 2)) not" \
		"$(cat "$TMP/kx3.tsv" "$TMP/ax.tsv")"
fi
resume_without kl lr_scheduler $((KS + 2)) --lr_scheduler.warmup_steps 12
if [ "$(head -1 "$TMP/kl.tsv" | cut -f1-3)" = "$(head -1 "$TMP/ax.tsv")" ] &&
	[ "$(cut -f4 "$TMP/kl.tsv" | awk '{ printf "%.6g ", $1 * 1e5 }')" = "8 16 " ]; then
	t_ok "without the lr scheduler: step $((KS + 1)) the same bits, the schedule from its start"
else
	t_not_ok "without the lr scheduler: step $((KS + 1)) the same bits, the schedule from its start" \
		"$(cat "$TMP/kl.tsv" "$TMP/ax.tsv")"
fi
resume_without kn optimizer,lr_scheduler,dataloader,train_state 2
t_run "the checkpoint's weights alone" flux_run --training.steps 2 --checkpoint.enable \
	--checkpoint.last_save_model_only \
	--checkpoint.initial_load_path "$TMP/k/checkpoint/step-$KS" --dump_folder "$TMP/ki"
steps_of "$TMP/ki/metrics.jsonl" >"$TMP/ki.tsv"
rm -rf "${TMP:?}/ki"
t_same "without every part: the checkpoint's weights from step 1, bit for bit" \
	"$TMP/ki.tsv" "$TMP/kn.tsv"
t_fails "exclude_from_loading of the model is refused" 1 flux_run --training.steps $((KS + 1)) \
	--checkpoint.enable --checkpoint.exclude_from_loading model --dump_folder "$TMP/k"
t_grep "saying why" "'model' is not a part the Flux checkpoint loads" "$TMP/.err"

# the validator (0.3.0's flux_debugmodel: at step 1 and every 5 steps, one
# image with guidance 5.0 in 4 denoising steps) on 2 batches of the shard:
# its losses, the images and every step after it (its draws come from the
# training generator), against 0.3.0's run with its validator on.  Steps
# 1-4 agree to 5e-7; from step 5 on AdamW's updates of gradients near zero,
# whose signs float32 rounding can turn, may move the runs apart by up to
# 1e-4 (measured at flux-debug: 9.5e-5 on the loss, 3.8e-4 on the grad norm
# by step 10; at flux-tiny 1.1e-7 and 2.2e-7 by step 5).
VGOLD=$G/flux_tiny_val.tsv
VS=5
t_run "$VS steps with the validator" flux_run --training.steps $VS --validator.enable \
	--validator.steps 2 --validator.dataloader.img_size 64 --dump_folder "$TMP/v"
steps_of "$TMP/v/metrics.jsonl" >"$TMP/v.tsv"
grep -v '^val' "$VGOLD" >"$TMP/vgold.tsv"
t_steps "with the validator: 0.3.0's steps" "$TMP/vgold.tsv" "$TMP/v.tsv" 1 4 "" 1e-4 1e-4
t_steps "with the validator: step 5" "$TMP/vgold.tsv" "$TMP/v.tsv" 5 5 "" 2e-4 1e-3
max_rel "$TMP/vgold.tsv" "$TMP/v.tsv"
sed -n 's/^{"step":\([0-9]*\),"validation_loss":\([^,]*\),.*/val\t\1\t\2/p' \
	"$TMP/v/metrics.jsonl" >"$TMP/vloss.tsv"
if awk -F'\t' -v want=2 'NR == FNR { if ($1 == "val") w[$2] = $3; next }
	{ n++; d = $3 - w[$2]; if (d < 0) d = -d; if (!($2 in w) || d / w[$2] > 1e-4) bad = 1 }
	END { exit bad || n != want }' "$VGOLD" "$TMP/vloss.tsv"; then
	t_ok "validation losses within 1e-4 of 0.3.0's"
else
	t_not_ok "validation losses within 1e-4 of 0.3.0's" "$(cat "$TMP/vloss.tsv")"
fi
"$BUILD/tests/fluxtrain/test_fluxtrain" pngdiff "$TMP/v/img/image_rank0_5.png" \
	$G/val_tiny/image_rank0_5.png >"$TMP/png" 2>&1
t_grep "the sampled image is 0.3.0's within one level" '^max [01],' "$TMP/png"
sed 's/^/# image_rank0_5.png: /' "$TMP/png"

# --sample: infer.py's prompts into images, from the checkpoint of the
# killed-and-resumed run, the same twice
printf 'a red circle\na blue square\nthird\n' >"$TMP/prompts.txt"
for i in 1 2; do
	t_run "--sample ($i)" flux_run --sample --checkpoint.enable --dump_folder "$TMP/k" \
		--inference.prompts_path "$TMP/prompts.txt" --inference.img_size 32 \
		--inference.sampling.denoising_steps 2 --inference.save_img_folder "s$i"
done
t_grep "from the last checkpoint" "loading the checkpoint .*step-$KS" "$TMP/.err"
if [ -f "$TMP/k/s1/image_prompt2_rank0.png" ] && cmp -s "$TMP/k/s1/image_prompt1_rank0.png" \
	"$TMP/k/s2/image_prompt1_rank0.png"; then
	t_ok "one image per prompt, the same each time"
else
	t_not_ok "one image per prompt, the same each time" "$(ls "$TMP/k/s1" "$TMP/k/s2")"
fi
# --sample on FSDP 2 from the one process's checkpoint (resharded into the
# ranks' rows), one prompt a batch: rank 1 has one batch fewer and samples a
# filler (the gathers are collectives); rank 0's first image is the one
# process's, bit for bit
for np in 1 2; do
	t_run "--sample on $np rank(s), one prompt a batch" env OMP_NUM_THREADS=1 $MPIRUN -np $np \
		sh -c '. "$0"; flux_run "$@"' "$TMP/flux_run.sh" --sample --checkpoint.enable \
		--dump_folder "$TMP/k" --inference.prompts_path "$TMP/prompts.txt" \
		--inference.img_size 32 --inference.sampling.denoising_steps 2 \
		--inference.local_batch_size 1 --inference.save_img_folder "n$np"
done
if cmp -s "$TMP/k/n1/image_prompt0_rank0.png" "$TMP/k/n2/image_prompt0_rank0.png" &&
	[ -f "$TMP/k/n2/image_prompt1_rank1.png" ] && [ -f "$TMP/k/n2/image_prompt2_rank0.png" ]; then
	t_ok "--sample on FSDP 2: the one process's image, every prompt sampled"
else
	t_not_ok "--sample on FSDP 2: the one process's image, every prompt sampled" \
		"$(ls "$TMP/k/n1" "$TMP/k/n2")"
fi

# the preset's bf16 (0.3.0 applies FSDP's mixed precision on one rank too:
# the transformer in bf16, the encoders, latents and target in float32):
# 0.3.0's bf16 run within 5e-4 on the loss and 5e-3 on the grad norm
# (measured 4.4e-6 and 2.4e-5 by step 5; flux-debug 2.4e-4 on the loss by
# step 10)
BS=5
t_run "$BS steps in bf16" flux_run --training.steps $BS \
	--training.mixed_precision_param bfloat16 --dump_folder "$TMP/b16"
steps_of "$TMP/b16/metrics.jsonl" >"$TMP/b16.tsv"
t_steps "bf16: 0.3.0's bf16 steps" $G/flux_tiny_bf16.tsv \
	"$TMP/b16.tsv" 1 $BS "" 5e-4 5e-3
max_rel $G/flux_tiny_bf16.tsv "$TMP/b16.tsv"
# bf16 under FSDP 2: the encoders, the autoencoder's posterior and the noise
# in bf16 too (0.3.0's self._dtype), each rank's bf16 draws: 3 steps within
# 5e-4 (measured 4.0e-5; flux-debug 1.3e-4: the bf16 encoders' own
# roundings)
FB=3
t_run "FSDP 2 in bf16: $FB steps" env OMP_NUM_THREADS=1 $MPIRUN -np 2 \
	sh -c '. "$0"; flux_run "$@"' "$TMP/flux_run.sh" --training.steps $FB \
	--training.mixed_precision_param bfloat16 --dump_folder "$TMP/fsdp2b16"
steps_of "$TMP/fsdp2b16/metrics.jsonl" >"$TMP/fsdp2b16.tsv"
t_steps "FSDP 2 in bf16: 0.3.0's steps" $G/flux_tiny_fsdp2_bf16.tsv \
	"$TMP/fsdp2b16.tsv" 1 $FB "" 5e-4 5e-3
max_rel $G/flux_tiny_fsdp2_bf16.tsv "$TMP/fsdp2b16.tsv"
# context parallelism 2 (0.3.0's cp_shard and its attention over all-gathered
# keys and values): each sample's 16 image and 16 text tokens cut in two,
# each rank its own seed (7 + rank) and so its own crops, noise and
# timesteps, as 0.3.0's; the validator on (its losses over both ranks'
# shares).  Measured 5.4e-8 on the loss, 9.1e-8 on the grad norm (flux-debug:
# 6e-8, 4e-6, the validation losses 3e-8).  Under FSDP 2 and HSDP the gradients are summed over every
# rank the same way: the FSDP 2 run above shows it.
CS=5
CGOLD=$G/flux_tiny_cp2_val.tsv
t_run "context parallel 2 with the validator: $CS steps" env OMP_NUM_THREADS=1 $MPIRUN -np 2 \
	sh -c '. "$0"; flux_run "$@"' "$TMP/flux_run.sh" --training.steps $CS \
	--parallelism.context_parallel_degree 2 --validator.enable --validator.steps 2 \
	--validator.dataloader.img_size 64 --dump_folder "$TMP/cp2"
steps_of "$TMP/cp2/metrics.jsonl" >"$TMP/cp2.tsv"
grep -v '^val' "$CGOLD" >"$TMP/cgold.tsv"
t_steps "context parallel 2: 0.3.0's steps" "$TMP/cgold.tsv" "$TMP/cp2.tsv" 1 $CS "" 1e-4 1e-4
max_rel "$TMP/cgold.tsv" "$TMP/cp2.tsv"
sed -n 's/^{"step":\([0-9]*\),"validation_loss":\([^,]*\),.*/val\t\1\t\2/p' \
	"$TMP/cp2/metrics.jsonl" >"$TMP/cploss.tsv"
if awk -F'\t' 'NR == FNR { if ($1 == "val") w[$2] = $3; next }
	{ n++; d = $3 - w[$2]; if (d < 0) d = -d; if (!($2 in w) || d / w[$2] > 1e-5) bad = 1 }
	END { exit bad || n < 1 }' "$CGOLD" "$TMP/cploss.tsv"; then
	t_ok "context parallel 2: validation losses within 1e-5 of 0.3.0's"
else
	t_not_ok "context parallel 2: validation losses within 1e-5 of 0.3.0's" "$(cat "$TMP/cploss.tsv")"
fi
# in bf16: the keys and values gathered in bf16, their gradients summed in
# bf16 (measured 1.7e-6 on the loss, 3.1e-5 on the grad norm by step 3)
CB=3
t_run "context parallel 2 in bf16: $CB steps" env OMP_NUM_THREADS=1 $MPIRUN -np 2 \
	sh -c '. "$0"; flux_run "$@"' "$TMP/flux_run.sh" --training.steps $CB \
	--parallelism.context_parallel_degree 2 --training.mixed_precision_param bfloat16 \
	--dump_folder "$TMP/cp2b16"
steps_of "$TMP/cp2b16/metrics.jsonl" >"$TMP/cp2b16.tsv"
t_steps "context parallel 2 in bf16: 0.3.0's steps" \
	$G/flux_tiny_cp2_bf16.tsv "$TMP/cp2b16.tsv" 1 $CB "" 5e-4 5e-3
max_rel $G/flux_tiny_cp2_bf16.tsv "$TMP/cp2b16.tsv"
t_fails "context parallel 2 over 15 text tokens is refused" 1 env OMP_NUM_THREADS=1 \
	$MPIRUN -np 2 sh -c '. "$0"; flux_run "$@"' "$TMP/flux_run.sh" --training.steps 1 \
	--parallelism.context_parallel_degree 2 --tokenizer.max_t5_encoding_len 15 \
	--dump_folder "$TMP/b"
t_grep "naming the degree and the tokens" "context_parallel_degree 2: the 16 image and 15 text" \
	"$TMP/.err"

# four ranks against 0.3.0's (HSDP 2 x FSDP 2; FSDP 2 x context parallel 2)
# over 3 steps (measured: HSDP 2 x 2 loss 8.4e-8, grad norm 1.0e-7; FSDP 2 x
# CP 2 1.0e-7 and 7.9e-8)
for mesh in "hsdp2_fsdp2 --parallelism.data_parallel_replicate_degree 2" \
	"fsdp2_cp2 --parallelism.context_parallel_degree 2"; do
	m4=${mesh%% *}
	# shellcheck disable=SC2086 # the mesh's options, split
	t_run "4 ranks, $m4: 3 steps" env OMP_NUM_THREADS=1 $MPIRUN -np 4 \
		sh -c '. "$0"; flux_run "$@"' "$TMP/flux_run.sh" --training.steps 3 ${mesh#* } \
		--dump_folder "$TMP/$m4"
	steps_of "$TMP/$m4/metrics.jsonl" >"$TMP/$m4.tsv"
	t_steps "4 ranks, $m4: 0.3.0's steps" "$G/flux_tiny_$m4.tsv" \
		"$TMP/$m4.tsv" 1 3 "" 1e-4 1e-4
	max_rel "$G/flux_tiny_$m4.tsv" "$TMP/$m4.tsv"
done

# full activation checkpointing (the presets' FullAC) recomputes each block
# in the backward: without it the same bits
t_run "2 steps without activation checkpointing" flux_run --training.steps 2 \
	--activation_checkpoint None --dump_folder "$TMP/noac"
steps_of "$TMP/noac/metrics.jsonl" | cut -f1-3 >"$TMP/noac.tsv"
head -2 "$TMP/a.tsv" | cut -f1-3 >"$TMP/a2.tsv"
t_same "the steps with and without activation checkpointing are the same bits" \
	"$TMP/a2.tsv" "$TMP/noac.tsv"

# the planner (lib/planner/flux.c): flux_dev on 8 x 80 GiB
t_run "--dry-run of flux_dev on 8 ranks" "$BIN/titan-train" --module flux --config flux_dev \
	--dry-run --world-size 8 --device-memory 80GiB
t_grep "FSDP over 8, a rank's peak and the verdict" '^ *5\.54 .* yes$' "$TMP/.out"

t_fails "a missing encoder is refused naming the key" 1 flux_run --training.steps 1 \
	--encoder.t5_encoder "$TMP/none" --dump_folder "$TMP/b"
t_grep "naming it" "$TMP/none" "$TMP/.err"
t_fails "tensor parallelism is refused (0.3.0's flux has none)" 1 flux_run --training.steps 1 \
	--parallelism.tensor_parallel_degree 2 --dump_folder "$TMP/b"
t_done
