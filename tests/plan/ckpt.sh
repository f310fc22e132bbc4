#!/bin/sh
# Checkpoints across meshes: a run saved under FSDP 4 resumes under FSDP 2 x
# TP 2 and in one process, and the losses continue as in the uninterrupted
# run; the last checkpoints of the three agree; torch.distributed.checkpoint
# loads the 4-rank checkpoint in one process (with $PYTHON's torch; skipped
# without it, as in CI).
. tests/lib.sh

TRAIN="$BIN/titan-train"
C="$BIN/titan-ckpt-convert"
PY="${PYTHON:-python3}"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive NO_COLOR=1

t_random_shards "$TMP/data" 11 300 256 120 0.1
cat >"$TMP/c.toml" <<EOT
[model]
flavor = "debugmodel"
[optimizer]
lr = 1e-3
[lr_scheduler]
warmup_steps = 2
[training]
dataset_path = "$TMP/data"
global_batch_size = 4
seq_len = 32
steps = 6
mixed_precision_param = "float32"
[checkpoint]
enable = true
interval = 3
keep_latest_k = 0
last_save_model_only = false
[debug]
seed = 42
EOT

# run NAME NP ARGS...: train into $TMP/NAME
run() {
	name=$1 np=$2
	shift 2
	t0=$(date +%s)
	$MPIRUN -np "$np" "$TRAIN" --config "$TMP/c.toml" --job.dump_folder "$TMP/$name" "$@" \
		>"$TMP/$name.log" 2>&1
	rc=$?
	secs=$(($(date +%s) - t0))
	if [ "$rc" -eq 0 ]; then
		t_ok "$name: $np ranks $* (${secs}s)"
	else
		t_not_ok "$name: $np ranks $*" "exit $rc: $(tail -5 "$TMP/$name.log")"
	fi
}

loss() { # metrics.jsonl STEP
	grep "^{\"step\":$2,\"loss\"" "$1" | tail -1 | sed 's/.*"loss":\([^,]*\),.*/\1/'
}

# same NAME: steps 4..6 of run NAME against the uninterrupted run's, 1e-6 relative
# (the plans agree to 1e-8 per step: tests/plan/equiv.sh)
same() {
	bad=
	for s in 4 5 6; do
		a=$(loss "$TMP/fsdp4/metrics.jsonl" $s)
		b=$(loss "$TMP/$1/metrics.jsonl" $s)
		awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-6 * a) }' ||
			bad="$bad step $s: $b vs $a;"
	done
	if [ -z "$bad" ] && grep -q "Loading the checkpoint from .*step-3" "$TMP/$1.log"; then
		t_ok "$1 continues the FSDP 4 run's losses (steps 4-6)"
	else
		t_not_ok "$1 continues the FSDP 4 run's losses (steps 4-6)" "$bad $(grep -m1 Loading "$TMP/$1.log")"
	fi
}

run fsdp4 4 --training.local_batch_size 1
for s in 3 6; do
	if [ -f "$TMP/fsdp4/checkpoint/step-$s/.metadata" ] && [ -f "$TMP/fsdp4/checkpoint/step-$s/__3_0.distcp" ]; then
		t_ok "FSDP 4 checkpoint step-$s holds the 4 ranks' files"
	else
		t_not_ok "FSDP 4 checkpoint step-$s holds the 4 ranks' files" "$(ls "$TMP/fsdp4/checkpoint/step-$s" 2>&1)"
	fi
done
t_run "the 4-rank checkpoint verifies (every tensor covered once)" "$C" verify "$TMP/fsdp4/checkpoint/step-3"

mkdir -p "$TMP/fsdp2tp2/checkpoint" "$TMP/single/checkpoint"
cp -r "$TMP/fsdp4/checkpoint/step-3" "$TMP/fsdp2tp2/checkpoint/"
cp -r "$TMP/fsdp4/checkpoint/step-3" "$TMP/single/checkpoint/"
run fsdp2tp2 4 --training.local_batch_size 2 --parallelism.data_parallel_shard_degree 2 \
	--parallelism.tensor_parallel_degree 2
same fsdp2tp2
run single 1 --training.local_batch_size 4
same single
# The last checkpoints: every key but the dataloader's (one per dp rank, its
# world size) equal within 1e-5.
for r in fsdp2tp2 single; do
	"$C" diff --tol 1e-5 "$TMP/fsdp4/checkpoint/step-6" "$TMP/$r/checkpoint/step-6" >"$TMP/diff" 2>&1
	bad=$(grep -v -e ' ok ' -e '^dataloader\.' "$TMP/diff")
	if [ -z "$bad" ] && grep -q '^optimizer.state.output.weight.exp_avg ' "$TMP/diff"; then
		t_ok "$r's last checkpoint equals FSDP 4's (model and optimizer, 1e-5)"
	else
		t_not_ok "$r's last checkpoint equals FSDP 4's (model and optimizer, 1e-5)" "$(echo "$bad" | head -5)"
	fi
done

if "$PY" -c 'import torch, safetensors' >/dev/null 2>&1; then
	"$C" dcp-to-single "$TMP/fsdp4/checkpoint/step-6" "$TMP/ref.safetensors" >/dev/null 2>&1
	t_run "torch dcp.load reads the 4-rank FSDP checkpoint in one process, exactly" \
		"$PY" scripts/ckpt_torch_check.py load "$TMP/fsdp4/checkpoint/step-6" "$TMP/ref.safetensors" ""
else
	t_skip "torch dcp.load reads the 4-rank FSDP checkpoint in one process" "no torch in \$PYTHON ($PY)"
fi
t_done
