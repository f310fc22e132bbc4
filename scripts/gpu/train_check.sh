#!/bin/sh
# titan-train on the GPU, as scripts/gpu/check.sh runs it (one part at a time,
# each printing "result train NAME VALUE" lines for the check's table):
#
#   sh scripts/gpu/train_check.sh curve [STEPS]
#       debugmodel on random tokens (a 2048-word vocabulary, 4 x 128 tokens a
#       step, bf16 autocast, seed 7) for STEPS steps (default 200) on the CUDA
#       backend and on the CPU backend: the largest step difference of the two
#       loss curves and the difference of their last STEPS/10 steps' means.
#       Fails beyond 0.1 at a step or 0.02 on the means (the CPU's own bf16 and
#       float32 curves stay within 0.012 and 0.0004 on the demo corpus:
#       scripts/precision_curves.sh; two bf16 computations that sum in other
#       orders drift apart further than that over many steps).
#   sh scripts/gpu/train_check.sh mfu FLAVOR SEQ [STEPS]
#       FLAVOR (e.g. 1B) at batch 1 x SEQ, selective op AC, compile.enable,
#       STEPS steps (default 8): the last step's tokens/s, MFU (torchtitan's
#       peak for the device) and the arena's memory, from metrics.jsonl.
#
# BIN holds titan-train and titan-shard, TEST_GEN the token generator
# (tests/shard/test_gen); OUT (default build/gpu-check-out) the runs' folders.
# GPU_BACKEND=cpu puts the GPU's runs on the CPU: a dry run of this script on a
# machine without a GPU.
set -u
BIN=${BIN:-bin}
TEST_GEN=${TEST_GEN:-build/tests/shard/test_gen}
out=${OUT:-build/gpu-check-out}/train
mkdir -p "$out"
export NO_COLOR=1 OMP_WAIT_POLICY=passive
gpu=${GPU_BACKEND:-cuda}

# data DIR SEED DOCS VOCAB MAXLEN: random documents as titan-shard shards
data() {
	[ -f "$1/manifest.json" ] && return 0
	"$TEST_GEN" gen "$2" "$3" "$4" "$5" >"$1.tts" &&
		"$BIN/titan-shard" -q --out "$1" --val-fraction 0.02 "$1.tts"
}

# losses JSONL: "step loss" lines
losses() {
	grep '^{"step":[0-9]*,"loss"' "$1" | sed 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/'
}

curve() {
	steps=${1:-200}
	data "$out/curve-data" 11 3000 2048 600 || return 1
	for side in gpu cpu; do
		be=cpu
		[ "$side" = gpu ] && be=$gpu
		rm -rf "$out/curve-$side"
		"$BIN/titan-train" --backend "$be" --model.flavor debugmodel \
			--training.dataset_path "$out/curve-data" --job.dump_folder "$out/curve-$side" \
			--training.local_batch_size 4 --training.seq_len 128 --training.steps "$steps" \
			--optimizer.lr 2e-3 --lr_scheduler.warmup_steps 10 --metrics.log_freq 50 \
			--checkpoint.enable false --debug.seed 7 2>"$out/curve-$side.log" ||
			{ echo "titan-train --backend $be failed:"; tail -5 "$out/curve-$side.log"; return 1; }
		losses "$out/curve-$side/metrics.jsonl" >"$out/curve-$side.loss"
	done
	grep -h 'backend' "$out/curve-gpu.log" | head -1
	join "$out/curve-cpu.loss" "$out/curve-gpu.loss" | awk -v n="$steps" '
	{ d = $3 - $2; if (d < 0) d = -d; if (d > mx) { mx = d; at = $1 }
	  if ($1 > n - n / 10) { sc += $2; sg += $3; k++ } rows++ }
	END { m = k ? (sg - sc) / k : 99; if (m < 0) m = -m
	      printf "debugmodel %d steps: cpu vs cuda largest difference %.4f (step %d), last %d means %.4f\n", rows, mx, at, k, m
	      printf "result train debug_curve_steps %d\n", rows
	      printf "result train debug_curve_max_diff %.4f\n", mx
	      printf "result train debug_curve_last_mean_diff %.4f\n", m
	      exit !(rows == n && mx < 0.1 && m < 0.02) }'
}

mfu() {
	flavor=$1 seq=$2 steps=${3:-8}
	name=${flavor}_t${seq}
	vocab=128000
	[ "$flavor" = debugmodel ] && vocab=2000
	data "$out/mfu-data-$name" 12 $((steps * 2 + 4)) "$vocab" "$seq" || return 1
	rm -rf "$out/mfu-$name"
	"$BIN/titan-train" --backend "$gpu" --model.flavor "$flavor" \
		--training.dataset_path "$out/mfu-data-$name" --job.dump_folder "$out/mfu-$name" \
		--training.local_batch_size 1 --training.seq_len "$seq" --training.steps "$steps" \
		--activation_checkpoint.mode selective --activation_checkpoint.selective_ac_option op \
		--compile.enable --metrics.log_freq 1 --checkpoint.enable false \
		2>"$out/mfu-$name.log" ||
		{ echo "titan-train $flavor failed:"; tail -5 "$out/mfu-$name.log"; return 1; }
	grep -h -e 'backend' -e 'step: *[0-9]*  loss' "$out/mfu-$name.log" | tail -4
	tail -1 "$out/mfu-$name/metrics.jsonl" | tr ',{}' '\n\n\n' | awk -F: -v n="$name" '
	$1 == "\"tps\"" { printf "result train %s_tokens_per_s %.0f\n", n, $2 }
	$1 == "\"mfu\"" { printf "result train %s_MFU %.1f\n", n, $2 }
	$1 == "\"memory_gib\"" { printf "result train %s_memory_GiB %.1f\n", n, $2 }'
}

case ${1:-} in
curve) shift; curve "$@" ;;
mfu) shift; mfu "$@" ;;
*) echo "usage: train_check.sh curve [STEPS] | mfu FLAVOR SEQ [STEPS]" >&2; exit 2 ;;
esac
