#!/bin/sh
# Checkpoints across meshes: a run saved under FSDP 4 resumes under FSDP 2 x
# TP 2, under CP 2 x TP 2 and in one process, and one saved under PP 2 x FSDP
# 2 resumes under CP 2 x TP 2: the losses continue as in the uninterrupted
# run; the last checkpoints of FSDP 4's resumptions agree; with AdamW's states
# in bf16 (fused_opt_states_bf16) FSDP 4's checkpoint resumes under PP 2 x TP
# 2 alike, its states saved and loaded as bf16; torch.distributed.checkpoint
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

# same NAME [FROM]: steps 4..6 of run NAME against the uninterrupted run FROM's
# (default fsdp4), 1e-6 relative (the plans agree to 1e-8 per step:
# tests/plan/equiv.sh)
same() {
	bad= from=${2:-fsdp4}
	for s in 4 5 6; do
		a=$(loss "$TMP/$from/metrics.jsonl" $s)
		b=$(loss "$TMP/$1/metrics.jsonl" $s)
		awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-6 * a) }' ||
			bad="$bad step $s: $b vs $a;"
	done
	if [ -z "$bad" ] && grep -q "Loading the checkpoint from .*step-3" "$TMP/$1.log"; then
		t_ok "$1 continues the $from run's losses (steps 4-6)"
	else
		t_not_ok "$1 continues the $from run's losses (steps 4-6)" "$bad $(grep -m1 Loading "$TMP/$1.log")"
	fi
}

# resume FROM NAME NP ARGS...: run NAME on NP ranks from run FROM's step-3
# checkpoint; its steps 4..6 must be FROM's
resume() {
	from=$1 name=$2 np=$3
	shift 3
	mkdir -p "$TMP/$name/checkpoint"
	cp -r "$TMP/$from/checkpoint/step-3" "$TMP/$name/checkpoint/"
	run "$name" "$np" "$@"
	same "$name" "$from"
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

resume fsdp4 fsdp2tp2 4 --training.local_batch_size 2 --parallelism.data_parallel_shard_degree 2 \
	--parallelism.tensor_parallel_degree 2
resume fsdp4 single 1 --training.local_batch_size 4
# Context parallelism: each rank's chunks of every sequence, the weights as
# CP 2 x TP 2 holds them (FSDP over cp, TP slices), from FSDP 4's boxes.
# (Saved under PP 2 x FSDP 2 once pipeline parallelism trains: one more
# `run pp2fsdp2 4 ...` and `resume pp2fsdp2 cp2tp2pp 4 <the CP 2 x TP 2 args>`.)
CP2TP2="--training.local_batch_size 4 --parallelism.data_parallel_shard_degree 1
	--parallelism.context_parallel_degree 2 --parallelism.tensor_parallel_degree 2"
# shellcheck disable=SC2086
resume fsdp4 cp2tp2 4 $CP2TP2
# the pipeline's checkpoint (each stage's ranks write their own units' boxes)
# resumed under another plan: PP 2 x FSDP 2 saves, CP 2 x TP 2 continues it
run pp2fsdp2 4 --training.local_batch_size 2 --parallelism.data_parallel_shard_degree 2 \
	--parallelism.pipeline_parallel_degree 2 --parallelism.pipeline_parallel_microbatch_size 1
resume pp2fsdp2 pp2fsdp2_cp2tp2 4 $CP2TP2
# The last checkpoints: every key but the dataloader's (one per dp rank, its
# world size) equal within 1e-5.
for r in fsdp2tp2 single cp2tp2; do
	"$C" diff --tol 1e-5 "$TMP/fsdp4/checkpoint/step-6" "$TMP/$r/checkpoint/step-6" >"$TMP/diff" 2>&1
	bad=$(grep -v -e ' ok ' -e '^dataloader\.' "$TMP/diff")
	if [ -z "$bad" ] && grep -q '^optimizer.state.output.weight.exp_avg ' "$TMP/diff"; then
		t_ok "$r's last checkpoint equals FSDP 4's (model and optimizer, 1e-5)"
	else
		t_not_ok "$r's last checkpoint equals FSDP 4's (model and optimizer, 1e-5)" "$(echo "$bad" | head -5)"
	fi
done

# optimizer.implementation = "fused_opt_states_bf16": the bf16 states saved
# by FSDP 4's ranks resharded into PP 2 x TP 2's boxes (tests/plan/equiv.sh's
# bf16states=1 holds the plans to one process step by step)
BF16="--optimizer.implementation fused_opt_states_bf16"
# shellcheck disable=SC2086
run fsdp4bf16 4 --training.local_batch_size 1 $BF16
# shellcheck disable=SC2086
resume fsdp4bf16 pp2tp2bf16 4 --training.local_batch_size 4 \
	--parallelism.data_parallel_shard_degree 1 --parallelism.pipeline_parallel_degree 2 \
	--parallelism.tensor_parallel_degree 2 --parallelism.pipeline_parallel_microbatch_size 1 $BF16
"$C" diff --tol 1e-5 "$TMP/fsdp4bf16/checkpoint/step-6" "$TMP/pp2tp2bf16/checkpoint/step-6" \
	>"$TMP/diff" 2>&1
bad=$(grep -v -e ' ok ' -e '^dataloader\.' "$TMP/diff")
if [ -z "$bad" ] && grep -q '^optimizer.state.output.weight.exp_avg ' "$TMP/diff"; then
	t_ok "pp2tp2bf16's last checkpoint equals FSDP 4's (model and optimizer, 1e-5)"
else
	t_not_ok "pp2tp2bf16's last checkpoint equals FSDP 4's (model and optimizer, 1e-5)" \
		"$(echo "$bad" | head -5)"
fi
# every exp_avg and exp_avg_sq bf16, as 0.3.0 saves them (tests/train/tt030_optim.sh)
"$C" info "$TMP/pp2tp2bf16/checkpoint/step-6" >"$TMP/info" 2>&1
states=$(awk '$1 ~ /^optimizer\.state\..*\.exp_avg(_sq)?$/ { n++; if ($3 != "bfloat16") bad++ }
	END { print n + 0, bad + 0 }' "$TMP/info")
if [ "$states" = "114 0" ]; then
	t_ok "pp2tp2bf16's checkpoint holds its 114 AdamW states in bfloat16"
else
	t_not_ok "pp2tp2bf16's checkpoint holds its 114 AdamW states in bfloat16" \
		"states, not bfloat16: $states"
fi

if "$PY" -c 'import torch, safetensors' >/dev/null 2>&1; then
	"$C" dcp-to-single "$TMP/fsdp4/checkpoint/step-6" "$TMP/ref.safetensors" >/dev/null 2>&1
	t_run "torch dcp.load reads the 4-rank FSDP checkpoint in one process, exactly" \
		"$PY" scripts/ckpt_torch_check.py load "$TMP/fsdp4/checkpoint/step-6" "$TMP/ref.safetensors" ""
else
	t_skip "torch dcp.load reads the 4-rank FSDP checkpoint in one process" "no torch in \$PYTHON ($PY)"
fi
t_done
