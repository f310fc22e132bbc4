#!/bin/sh
# titan-train under pipeline parallelism, torchtitan's seed-checkpoint
# workflow: one process writes the seed (--checkpoint.create_seed_checkpoint),
# then runs of several pipeline plans start from it, each stage loading its
# own layers, and train as one process does from the same seed (losses of the
# 4 steps within 1e-6 relative: the plans agree to ~1e-9, tests/plan/equiv.sh).
# Their own initialisation uses another debug.seed, so a stage that did not
# load its layers would start elsewhere.  Their validation losses (forward
# through the stages) are the single process's too.  A PP 2 x FSDP 2 checkpoint covers
# every tensor once and resumes in one process.  The planner's peak of each
# pipeline role (titan-train --dry-run --json) against the backend's peak that
# each rank measured (2 steps): exact without FSDP, within a stated error with
# it and with TP (the planner's FSDP buffers are its own arithmetic).
. tests/lib.sh

TRAIN="$BIN/titan-train"
C="$BIN/titan-ckpt-convert"
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
local_batch_size = 4
seq_len = 32
steps = 4
mixed_precision_param = "float32"
[metrics]
log_freq = 1
[checkpoint]
enable = true
interval = 2
keep_latest_k = 0
last_save_model_only = false
[debug]
seed = 42
EOT

"$TRAIN" --config "$TMP/c.toml" --job.dump_folder "$TMP/seed" \
	--checkpoint.create_seed_checkpoint >"$TMP/seed.log" 2>&1
t_grep "one process writes the seed checkpoint" 'Created seed checkpoint at .*step-0' "$TMP/seed.log"

# seeded NAME NP ARGS...: a run from the seed (its own init seed 7) into
# $TMP/NAME; its validations on 32-token sequences, as it trains (the default
# 2048 made them 90 % of the test's time)
seeded() {
	name=$1 np=$2
	shift 2
	mkdir -p "$TMP/$name/checkpoint"
	cp -r "$TMP/seed/checkpoint/step-0" "$TMP/$name/checkpoint/"
	t0=$(date +%s)
	$MPIRUN -np "$np" "$TRAIN" --config "$TMP/c.toml" --job.dump_folder "$TMP/$name" \
		--debug.seed 7 --validation.enable --validation.freq 2 --validation.steps 2 \
		--validation.local_batch_size 2 --validation.seq_len 32 "$@" >"$TMP/$name.log" 2>&1
	rc=$?
	secs=$(($(date +%s) - t0))
	if [ "$rc" -eq 0 ] && grep -q 'Loading the checkpoint from .*step-0' "$TMP/$name.log"; then
		t_ok "$name: $np ranks $* from the seed (${secs}s)"
	else
		t_not_ok "$name: $np ranks $* from the seed" "exit $rc: $(tail -5 "$TMP/$name.log")"
	fi
}

loss() { # metrics.jsonl STEP KEY
	grep "^{\"step\":$2,\"$3\"" "$1" | tail -1 | sed "s/.*\"$3\":\\([^,]*\\),.*/\\1/"
}

# like NAME FIRST [KEY [STEPS]]: the KEY (loss) of steps FIRST..4 (or STEPS) of
# NAME equal the single process's, 1e-6 relative
like() {
	bad=
	key=${3:-loss}
	steps=$(echo ${4:-$(seq "$2" 4)})
	for s in $steps; do
		a=$(loss "$TMP/single/metrics.jsonl" "$s" "$key")
		b=$(loss "$TMP/$1/metrics.jsonl" "$s" "$key")
		awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= 1e-6 * a) }' ||
			bad="$bad step $s: $b vs $a;"
	done
	if [ -z "$bad" ]; then
		t_ok "$1: the $key of steps $steps are the single process's"
	else
		t_not_ok "$1: the $key of steps $steps are the single process's" "$bad"
	fi
}

PP="--parallelism.pipeline_parallel_degree"
MBS="--parallelism.pipeline_parallel_microbatch_size"
SCHED="--parallelism.pipeline_parallel_schedule"
seeded single 1
seeded pp2 2 $PP 2 --memory_estimation.enable
t_grep "memory_estimation plans the job's 2 ranks" 'plan: llama3 debugmodel .* on 2 ranks: pp 2' \
	"$TMP/pp2.log"
like pp2 1
like pp2 2 validation_loss "2 4"
seeded pp2fsdp2 4 $PP 2 $SCHED ZBVZeroBubble --training.local_batch_size 2 $MBS 1 \
	--validation.local_batch_size 1
like pp2fsdp2 1
like pp2fsdp2 2 validation_loss "2 4"
seeded pp4 4 $PP 4 $SCHED Interleaved1F1B $MBS 1
like pp4 1
like pp4 2 validation_loss "2 4"
seeded ppfqn 2 $PP 2 --parallelism.module_fqns_per_model_part \
	"tok_embeddings,layers.0,layers.1 layers.2,layers.3,layers.4,layers.5,norm,output"
like ppfqn 1
t_grep "PP 4 x 2 virtual stages: rank 0 builds stages 0 and 4" 'PP rank 0 is building stage_idx 4' "$TMP/pp4.log"

t_run "the PP 2 x FSDP 2 checkpoint verifies (every tensor covered once)" "$C" verify \
	"$TMP/pp2fsdp2/checkpoint/step-2"
mkdir -p "$TMP/resume/checkpoint"
cp -r "$TMP/pp2fsdp2/checkpoint/step-2" "$TMP/resume/checkpoint/"
$MPIRUN -np 1 "$TRAIN" --config "$TMP/c.toml" --job.dump_folder "$TMP/resume" \
	--debug.seed 7 >"$TMP/resume.log" 2>&1
t_grep "one process resumes the PP 2 x FSDP 2 checkpoint" 'Loading the checkpoint from .*step-2' \
	"$TMP/resume.log"
like resume 3
# peaks NAME NP PP TOL ARGS...: every rank's measured peak within TOL (relative)
# of its role's planned peak (pp is the mesh's outermost dimension: rank r
# plays role r / (NP / PP))
peaks() {
	name=$1 np=$2 pp=$3 tol=$4
	shift 4
	"$TRAIN" --config "$TMP/c.toml" --dry-run --json --world-size "$np" "$@" |
		sed -n 's/.*"peak": *\([0-9]*\).*/\1/p' >"$TMP/$name.plan"
	# each rank writes its own log: mpirun's merged output has lost a rank's
	# last line when ASan ranks exit together
	mkdir -p "$TMP/$name.ranks"
	$MPIRUN -np "$np" sh -c 'exec "$0" "$@" >"'"$TMP/$name.ranks"'/$OMPI_COMM_WORLD_RANK.log" 2>&1' \
		"$TRAIN" --config "$TMP/c.toml" --job.dump_folder "$TMP/$name" \
		--training.steps 2 --metrics.save_for_all_ranks "$@" >"$TMP/$name.log" 2>&1
	cat "$TMP/$name.ranks"/*.log >>"$TMP/$name.log"
	sed -n 's/.*Peak backend memory: \([0-9]*\) bytes (rank \([0-9]*\)).*/\2 \1/p' \
		"$TMP/$name.log" | sort -n >"$TMP/$name.got"
	awk -v tol="$tol" -v per=$((np / pp)) -v np="$np" '
		NR == FNR { plan[NR - 1] = $1; next }
		{ p = plan[int($1 / per)]; err = ($2 - p) / p; n++
		  printf "# rank %d (pp %d): planned %d, measured %d bytes, error %+.2f%%\n", $1, int($1 / per), p, $2, 100 * err
		  if (err < -tol || err > tol) bad = 1 }
		END { exit !(n == np && !bad) }' "$TMP/$name.plan" "$TMP/$name.got" >"$TMP/$name.cmp"
	rc=$?
	if [ "$rc" -eq 0 ]; then
		t_ok "$name: every rank's peak is its role's planned peak within $tol"
	else
		t_not_ok "$name: every rank's peak is its role's planned peak within $tol" \
			"$(cat "$TMP/$name.cmp"; tail -3 "$TMP/$name.log")"
	fi
	cat "$TMP/$name.cmp"
}
peaks peak_pp2 2 2 0 $PP 2 $SCHED GPipe
peaks peak_pp4 4 4 0 $PP 4 $SCHED Interleaved1F1B $MBS 1
peaks peak_pp2tp2 4 2 0.02 $PP 2 --parallelism.tensor_parallel_degree 2
peaks peak_pp2fsdp2 4 2 0.1 $PP 2 $SCHED ZBVZeroBubble --training.local_batch_size 2 $MBS 1
t_done
