#!/bin/sh
# titan-train --dry-run, --json, --print-schedule and memory_estimation.enable:
# the seed's recipes plan on this machine (405B over 512 ranks), the JSON
# holds what the table says, bad plans are refused with a message and exit 2
# before any work, and a training run with memory_estimation.enable logs the
# plan first.
. tests/lib.sh
TRAIN="$BIN/titan-train"
export NO_COLOR=1 OMP_NUM_THREADS=1

t_run "8B on 8 ranks (FSDP 8) plans" "$TRAIN" --config configs/llama3_8b.toml \
	--training.local_batch_size 2 --dry-run --world-size 8 --device-memory 96GiB
cp "$TMP/.out" "$TMP/8b.txt"
t_grep "8B plan names the mesh" "on 8 ranks: pp 1, dp_replicate 1, dp_shard 8, cp 1, tp 1" "$TMP/8b.txt"
t_grep "8B plan fits 96 GiB" "^fits$" "$TMP/8b.txt"

t_run "405B on 512 ranks (FSDP 8 x TP 8 x PP 8) plans as JSON" "$TRAIN" \
	--config configs/llama3_405b.toml --training.local_batch_size 32 \
	--training.global_batch_size 256 --parallelism.pipeline_parallel_degree 8 \
	--dry-run --json --world-size 512 --device-memory 96GiB
cp "$TMP/.out" "$TMP/405b.json"
if command -v jq >/dev/null; then
	got=$(jq -r '[.degrees.pp, .degrees.dp_shard, .degrees.tp, .microbatches, (.roles | length),
		.roles[0].ranks, .schedule] | map(tostring) | join(" ")' "$TMP/405b.json")
	if [ "$got" = "8 8 8 32 8 64 1F1B" ]; then t_ok "405B JSON: degrees, 32 micro-batches, 8 roles of 64 ranks, 1F1B"
	else t_not_ok "405B JSON: degrees, 32 micro-batches, 8 roles of 64 ranks, 1F1B" "got $got"; fi
	sum=$(jq '.roles[0].bytes | [.params, .grads, .optimizer, .gathered, .activations, .comm_buffers] | add' "$TMP/405b.json")
	peak=$(jq '.roles[0].bytes.peak' "$TMP/405b.json")
	[ "$sum" = "$peak" ] && sum=true
	if [ "$sum" = true ]; then t_ok "405B JSON: the peak is the sum of its terms"
	else t_not_ok "405B JSON: the peak is the sum of its terms" "$sum"; fi
else
	t_grep "405B JSON names the schedule" '"schedule": "1F1B"' "$TMP/405b.json"
fi

# Float8 under tensor parallelism: torchtitan 0.3.0's llama3_405b preset
# (rowwise, TP 8) and 0.2.2's llama3_405b.toml (tensorwise with FSDP's float8
# all-gather, TP 8) plan at 512 ranks, their Float8 traffic on its own line
t_run "0.3.0's llama3_405b (Float8 rowwise under TP 8) plans on 512 ranks" "$TRAIN" \
	--module llama3 --config llama3_405b --dry-run --world-size 512 --device-memory 96GiB
t_grep "its Float8 amax all-reduces over tp in the plan" \
	"^pp 0: of which Float8's (882 of 883 linears, recipe rowwise): fsdp 0.000, tp 0.215" "$TMP/.out"
t_run "llama3_405b.toml (Float8 tensorwise, float8 all-gather, TP 8) plans on 512 ranks" "$TRAIN" \
	--config configs/llama3_405b.toml --dry-run --world-size 512 --device-memory 96GiB
t_grep "its e4m3 weights gathered by FSDP in the plan" \
	"^pp 0: of which Float8's (882 of 883 linears, recipe tensorwise; FSDP gathers them as e4m3): fsdp 92.054" "$TMP/.out"

t_run "--print-schedule prints the action lists" "$TRAIN" --config configs/debug_model.toml \
	--parallelism.pipeline_parallel_degree 2 --parallelism.pipeline_parallel_schedule ZBVZeroBubble \
	--training.local_batch_size 4 --print-schedule --world-size 2
t_grep "ZBV rank 0 holds stages 0 and 3" "^rank 0 (stages 0 3): 0F0 0F1 0F2 3F0 3I0 3W0" "$TMP/.out"
t_grep "the timeline has a row per time unit" "^step 24 " "$TMP/.out"

printf '0F0,0F1,0B0,0B1\n1F1,1F0,1B0,1B1\n' >"$TMP/ok.csv"
t_run "a schedule CSV plans" "$TRAIN" --config configs/debug_model.toml \
	--parallelism.pipeline_parallel_degree 2 --training.local_batch_size 2 \
	--parallelism.pipeline_parallel_schedule_csv "$TMP/ok.csv" --dry-run --world-size 2
printf '0F0,0F1,0B0,0B1\n1F0,1B0,1B1\n' >"$TMP/bad.csv"
t_fails "a CSV missing an action is refused" 2 "$TRAIN" --config configs/debug_model.toml \
	--parallelism.pipeline_parallel_degree 2 --training.local_batch_size 2 \
	--parallelism.pipeline_parallel_schedule_csv "$TMP/bad.csv" --dry-run --world-size 2
t_grep "... naming the rank, the action and the fault" "bad.csv: rank 1, action 2 (1B1): Running Full Backward for stage 1, microbatch 1 without first running Forward" "$TMP/.err"

t_fails "more stages than layers is refused" 2 "$TRAIN" --config configs/debug_model.toml \
	--parallelism.pipeline_parallel_degree 8 --dry-run --world-size 8
t_grep "... with the numbers" "more stages than the 6 layers" "$TMP/.err"
t_fails "micro-batches 1F1B cannot use are refused" 2 "$TRAIN" --config configs/debug_model.toml \
	--parallelism.pipeline_parallel_degree 4 --training.local_batch_size 2 --dry-run --world-size 4
t_grep "... with torch's message" "Number of microbatches (2) must be greater than or equal to the number of stages (4)" "$TMP/.err"
t_fails "seq_len not divisible by 2 x cp is refused" 2 "$TRAIN" --config configs/debug_model.toml \
	--parallelism.context_parallel_degree 3 --training.seq_len 2049 --dry-run --world-size 3
t_grep "... with the numbers" "training.seq_len = 2049 is not divisible by tp 1 x 2 x cp 3 = 6" "$TMP/.err"
# Sizes past the trainer's limits are refused as it refuses them, not
# multiplied into a wrapped 64-bit figure that "fits"; within the limits a
# product past 2^63 is refused with the numbers.
for key in seq_len local_batch_size; do
	t_fails "405B with training.$key 2^62 is refused" 2 "$TRAIN" --config configs/llama3_405b.toml \
		--training.$key 4611686018427387904 --dry-run --json --world-size 512 --device-memory 96GiB
	t_grep "... at the trainer's limit" "training.$key = 4611686018427387904: expected 1 to [0-9]* (the trainer's limit)" "$TMP/.err"
done
t_fails "405B with 2^20 sequences of 2^24 tokens is refused" 2 "$TRAIN" --config configs/llama3_405b.toml \
	--training.seq_len 16777216 --training.local_batch_size 1048576 --dry-run --world-size 512 --device-memory 96GiB
t_grep "... naming the micro-batch" "a micro-batch of 1048576 sequences of 16777216 tokens .* needs more than 2^63 bytes" "$TMP/.err"
# A schedule's size is bounded before it is built: 64 stages x 2^20
# micro-batches are refused at once (they used to grow memory until an
# allocation failed).
for opt in --print-schedule --dry-run; do
	t_fails "a schedule of 64 stages x 2^20 micro-batches is refused at once ($opt)" 2 \
		timeout 20 "$TRAIN" --config configs/llama3_405b.toml --training.local_batch_size 1048576 \
		--parallelism.pipeline_parallel_degree 64 --parallelism.tensor_parallel_degree 8 \
		$opt --world-size 512 --device-memory 96GiB
	t_grep "... with the numbers" "64 stages x 1048576 micro-batches .* holds up to 201326592 actions, more than the 4194304" "$TMP/.err"
done
t_fails "--device-memory wants a unit it knows" 2 "$TRAIN" --config configs/debug_model.toml \
	--dry-run --device-memory 80GB
t_fails "--world-size above 2^20 is refused" 2 "$TRAIN" --config configs/debug_model.toml \
	--dry-run --world-size 2000000
t_grep "... saying the bound" "--world-size '2000000': expected a number of ranks from 1 to 1048576" "$TMP/.err"
t_fails "--json without --dry-run is refused" 2 "$TRAIN" --config configs/debug_model.toml --json

# memory_estimation.enable: a real run logs the plan before its first step.
GEN="$BUILD/tests/shard/test_gen"
if [ -x "$GEN" ]; then
	"$GEN" gen 5 40 256 80 >"$TMP/s.tts"
	"$BIN/titan-shard" -q --out "$TMP/data" "$TMP/s.tts"
	t_run "memory_estimation.enable runs the planner first" "$TRAIN" --config configs/debug_model.toml \
		--training.dataset_path "$TMP/data" --training.steps 1 --training.seq_len 16 \
		--training.local_batch_size 1 --memory_estimation.enable --metrics.enable_tensorboard false \
		--job.dump_folder "$TMP/out" --threads 1
	t_grep "... and logs the plan" "^plan: llama3 debugmodel" "$TMP/.err"
else
	t_not_ok "token stream generator built" "missing $GEN"
fi
t_done
