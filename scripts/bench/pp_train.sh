#!/bin/sh
# The pipeline's bubble in titan-train: each schedule trains the debug model on
# 2 processes (pipeline_parallel_degree 2, 8 micro-batches of 1 sequence),
# and every rank logs its measured bubble (1 - the units' compute / the
# forward-backward time, steps 2..N) next to the schedule's formula and its
# simulation at unit costs; printed here with the mean over the ranks.  The
# measured figure also holds the stages' imbalance (the head's output and
# loss weigh more than a layer; pipeline_parallel_last_stage_less_layers
# moves it) and, with fewer cores than ranks, the time the ranks share a core:
# the number of cores and the load are printed.  Engine alone, without the
# trainer: scripts/bench/pp.sh.  Environment: BENCH_STEPS (default 6).
set -eu
BIN=${BIN:-bin}
BUILD=${BUILD:-build}
MPIRUN="mpirun --oversubscribe --bind-to none"
[ "$(id -u)" -eq 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/titan-bench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
echo "cores: $(nproc), load: $(uptime | sed 's/.*load average: //')"
"$BUILD/tests/shard/test_gen" gen 5 400 256 200 >"$TMP/r.tts"
"$BIN/titan-shard" -q --out "$TMP/data" --val-fraction 0.1 "$TMP/r.tts"
printf '%-22s %9s %9s %9s %9s %9s\n' schedule "rank 0" "rank 1" mean formula simulated
for s in GPipe 1F1B Interleaved1F1B LoopedBFS InterleavedZeroBubble ZBVZeroBubble DualPipeV; do
	rm -rf "$TMP/out"
	OMP_NUM_THREADS=1 NO_COLOR=1 $MPIRUN -np 2 "$BIN/titan-train" --config configs/debug_model.toml \
		--job.dump_folder "$TMP/out" --training.dataset_path "$TMP/data" \
		--training.steps "${BENCH_STEPS:-6}" --training.seq_len 64 --training.local_batch_size 8 \
		--parallelism.pipeline_parallel_degree 2 --parallelism.pipeline_parallel_schedule "$s" \
		--metrics.save_for_all_ranks --validation.enable false >"$TMP/log" 2>&1 ||
		{ echo "$s: titan-train failed: $(tail -3 "$TMP/log")"; exit 1; }
	sed -n 's/.*Pipeline bubble of rank \([0-9]*\): \([0-9.]*\)% measured.*, \([0-9.na]*\)% by .*, \([0-9.]*\)% simulated.*/\1 \2 \3 \4/p' \
		"$TMP/log" | sort -n | awk -v s="$s" '
		{ m[$1] = $2; f = $3; sim = $4 }
		END { printf "%-22s %8.1f%% %8.1f%% %8.1f%% %8s%% %8.1f%%\n", s, m[0], m[1],
		      (m[0] + m[1]) / 2, f, sim }'
done
