#!/bin/sh
# titan-train following torchtitan 0.3.0 under context parallelism over the
# documents, headtail against 0.3.0's golden steps and ptrr against one rank.
. tests/lib.sh
. tests/train/tt030.inc

# Context parallelism over the documents (ring attention masking by the whole
# rows' documents; 2 ranks under mpirun): CP 2 with the headtail balancer
# trains as 0.3.0 does (the golden's first steps), and with ptrr (torch's
# _PTRRLoadBalancer over FlexAttention's blocks of 128: rows of 256, each
# dealt by its documents) as one rank does, validation included.
cp030() {
	np=$1
	shift
	run=
	[ "$np" -gt 1 ] && run="env OMP_NUM_THREADS=1 $MPIRUN -np $np"
	# shellcheck disable=SC2086
	$run "$TRAIN" --module llama3 --config llama3_debugmodel --training.local_batch_size 2 \
		--training.mixed_precision_param float32 --debug.seed 7 "$@"
}
t_run "CP 2 (headtail) over the documents" cp030 2 --training.seq_len 64 --training.steps 3 \
	--dataloader.dataset_path "$TMP/data" --dump_folder "$TMP/cp" --parallelism.context_parallel_degree 2
steps_of "$TMP/cp/metrics.jsonl" >"$TMP/cp.tsv"
if why=$(compare "$GOLD" "$TMP/cp.tsv" 1 3 "" 1e-4 $GN32); then
	t_ok "CP 2: loss, grad norm and lr equal 0.3.0's"
else
	t_not_ok "CP 2: loss, grad norm and lr equal 0.3.0's" "$why"
fi
"$BIN/titan-shard" -q --out "$TMP/datav" --val-fraction 0.2 "$TMP/d.tts"
PTRR="--training.seq_len 256 --training.steps 2 --dataloader.dataset_path $TMP/datav \
	--validator.enable --validator.freq 2 --validator.steps 2"
# shellcheck disable=SC2086
t_run "ptrr: one rank" cp030 1 $PTRR --dump_folder "$TMP/p1"
# shellcheck disable=SC2086
t_run "ptrr: CP 2" cp030 2 $PTRR --dump_folder "$TMP/p2" \
	--parallelism.context_parallel_degree 2 --parallelism.context_parallel_load_balancer ptrr
steps_of "$TMP/p1/metrics.jsonl" >"$TMP/p1.tsv"
steps_of "$TMP/p2/metrics.jsonl" >"$TMP/p2.tsv"
if why=$(compare "$TMP/p1.tsv" "$TMP/p2.tsv" 1 2); then
	t_ok "ptrr: CP 2's steps are one rank's"
else
	t_not_ok "ptrr: CP 2's steps are one rank's" "$why"
fi
vals=$(sed -n 's/.*"validation_loss":\([^,]*\),.*/\1/p' "$TMP/p1/metrics.jsonl" "$TMP/p2/metrics.jsonl")
if echo "$vals" | awk 'NR == 1 { a = $1 } NR == 2 { d = ($1 - a) / a; ok = d < 1e-6 && d > -1e-6 }
		END { exit !(NR == 2 && ok) }'; then
	t_ok "ptrr: CP 2's validation loss is one rank's"
else
	t_not_ok "ptrr: CP 2's validation loss is one rank's" "$vals"
fi

t_done
