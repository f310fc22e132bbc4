#!/bin/sh
# titan-train across processes: mpirun and run_train.sh start it, a bad mesh
# is refused by rank 0 alone before any work (expert parallelism's degrees
# too), as is a pipeline the run could not execute (torchtitan's messages) and
# a sequence the context-parallel chunks do not divide, EP 2 trains,
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
# pipelines the run could not execute, refused with torchtitan's messages
refused "more pipeline ranks than layers is refused" 8 \
	'pipeline_parallel_degree = 8: more stages than the 6 layers of debugmodel' \
	--parallelism.pipeline_parallel_degree 8 --parallelism.data_parallel_shard_degree 1
refused "more (virtual) stages than effective layers is refused" 4 \
	'Number of stages (8) cannot be greater than effective layers (6)' \
	--parallelism.pipeline_parallel_degree 4 --parallelism.pipeline_parallel_schedule \
	Interleaved1F1B --parallelism.pipeline_parallel_first_stage_less_layers 0 \
	--parallelism.pipeline_parallel_last_stage_less_layers 0
refused "a micro-batch size not dividing the batch is refused" 2 \
	'Batch size 8 must be divisible by microbatch_size 3' \
	--parallelism.pipeline_parallel_degree 2 --parallelism.pipeline_parallel_microbatch_size 3
refused "micro-batches the schedule cannot use are refused" 2 \
	'Interleaved 1F1B requires the number of microbatches to be a multiple of the number of rounds (2), but got 5' \
	--parallelism.pipeline_parallel_degree 2 --parallelism.pipeline_parallel_schedule \
	Interleaved1F1B --training.local_batch_size 5
refused "a schedule CSV placing stages elsewhere is refused" 2 \
	'zbvzerobubble_pp2_mb4.csv: stage 2 runs on rank 1, but Interleaved1F1B places it on rank 0' \
	--parallelism.pipeline_parallel_degree 2 --parallelism.pipeline_parallel_schedule \
	Interleaved1F1B --training.local_batch_size 4 --parallelism.pipeline_parallel_schedule_csv \
	tests/pp/golden/csv/zbvzerobubble_pp2_mb4.csv
refused "CP 2: seq_len not divisible by 2 x cp (headtail) is refused before any work" 2 \
	'^titan-train: training.seq_len = 30 is not divisible by tp 1 x 2 x cp 2 = 4$' \
	--parallelism.context_parallel_degree 2 --parallelism.data_parallel_shard_degree 1 \
	--training.seq_len 30
refused "CP 2 x TP 2: seq_len not divisible by tp x 2 cp is refused" 4 \
	'^titan-train: training.seq_len = 36 is not divisible by tp 2 x 2 x cp 2 = 8$' \
	--parallelism.context_parallel_degree 2 --parallelism.tensor_parallel_degree 2 \
	--training.seq_len 36
refused "CP 2 without a load balancer: seq_len not divisible by cp is refused" 2 \
	'^titan-train: training.seq_len = 31 is not divisible by tp 1 x cp 2 = 2$' \
	--parallelism.context_parallel_degree 2 --parallelism.data_parallel_shard_degree 1 \
	--parallelism.context_parallel_load_balancer none --training.seq_len 31
refused "CP 2: a validation seq_len the chunks do not divide is refused" 2 \
	'^titan-train: validation.seq_len = 18 is not divisible by tp 1 x 2 x cp 2 = 4$' \
	--parallelism.context_parallel_degree 2 --parallelism.data_parallel_shard_degree 1 \
	--validation.enable --validation.seq_len 18
refused "the ptrr load balancer (FlexAttention's) is refused without documents, saying why" 2 \
	"context_parallel_load_balancer 'ptrr' deals the blocks of FlexAttention's document masks" \
	--parallelism.context_parallel_degree 2 --parallelism.data_parallel_shard_degree 1 \
	--parallelism.context_parallel_load_balancer ptrr
CFG=configs/deepseek_v3_debug.toml
refused "ep not dividing the experts is refused naming them" 3 \
	'^titan-train: parallelism.expert_parallel_degree = 3 does not divide the 8 experts of debugmodel$' \
	--parallelism.expert_parallel_degree 3
refused "ep not fitting dp_shard x cp is refused naming the numbers" 3 \
	'expert_parallel_degree 2 x expert_tensor_parallel_degree 1 = 2 does not divide dp_shard 3 x cp 1 x tp 1 = 3' \
	--parallelism.expert_parallel_degree 2
CFG=configs/debug_model.toml

# run_train.sh: NGPU processes, the config by file or by module and name.
t_random_shards "$TMP/data" 5 100 256 80 0.1
# DeepSeek V3's debug model under EP 2 (dp_shard 2 lends its ranks to ep).
$MPIRUN -np 2 env OMP_NUM_THREADS=1 "$TRAIN" --config configs/deepseek_v3_debug.toml \
	--job.dump_folder "$TMP/ep" --training.dataset_path "$TMP/data" --training.steps 2 \
	--training.seq_len 32 --training.local_batch_size 1 \
	--parallelism.expert_parallel_degree 2 >"$TMP/.out" 2>"$TMP/.err"
t_grep "titan-train runs EP 2 on 2 ranks" 'Applied Expert Parallelism to the model (ep 2: 4 experts per rank' "$TMP/.err"
t_grep "EP 2 trains its steps" 'step: *2 ' "$TMP/.err"
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
