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
#   sh scripts/gpu/train_check.sh graph [STEPS]
#       compile.enable's whole-step CUDA graph against the same step op by op
#       (--no-step-graph): debugmodel on random tokens, 8 x 512 tokens a step,
#       bf16 autocast, seed 7, STEPS steps (default 40), once each way.  The
#       loss curves must agree within 1e-6 at every step (the same kernels in
#       the same order: bit for bit is expected, and debugmodel's head_dim 16
#       keeps attention on titan's deterministic kernels; the bound leaves room
#       for AdamW's weight decay, which the graph's multi-tensor kernel reads
#       as float, rounding 1 - lr wd to the same float but not provably
#       always); the log must say the step was captured.  Prints both step
#       times (the mean after the first 3 steps) and their ratio.
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

# mean_step_s METRICS TOKENS_PER_STEP: the mean step time after the first 3
mean_step_s() {
	awk -v n="$2" -F'"tps":' 'NR > 3 && NF > 1 { split($2, a, /[,}]/); s += n / a[1]; k++ }
		END { printf "%.6f\n", k ? s / k : 0 }' "$1"
}

graph() {
	steps=${1:-40}
	data "$out/graph-data" 13 600 2048 1100 || return 1
	for side in graph eager; do
		flag=
		[ "$side" = eager ] && flag=--no-step-graph
		rm -rf "$out/graph-$side"
		# shellcheck disable=SC2086
		"$BIN/titan-train" --backend "$gpu" --model.flavor debugmodel $flag \
			--training.dataset_path "$out/graph-data" --job.dump_folder "$out/graph-$side" \
			--training.local_batch_size 8 --training.seq_len 512 --training.steps "$steps" \
			--optimizer.lr 2e-3 --lr_scheduler.warmup_steps 5 --metrics.log_freq 10 \
			--compile.enable --checkpoint.enable false --debug.seed 7 \
			2>"$out/graph-$side.log" ||
			{ echo "titan-train ($side) failed:"; tail -5 "$out/graph-$side.log"; return 1; }
		losses "$out/graph-$side/metrics.jsonl" >"$out/graph-$side.loss"
	done
	grep -h -e 'Compiling the whole step' -e 'Step graph' "$out/graph-graph.log"
	captured=0
	grep -q 'Step graph: step 2 captured' "$out/graph-graph.log" && captured=1
	[ "$gpu" = cpu ] && captured=1 # no CUDA graph on the CPU: the same queued step
	tg=$(mean_step_s "$out/graph-graph/metrics.jsonl" 4096)
	te=$(mean_step_s "$out/graph-eager/metrics.jsonl" 4096)
	same=0
	cmp -s "$out/graph-graph.loss" "$out/graph-eager.loss" && same=1
	join "$out/graph-eager.loss" "$out/graph-graph.loss" | awk -v n="$steps" -v tg="$tg" \
		-v te="$te" -v same="$same" -v cap="$captured" '
	{ d = $3 - $2; if (d < 0) d = -d; if (d > mx) { mx = d; at = $1 }; rows++ }
	END { printf "debugmodel %d steps: graph vs op by op largest difference %.3g (step %d), %s; step %.2f ms vs %.2f ms\n",
		rows, mx, at, same ? "bit for bit" : "not bit for bit", 1000 * tg, 1000 * te
	      printf "result train graph_steps %d\n", rows
	      printf "result train graph_max_diff %.3g\n", mx
	      printf "result train graph_bitwise %d\n", same
	      printf "result train graph_step_ms %.2f\n", 1000 * tg
	      printf "result train eager_step_ms %.2f\n", 1000 * te
	      if (tg > 0) printf "result train graph_speedup %.2f\n", te / tg
	      exit !(rows == n && mx <= 1e-6 && cap) }'
}

case ${1:-} in
curve) shift; curve "$@" ;;
graph) shift; graph "$@" ;;
mfu) shift; mfu "$@" ;;
*) echo "usage: train_check.sh curve [STEPS] | graph [STEPS] | mfu FLAVOR SEQ [STEPS]" >&2; exit 2 ;;
esac
