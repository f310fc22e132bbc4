#!/bin/sh
# Where titan-train puts what it writes: checkpoint.folder,
# metrics.save_tb_folder (and the other folders of the run) join
# job.dump_folder as torchtitan's os.path.join does: a relative one goes
# under it, an absolute one is used as given (a checkpoint on another
# filesystem), not nested as DUMP//abs/path.  And on 2 ranks, rank 0 logs
# "Finished loading the checkpoint" only once every rank has loaded its shard.
. tests/lib.sh

TRAIN="$BIN/titan-train"
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1 NO_COLOR=1

t_random_shards "$TMP/data" 7 60 256 60 0.1
t_tiny_job "$TMP/job.toml" "$TMP/data" 2
cat >>"$TMP/job.toml" <<TOML
[checkpoint]
enable = true
interval = 2
[metrics]
enable_tensorboard = true
TOML

t_run "a run with an absolute checkpoint.folder and save_tb_folder" "$TRAIN" \
	--config "$TMP/job.toml" --job.dump_folder "$TMP/out" --threads 1 \
	--checkpoint.folder "$TMP/abs/ckpt" --metrics.save_tb_folder "$TMP/abs/tb"
if [ -f "$TMP/abs/ckpt/step-2/.metadata" ]; then t_ok "... checkpoints in the folder as given"
else t_not_ok "... checkpoints in the folder as given" "$(find "$TMP" -name .metadata)"; fi
if ls "$TMP"/abs/tb/*/events.out.tfevents.* >/dev/null 2>&1; then t_ok "... events in the folder as given"
else t_not_ok "... events in the folder as given" "$(find "$TMP" -name 'events.out*')"; fi
if [ -e "$TMP/out/$TMP" ]; then t_not_ok "... nothing nested under the dump folder" "$(find "$TMP/out" | head)"
else t_ok "... nothing nested under the dump folder"; fi
t_run "a relative checkpoint.folder stays under the dump folder" "$TRAIN" \
	--config "$TMP/job.toml" --job.dump_folder "$TMP/rel" --threads 1 --checkpoint.folder ck \
	--metrics.enable_tensorboard false
if [ -f "$TMP/rel/ck/step-2/.metadata" ]; then t_ok "... in DUMP/ck"
else t_not_ok "... in DUMP/ck" "$(find "$TMP/rel" -name .metadata)"; fi

# 2 ranks (FSDP 2) save step 2; rank 1's shard goes missing; the resume
# fails on rank 1, rank 0 must not have called the load finished, and the
# failure said (once, by whichever rank says it) is rank 1's.
t_run "2 ranks save a checkpoint" $MPIRUN -np 2 "$TRAIN" --config "$TMP/job.toml" \
	--job.dump_folder "$TMP/two" --threads 1 --metrics.enable_tensorboard false \
	--parallelism.data_parallel_shard_degree 2
rm -f "$TMP/two/checkpoint/step-2/__1_0.distcp"
t_fails "a resume with rank 1's shard missing fails" 1 timeout 60 $MPIRUN_REFUSED -np 2 "$TRAIN" \
	--config "$TMP/job.toml" --job.dump_folder "$TMP/two" --threads 1 \
	--metrics.enable_tensorboard false --parallelism.data_parallel_shard_degree 2 \
	--training.steps 4
cat "$TMP/.out" >>"$TMP/.err"
if grep -q "Finished loading the checkpoint" "$TMP/.err"; then
	t_not_ok "... and no rank logs the load finished" "$(grep -e Finished -e rank "$TMP/.err" | head -5)"
else
	t_ok "... and no rank logs the load finished"
fi
t_grep "... the job's failure is rank 1's own, naming its file" 'rank 1: .*__1_0\.distcp' "$TMP/.err"
t_done
