#!/bin/sh
# titan-train under context parallelism against one process: CP 2 (headtail,
# allgather), CP 2 without a balancer passing keys and values round the ring,
# and CP 2 x TP 2 train 4 steps of debugmodel and validate on sequences of
# another length (16 tokens to training's 32: a ring of its own); every
# step's loss and grad norm and every validation loss must be the single
# process's within 1e-6 relative (the plans agree to ~1e-8:
# tests/plan/equiv.sh), and the validation token counts exactly.
. tests/lib.sh

TRAIN="$BIN/titan-train"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive NO_COLOR=1

t_random_shards "$TMP/data" 11 300 256 120 0.1
# debugmodel (selective AC every 2nd layer) on batches of 4 x 32 tokens
set -- --config configs/debug_model.toml --training.dataset_path "$TMP/data" \
	--training.local_batch_size 4 --training.seq_len 32 --training.steps 4 \
	--training.mixed_precision_param float32 --validation.enable --validation.freq 2 \
	--validation.steps 2 --validation.seq_len 16 --validation.local_batch_size 2 \
	--debug.seed 42 --parallelism.data_parallel_shard_degree 1

# numbers FILE: every step's loss and grad norm, every validation's loss and tokens
numbers() {
	sed -n -e 's/.*"step":\([0-9]*\),"loss":\([^,]*\),"grad_norm":\([^,]*\),.*/\1 loss \2 \3/p' \
		-e 's/.*"step":\([0-9]*\),"validation_loss":\([^,]*\),"validation_tokens":\([0-9]*\).*/\1 val \2 \3/p' "$1"
}

# same NAME: NAME's numbers are the single process's
same() {
	numbers "$TMP/single/metrics.jsonl" >"$TMP/a"
	numbers "$TMP/$1/metrics.jsonl" >"$TMP/b"
	if [ "$(wc -l <"$TMP/a")" -eq 6 ] && [ "$(wc -l <"$TMP/b")" -eq 6 ] &&
		paste -d' ' "$TMP/a" "$TMP/b" | awk '
		function off(x, y) { d = x - y; if (d < 0) d = -d; return d > 1e-6 * (y < 0 ? -y : y) }
		$1 != $5 || $2 != $6 || off($7, $3) || ($2 == "loss" && off($8, $4)) ||
			($2 == "val" && $8 != $4) { bad = 1 } END { exit bad }'; then
		t_ok "$1: losses, grad norms and validation equal the single process's"
	else
		t_not_ok "$1: losses, grad norms and validation equal the single process's" \
			"$(paste -d' ' "$TMP/a" "$TMP/b")"
	fi
}

t_run "one process trains" "$TRAIN" "$@" --job.dump_folder "$TMP/single"
t_run "CP 2 trains" $MPIRUN -np 2 "$TRAIN" "$@" --job.dump_folder "$TMP/cp2" \
	--parallelism.context_parallel_degree 2
t_grep "CP 2 says what it applied" 'Applied Context Parallelism to the model (cp 2, load balancer headtail, rotate method allgather: 32 tokens per sequence in 2 chunks of 8 per rank)' "$TMP/.err"
same cp2
t_run "CP 2 without a balancer, alltoall, trains" $MPIRUN -np 2 "$TRAIN" "$@" \
	--job.dump_folder "$TMP/cp2ring" --parallelism.context_parallel_degree 2 \
	--parallelism.context_parallel_load_balancer none \
	--parallelism.context_parallel_rotate_method alltoall
same cp2ring
t_run "CP 2 x TP 2 trains" $MPIRUN -np 4 "$TRAIN" "$@" --job.dump_folder "$TMP/cp2tp2" \
	--parallelism.context_parallel_degree 2 --parallelism.tensor_parallel_degree 2
same cp2tp2
t_done
