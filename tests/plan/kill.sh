#!/bin/sh
# kill -9 of one rank in the middle of a distributed run (FSDP 2): the job
# exits non-zero within 30 s, naming the rank, and a rerun resumes from the
# last checkpoint and finishes.
. tests/lib.sh

TRAIN="$BIN/titan-train"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive NO_COLOR=1

t_random_shards "$TMP/data" 11 300 256 120 0.1
cat >"$TMP/c.toml" <<EOT
[model]
flavor = "debugmodel"
[training]
dataset_path = "$TMP/data"
local_batch_size = 2
seq_len = 64
steps = 400
mixed_precision_param = "float32"
[checkpoint]
enable = true
interval = 2
keep_latest_k = 2
[comm]
train_timeout_seconds = 10
[debug]
seed = 42
EOT

# The rank-1 process of the job started by mpirun $1 (Open MPI sets
# OMPI_COMM_WORLD_RANK in each process it starts).
rank_pid() {
	for p in $(ps --ppid "$1" -o pid=); do
		if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1; then
			echo "$p"
			return
		fi
	done
}

$MPIRUN -np 2 "$TRAIN" --config "$TMP/c.toml" --job.dump_folder "$TMP/run" >"$TMP/run.log" 2>&1 &
job=$!
i=0
while [ ! -f "$TMP/run/checkpoint/step-4/.metadata" ] && [ $i -lt 600 ] && kill -0 $job 2>/dev/null; do
	sleep 0.1
	i=$((i + 1))
done
victim=$(rank_pid $job)
if [ -z "$victim" ]; then
	t_not_ok "rank 1 found running after a checkpoint" "$(tail -5 "$TMP/run.log")"
	kill $job 2>/dev/null
	t_done
fi
t0=$(date +%s)
kill -9 "$victim"
i=0
while kill -0 $job 2>/dev/null && [ $i -lt 600 ]; do
	sleep 0.1
	i=$((i + 1))
done
secs=$(($(date +%s) - t0))
if kill -0 $job 2>/dev/null; then
	kill $job
	t_not_ok "the job ends within 30 s of kill -9 of rank 1" "still running after ${secs}s"
	t_done
fi
wait $job
rc=$?
if [ "$rc" -ne 0 ] && [ "$secs" -le 30 ]; then
	t_ok "the job ends non-zero ($rc) ${secs} s after kill -9 of rank 1"
else
	t_not_ok "the job ends non-zero within 30 s of kill -9 of rank 1" "exit $rc after ${secs}s"
fi
t_grep "the failure names the killed rank" 'rank 1' "$TMP/run.log"

last=$(ls -d "$TMP/run/checkpoint"/step-* | sed 's/.*step-//' | grep -v partial | sort -n | tail -1)
$MPIRUN -np 2 "$TRAIN" --config "$TMP/c.toml" --job.dump_folder "$TMP/run" --training.steps $((last + 2)) \
	>"$TMP/rerun.log" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && grep -q "Loading the checkpoint from .*/step-$last\." "$TMP/rerun.log" &&
	grep -q "Training starts at step $((last + 1))" "$TMP/rerun.log"; then
	t_ok "a rerun resumes from the last checkpoint (step $last) and finishes"
else
	t_not_ok "a rerun resumes from the last checkpoint (step $last)" "exit $rc: $(grep -e Loading -e starts -e rror "$TMP/rerun.log" | head -5)"
fi
t_done
