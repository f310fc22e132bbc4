#!/bin/sh
# Every family's debug config trains on the demo corpus (make demo's Debian
# fortunes, a fixed part of them, tokenized with a 2048-id BPE as the demo
# does): 50 steps with a falling loss, and a run killed with -9 after its
# step-25 checkpoint resumes bit-exact (steps 26-50 and the final weights).
# Small batches keep it fast (b 2 x t 32); the families' shapes are their own.
# The last saves are the model only (the runs' weights compared byte for byte;
# the optimizer's states are the step-25 checkpoint's, which the resume reads).
# Under the sanitizers (SAN=1, several times slower) the killed run alone, 12
# steps with the kill after step 6's checkpoint, and its resume: neither the
# loss nor the bit-exactness are judged (make check judges them), the save,
# the kill and the load of every family run under the sanitizers.
. tests/lib.sh
TRAIN="$BIN/titan-train"
# Same thread count in every run: reductions are bit-exact for a fixed count.
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 NO_COLOR=1

t_demo_data "$TMP/data"

STEPS=50
CK=25
[ "${SAN:-0}" = 1 ] && STEPS=12 CK=6

# titan-train in place of the calling (sub)shell, so that `train ... &` gives
# titan-train's own pid to kill; run is the same in a subshell.
train() { # config dump_folder [more options]
	cfg=$1
	out=$2
	shift 2
	exec "$TRAIN" --config "$cfg" --job.dump_folder "$out" --training.dataset_path "$TMP/data" \
		--training.steps $STEPS --training.local_batch_size 2 --training.seq_len 32 \
		--metrics.log_freq 10 --checkpoint.enable true --checkpoint.interval $CK \
		--checkpoint.keep_latest_k 0 --checkpoint.last_save_model_only true \
		--optimizer.lr 2e-3 --activation_checkpoint.mode none --debug.seed 7 \
		${flavor:+--model.flavor "${flavor#:}"} "$@"
}
run() { (train "$@"); }

# config[:flavor]: the MoE families' debug configs with titan's small MoE
# flavors (Qwen3's debugmodel_moe's 315M parameters are too many for CI;
# DeepSeek V3's debugmodel_small does a quarter of debugmodel's work a token).
for spec in ${TRAIN_SPECS:-configs/debug_model.toml configs/qwen3_debug.toml \
	configs/qwen3_moe_debug.toml:debugmodel_moe_small \
	configs/deepseek_v3_debug.toml:debugmodel_small \
	configs/llama4_debug.toml configs/gpt_oss_debug.toml:debugmodel_small}; do
	cfg=${spec%%:*}
	flavor=${spec#"$cfg"}
	fam=$(sed -n '/^\[model\]/,/^\[/s/^name = "\(.*\)"/\1/p' "$cfg")${flavor:+-${flavor#:}}
	A="$TMP/$fam.a" # (t_run owns $name)
	B="$TMP/$fam.b"
	# the uninterrupted run saves its last step only (the model: what is compared)
	if [ $STEPS -lt 50 ]; then
		t_skip "$fam: $STEPS steps of $cfg" "the killed run alone under the sanitizers"
	else
		t_run "$fam: $STEPS steps of $cfg" run "$cfg" "$A" --checkpoint.interval $STEPS
	fi
	t_losses "$A/metrics.jsonl" 1 $STEPS >"$TMP/$fam.a.loss" 2>/dev/null
	# The first 5 steps against the last 10 (one batch of 64 tokens is noisy).
	drop=$(awk 'NR <= 5 { a += $1 } NR > 40 { b += $1 } END { printf "%.3f", a / 5 - b / 10 }' \
		"$TMP/$fam.a.loss")
	if [ $STEPS -lt 50 ]; then
		t_skip "$fam: the loss falls" "$STEPS steps under the sanitizers (judged in make check)"
	elif [ "$(wc -l <"$TMP/$fam.a.loss")" -eq 50 ] &&
		awk -v d="$drop" 'BEGIN { exit !(d >= 0.5) }'; then
		t_ok "$fam: the loss falls (first 5 steps' mean - last 10's: $drop nats)"
	else
		t_not_ok "$fam: the loss falls by half a nat" "drop $drop: $(tr '\n' ' ' <"$TMP/$fam.a.loss")"
	fi

	train "$cfg" "$B" 2>"$TMP/$fam.b1.log" &
	t_kill_after $! "$B" $CK $((CK + 2))
	if [ -f "$B/checkpoint/step-$STEPS/.metadata" ]; then
		t_not_ok "$fam: run killed with -9 before its end" "it finished first"
	else
		t_ok "$fam: run killed with -9 before its end"
	fi
	t_run "$fam: resumed after kill -9" run "$cfg" "$B"
	t_grep "$fam: resume starts after the step-$CK checkpoint" "Training starts at step $((CK + 1))" \
		"$TMP/.err"
	t_losses "$B/metrics.jsonl" $((CK + 1)) $STEPS >"$TMP/$fam.b2.loss"
	if [ $STEPS -lt 50 ]; then
		t_skip "$fam: resume after kill -9 is bit-exact" "judged in make check"
		rm -rf "$A" "$B"
		continue
	fi
	t_losses "$A/metrics.jsonl" $((CK + 1)) $STEPS >"$TMP/$fam.a2.loss"
	if [ "$(wc -l <"$TMP/$fam.b2.loss")" -eq $((STEPS - CK)) ] &&
		cmp -s "$TMP/$fam.a2.loss" "$TMP/$fam.b2.loss"; then
		t_ok "$fam: resume after kill -9 is bit-exact (steps $((CK + 1))-$STEPS)"
	else
		t_not_ok "$fam: resume after kill -9 is bit-exact (steps $((CK + 1))-$STEPS)" \
			"$(paste "$TMP/$fam.a2.loss" "$TMP/$fam.b2.loss" | head -5)"
	fi
	if cmp -s "$A/checkpoint/step-$STEPS/__0_0.distcp" "$B/checkpoint/step-$STEPS/__0_0.distcp"; then
		t_ok "$fam: the same final checkpoint, byte for byte"
	else
		t_not_ok "$fam: the same final checkpoint, byte for byte" "$("$BIN/titan-ckpt-convert" diff \
			"$A/checkpoint/step-$STEPS" "$B/checkpoint/step-$STEPS" 2>&1 | grep -v ' ok ' | head -5)"
	fi
	rm -rf "$A" "$B"
done
t_done
