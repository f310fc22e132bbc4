#!/bin/sh
# Ranks that disagree end the job at start-up, in one line, never in a crash
# or a hang (issue 24: 1, 2, 3 and 13).  Each job is 2 ranks of debugmodel
# under mpirun, bounded by timeout(1) so that a hang fails here.
#
# - A rank started with another key (a wrapper adds a flag on rank 1 alone,
#   as a per-node launcher script could): refused by every rank, exit 1,
#   naming the first differing key, its two values and the two ranks.
#   Before the check: SIGSEGV in the collectives (tp), a flavor's gigabytes
#   allocated while rank 0 waits (flavor), or training to exit 0 (lr, seed,
#   batch, seq_len).  A key that may differ (job.description) still trains.
# - A check that fails on rank 1 alone (the same config, but a relative
#   schedule CSV that reads differently from rank 1's folder): every rank
#   stops, exit 2, rank 1's message once.  Before: rank 1 sat in
#   MPI_Finalize and rank 0 in the mesh's split, neither timing out.
# - A failure on rank 1 alone inside the trainer's start-up (its relative
#   data folder is missing): the job ends with rank 1's message, once.
# - A SIGSTOPped rank: the others time out naming it as stopped, in one
#   line.  Before: "rank 0: step N: rank 0: comm 'fsdp': ... a peer rank is
#   hung", then a second line from the stopped rank once resumed.
. tests/lib.sh

TRAIN=$BIN/titan-train
CFG=$(pwd)/configs/debug_model.toml
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive NO_COLOR=1

t_random_shards "$TMP/data" 7 60 256 80 0.1

# Rank 1 alone gets $EXTRA; each rank runs in $TMP/r<rank> (made below).
cat >"$TMP/rank1.sh" <<'EOF'
#!/bin/sh
cd "$AGREE_DIR/r${OMPI_COMM_WORLD_RANK:-0}" || exit 9
[ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ] && echo $$ >"$AGREE_DIR/rank1.pid"
if [ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ]; then exec "$@" $EXTRA; fi
exec "$@"
EOF
chmod +x "$TMP/rank1.sh"
mkdir -p "$TMP/r0" "$TMP/r1"
EXTRA=
export AGREE_DIR=$TMP EXTRA

# says LOG: how many titan-train messages LOG holds.  mpirun merges the
# ranks' stderr, so one rank's line may start inside another's log line.
says() {
	grep -o 'titan-train: ' "$1" | wc -l
}

# job NAME LIMIT_S ARGS...: two ranks of titan-train through the wrapper;
# the status in $rc (999: slower than LIMIT_S, 124: hung), the output in
# $TMP/NAME.log, its titan-train lines counted in $lines.
job() {
	name=$1 limit=$2
	shift 2
	rm -rf "$TMP/out"
	t0=$(date +%s)
	timeout -k 5 60 $MPIRUN_REFUSED -np 2 "$TMP/rank1.sh" "$TRAIN" --config "$CFG" \
		--training.dataset_path "$TMP/data" --training.steps 2 --training.seq_len 32 \
		--training.local_batch_size 1 --job.dump_folder "$TMP/out" \
		--comm.init_timeout_seconds 10 "$@" >"$TMP/$name.log" 2>&1
	rc=$?
	secs=$(($(date +%s) - t0))
	[ "$secs" -le "$limit" ] || rc=999
	lines=$(says "$TMP/$name.log")
}

# refused NAME STATUS MSG: exit STATUS, MSG (a pattern to the line's end) the
# only titan-train message, no crash
refused() {
	if [ "$rc" -eq "$2" ] && [ "$lines" -eq 1 ] && grep -q -e "titan-train: $3\$" "$TMP/$1.log" &&
		! grep -q -e 'Signal:' -e 'signal [0-9]' "$TMP/$1.log"; then
		t_ok "$1 (${secs}s)"
	else
		t_not_ok "$1 (${secs}s)" "exit $rc (999: too slow, 124: hung), $lines titan-train lines: $(grep -v -e '^---' -e INFO "$TMP/$1.log" | head -8)"
	fi
}

# differ NAME KEY VALUE0 VALUE1 FLAG VALUE: rank 1 alone gets --FLAG VALUE
differ() {
	EXTRA="--$5 $6"
	job "$1" 20
	refused "$1" 1 "config differs across ranks: $2 is $3 on rank 0 and $4 on rank 1"
}

differ another_tensor_parallel_degree_on_one_rank_is_refused \
	parallelism.tensor_parallel_degree 1 2 parallelism.tensor_parallel_degree 2
differ another_flavor_on_one_rank_is_refused_before_it_allocates \
	model.flavor '"debugmodel"' '"llama3_8b"' model.flavor llama3_8b
differ another_lr_on_one_rank_is_refused \
	optimizer.lr 0.00080000000000000004 0.5 optimizer.lr 0.5
differ another_seed_on_one_rank_is_refused debug.seed none 5 debug.seed 5
differ another_local_batch_size_on_one_rank_is_refused \
	training.local_batch_size 1 2 training.local_batch_size 2
differ another_seq_len_on_one_rank_is_refused training.seq_len 32 64 training.seq_len 64

EXTRA="--job.description elsewhere"
job a_description_of_its_own_on_one_rank_trains 60
if [ "$rc" -eq 0 ] && grep -q 'step: *2 ' "$TMP/a_description_of_its_own_on_one_rank_trains.log"; then
	t_ok "a description of its own on one rank trains (${secs}s)"
else
	t_not_ok "a description of its own on one rank trains" "exit $rc: $(grep -v INFO "$TMP/a_description_of_its_own_on_one_rank_trains.log" | head -5)"
fi

# The same key, another file: rank 1's s.csv is a schedule the checks refuse.
cp tests/pp/golden/csv/interleaved1f1b_pp2_mb4.csv "$TMP/r0/s.csv"
cp tests/pp/golden/csv/bad_missing_f.csv "$TMP/r1/s.csv"
EXTRA=
job a_check_failing_on_one_rank_ends_every_rank_with_its_message 20 \
	--training.local_batch_size 4 --parallelism.pipeline_parallel_degree 2 \
	--parallelism.pipeline_parallel_schedule Interleaved1F1B \
	--parallelism.pipeline_parallel_schedule_csv s.csv
refused a_check_failing_on_one_rank_ends_every_rank_with_its_message 2 'rank 1: s\.csv: .*'

# Rank 1's relative data folder does not exist: the trainer fails there alone.
ln -s "$TMP/data" "$TMP/r0/data"
job a_trainer_failing_on_one_rank_at_start_ends_the_job_with_its_message 20 \
	--training.dataset_path data
if [ "$rc" -ne 0 ] && [ "$rc" -ne 999 ] && [ "$rc" -ne 124 ] && [ "$lines" -eq 1 ] &&
	grep -q "titan-train: rank 1: training.dataset_path: data: no such folder" \
		"$TMP/a_trainer_failing_on_one_rank_at_start_ends_the_job_with_its_message.log"; then
	t_ok "a trainer failing on one rank at start ends the job with its message (${secs}s)"
else
	t_not_ok "a trainer failing on one rank at start ends the job with its message" \
		"exit $rc, $lines lines: $(grep -v -e INFO -e '^---' "$TMP/a_trainer_failing_on_one_rank_at_start_ends_the_job_with_its_message.log" | head -6)"
fi

# SIGSTOP rank 1 once it trains; the others' 2 s step timeout names it.
rm -f "$TMP/rank1.pid"
job_log=$TMP/stopped.log
rm -rf "$TMP/out"
t0=$(date +%s)
timeout -k 5 90 $MPIRUN_REFUSED -np 2 "$TMP/rank1.sh" "$TRAIN" --config "$CFG" \
	--training.dataset_path "$TMP/data" --training.steps 100000 --training.seq_len 32 \
	--training.local_batch_size 1 --job.dump_folder "$TMP/out" --metrics.log_freq 1 \
	--comm.train_timeout_seconds 2 >"$job_log" 2>&1 &
pid=$!
i=0
while ! grep -q 'step: *3 ' "$job_log" && [ $i -lt 600 ] && kill -0 $pid 2>/dev/null; do
	sleep 0.1
	i=$((i + 1))
done
victim=$(cat "$TMP/rank1.pid" 2>/dev/null)
[ -n "$victim" ] && kill -STOP "$victim"
t1=$(date +%s)
wait $pid
rc=$?
secs=$(($(date +%s) - t1))
lines=$(says "$job_log")
if [ -n "$victim" ] && [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$secs" -le 20 ] &&
	[ "$lines" -eq 1 ] &&
	grep -Eq "titan-train: step [0-9]+: rank 0: comm '[a-z_]+': [a-z_]+ #[0-9]+ \([0-9]+ bytes\) timed out after 2 s: rank 1 \(pid $victim on .*\) is stopped \(SIGSTOP or a debugger\)" \
		"$job_log"; then
	t_ok "a stopped rank is named once by the rank that times out (${secs}s)"
else
	t_not_ok "a stopped rank is named once by the rank that times out (${secs}s)" \
		"exit $rc, $lines lines, victim '$victim': $(grep -v -e INFO -e '^---' "$job_log" | head -8)"
fi
[ -n "$victim" ] && kill -CONT "$victim" 2>/dev/null
t_done
