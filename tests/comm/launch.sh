#!/bin/sh
# titan-train across processes: mpirun and run_train.sh start it, a bad mesh
# is refused by rank 0 alone before any work, a plan not built yet (pipeline,
# context parallelism) is refused,
# the SLURM script is ready to submit.
. tests/lib.sh

TRAIN=$BIN/titan-train
CFG=configs/debug_model.toml

# refused NAME NP PATTERN ARGS...: exit 2, the one line from rank 0 only, no output folder
refused() {
	name=$1 np=$2 pattern=$3
	shift 3
	rm -rf "$TMP/out"
	$MPIRUN_REFUSED -np "$np" "$TRAIN" --config $CFG --job.dump_folder "$TMP/out" "$@" >"$TMP/.out" 2>"$TMP/.err"
	rc=$?
	lines=$(grep -c '^titan-train:' "$TMP/.err")
	if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && grep -q -e "$pattern" "$TMP/.err" && [ ! -e "$TMP/out" ]; then
		t_ok "$name"
	else
		t_not_ok "$name" "exit $rc, $lines titan-train lines: $(grep -v -e '^---' "$TMP/.err" | head -6)"
	fi
}

refused "a mesh whose product is not the world size is refused naming the numbers" 3 \
	'^titan-train: parallelism: dp_replicate 1 x dp_shard 2 x cp 1 x tp 1 x pp 1 = 2, not the world size 3$' \
	--parallelism.data_parallel_shard_degree 2
refused "tp not dividing the heads is refused naming them" 3 \
	'^titan-train: parallelism.tensor_parallel_degree = 3 does not divide n_heads = 16 of debugmodel$' \
	--parallelism.tensor_parallel_degree 3 --parallelism.data_parallel_shard_degree 1
refused "dp_shard -1 that cannot fill the world is refused" 4 \
	'dp_replicate 1 x cp 1 x tp 3 x pp 1 = 3 does not divide the world size 4' \
	--parallelism.tensor_parallel_degree 3
refused "a valid mesh without its plan yet is refused saying so" 2 \
	'pipeline parallelism is not supported by this titan-train yet' \
	--parallelism.pipeline_parallel_degree 2 --parallelism.data_parallel_shard_degree 1
refused "CP 2 x FSDP 2 without its plan yet is refused saying so" 4 \
	'context_parallel_degree = 2: context parallelism is not supported' \
	--parallelism.context_parallel_degree 2

# run_train.sh: NGPU processes, the config by file or by module and name.
t_random_shards "$TMP/data" 5 100 256 80 0.1
NGPU=2 TITAN_TRAIN=$TRAIN "$ROOT/run_train.sh" --job.dump_folder "$TMP/out" \
	--training.dataset_path "$TMP/data" --training.steps 1 --training.seq_len 32 \
	--training.local_batch_size 1 >"$TMP/.out" 2>"$TMP/.err"
t_grep "run_train.sh NGPU=2 starts 2 ranks (FSDP 2)" 'Applied FSDP to the model (2 shards' "$TMP/.err"
MODULE=llama3 CONFIG=debug_model NGPU=1 TITAN_TRAIN=$TRAIN "$ROOT/run_train.sh" --job.print_config \
	--training.steps 7 >"$TMP/.out" 2>"$TMP/.err"
t_grep "MODULE/CONFIG names configs/CONFIG.toml" '^# config_file = "configs/debug_model.toml"$' "$TMP/.out"
t_grep "overrides pass through run_train.sh" '^steps = 7$' "$TMP/.out"
t_fails "--module of another family is refused" 2 "$TRAIN" --module deepseek_v3 --config debug_model
t_grep "the refusal names the config's model" 'is a model.name = "llama3" config' "$TMP/.err"
t_fails "a missing named config is refused" 2 env TITAN_CONFIG_DIR="$TMP/none" "$TRAIN" --module llama3 --config debug_model
t_grep "the refusal names the file looked for" 'no .*/none/debug_model.toml' "$TMP/.err"

t_fails "a timeout of 0 s is refused" 2 "$TRAIN" --comm.train_timeout_seconds 0
t_grep "the refusal names the keys" 'comm.init_timeout_seconds and train_timeout_seconds: must be >= 1' "$TMP/.err"

# The SLURM job: valid bash, and its ranks (nodes x tasks) fill FSDP 32 x TP 8.
S=scripts/slurm/multinode.sbatch
t_run "multinode.sbatch is valid bash" bash -n $S
nodes=$(sed -n 's/^#SBATCH --nodes=//p' $S)
tasks=$(sed -n 's/^#SBATCH --ntasks-per-node=//p' $S)
if [ "$((nodes * tasks))" -eq 256 ] && grep -q 'data_parallel_shard_degree 32' $S &&
	grep -q 'tensor_parallel_degree 8' $S && grep -q 'llama3_70b.toml' $S; then
	t_ok "multinode.sbatch runs the 70B config on 32 x 8 ranks as FSDP 32 x TP 8"
else
	t_not_ok "multinode.sbatch runs the 70B config on 32 x 8 ranks as FSDP 32 x TP 8" "$nodes x $tasks"
fi
t_done
