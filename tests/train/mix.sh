#!/bin/sh
# titan-train on a mixture of shard folders (titan-shard mix): killed with -9
# at three points and resumed each time, the run's losses repeat the
# uninterrupted run's bit for bit, so every resume continued the mixed stream
# exactly (the loader's state: the draws' generator and each source's
# windows taken).  A torchtitan 0.3.0 run (its loader item a pickle holding
# titan's position alone) resumes the same way, its draws replayed.  Under the
# sanitizers (SAN=1) the TOML job alone, killed twice.
. tests/lib.sh

TRAIN="$BIN/titan-train"
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 NO_COLOR=1

for s in 1 2 3; do
	"$BUILD/tests/shard/test_gen" gen $s 150 256 90 >"$TMP/s$s.tts"
	"$BIN/titan-shard" -q --out "$TMP/src$s" "$TMP/s$s.tts"
done
t_run "a mixture of three folders" "$BIN/titan-shard" -q mix --weight 0.6 "$TMP/src1" \
	--weight 0.3 "$TMP/src2" --weight 0.1 "$TMP/src3" --out "$TMP/mix"

t_tiny_job "$TMP/job.toml" "$TMP/mix" 20
cat >>"$TMP/job.toml" <<EOF
global_batch_size = 2
[metrics]
log_freq = 1
[checkpoint]
enable = true
interval = 4
[debug]
seed = 3
EOF

# kill_after DIR CKPT STEP ARGS...: start the job (its dump folder DIR) and
# kill -9 it once checkpoint CKPT is complete and step STEP has been logged.
kill_after() {
	dir=$1 ckpt=$2 step=$3
	shift 3
	"$TRAIN" "$@" "$dump" "$dir" 2>>"$dir.log" &
	t_kill_after $! "$dir" "$ckpt" "$step"
	if grep -q '^{"step":20,' "$dir/metrics.jsonl"; then
		t_not_ok "killed after step $step, before the end" "it finished first"
	else
		t_ok "killed after step $step, before the end"
	fi
}

# resumes_exactly JOB DUMP KILLS ARGS...: 20 steps straight, then killed at
# each CKPT:STEP of KILLS and resumed; steps 5-20 of both agree.  DUMP: the
# dump folder's option.
resumes_exactly() {
	job=$1 dump=$2 kills=$3
	shift 3
	t_run "$job: 20 steps straight" "$TRAIN" "$@" "$dump" "$TMP/$job-a"
	cp "$TMP/.err" "$TMP/$job-a.log"
	: >"$TMP/$job-b.log"
	for k in $kills; do
		kill_after "$TMP/$job-b" "${k%:*}" "${k#*:}" "$@"
	done
	t_run "$job: resumed to the end" "$TRAIN" "$@" "$dump" "$TMP/$job-b"
	t_grep "$job: the data resumes where the checkpoint was" \
		'The data resumes after [1-9][0-9]* windows of seq_len 16' "$TMP/.err"
	t_losses "$TMP/$job-a/metrics.jsonl" 5 20 >"$TMP/$job-a.loss"
	t_losses "$TMP/$job-b/metrics.jsonl" 5 20 >"$TMP/$job-b.loss"
	if [ "$(wc -l <"$TMP/$job-a.loss")" -eq 16 ] && cmp -s "$TMP/$job-a.loss" "$TMP/$job-b.loss"; then
		t_ok "$job: resume_after_kill_is_bit_exact on a mixture (steps 5-20, kills $kills)"
	else
		t_not_ok "$job: resume_after_kill_is_bit_exact on a mixture (steps 5-20, kills $kills)" \
			"$(paste "$TMP/$job-a.loss" "$TMP/$job-b.loss")"
	fi
}

if [ "${SAN:-0}" = 1 ]; then
	resumes_exactly toml --job.dump_folder "4:6 12:13" --config "$TMP/job.toml"
	t_done
fi
resumes_exactly toml --job.dump_folder "4:6 12:13 16:17" --config "$TMP/job.toml"
resumes_exactly tt030 --dump_folder "8:10" --module llama3 --config llama3_debugmodel --dataloader.dataset_path "$TMP/mix" \
	--training.seq_len 16 --training.local_batch_size 1 --training.global_batch_size 2 \
	--training.steps 20 --metrics.log_freq 1 --checkpoint.enable --checkpoint.interval 4 \
	--debug.seed 3 --lr_scheduler.warmup_steps 2 --validator.enable false
t_grep "tt030: the log says why 0.3.0's loader state is not written for a mixture" \
	'no torchtitan 0.3.0 equivalent (a mixture of shard folders' "$TMP/tt030-a.log"
t_done
