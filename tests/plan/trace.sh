#!/bin/sh
# profiling.enable_profiling under FSDP 2: 2 steps of titan-train on 2 ranks
# write each rank's trace (iteration_2/rank{0,1}_trace.json), which follows
# the trace-event format and shows the phases, every unit's ops and FSDP's
# collectives (checked by test_trace).
. tests/lib.sh

export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive NO_COLOR=1
t_random_shards "$TMP/data" 11 300 256 120 0.1
t_run "2 steps of FSDP 2 with profiling" $MPIRUN -np 2 "$BIN/titan-train" \
	--model.flavor debugmodel --training.dataset_path "$TMP/data" --training.local_batch_size 1 \
	--training.seq_len 32 --training.steps 2 --job.dump_folder "$TMP/run" \
	--profiling.enable_profiling --profiling.profile_freq 2 --profiling.profiler_active 2
t_grep "the log says where the traces go" 'Profiling active. Traces will be saved at' "$TMP/.err"
t_grep "and when they are written" 'Dumping profiler traces at step 2' "$TMP/.err"
# debugmodel: the embedding, 6 blocks, the head
t_run "each rank's trace validates and shows its ops and collectives" env \
	TITAN_TRACE_DIR="$TMP/run/profile_traces/iteration_2" TITAN_TRACE_RANKS=2 TITAN_TRACE_UNITS=8 \
	"$BUILD/tests/plan/test_trace"
t_done
