#!/bin/sh
# titan-train's optimizer.param_groups following torchtitan 0.3.0 step for
# step: qwen3_debugmodel_moe_param_groups (AdamW without decay, Adam at lr
# 1e-4 for the routers' gates, AdamW) and DistMuon (tests/train/
# muon_groups.toml over llama3_debugmodel) against 0.3.0's golden runs
# (scripts/tt030_golden.py: tests/train/golden/tt030_qwen3_moe_param_groups.*,
# tt030_llama3_muon.*), 10 steps in float32: the loss, lr (and Muon's grad
# norm) at every step and the final parameters; Muon under FSDP 2 and TP 2
# against one process.
. tests/lib.sh
. tests/train/tt030.inc
[ "${SAN:-0}" = 1 ] && { t_skip "param groups and Muon against 0.3.0" "make check runs them"; t_done; }
GD=tests/train/golden

# params_equal NAME GOLDEN CKPT TOL [EXCEPT TOL2]: every tensor of GOLDEN (a
# torch.save of 0.3.0's final parameters) within TOL of CKPT's, those whose
# names match EXCEPT within TOL2
params_equal() {
	"$BIN/titan-ckpt-convert" diff "$2" "$3" --tol "${6:-$4}" >"$TMP/.pd" 2>&1
	"$BIN/titan-ckpt-convert" diff "$2" "$3" --tol "$4" >"$TMP/.pd1" 2>&1
	bad=$(grep -v -e ' ok ' -e ' only-in-B' "$TMP/.pd"; grep -v -e ' ok ' -e ' only-in-B' \
		"$TMP/.pd1" | grep -v -e "${5:-^$}")
	if [ -z "$bad" ] && grep -q ' ok ' "$TMP/.pd1"; then
		t_ok "$1"
	else
		t_not_ok "$1" "$(echo "$bad" | head -5)"
	fi
}

# qwen3_debugmodel_moe_param_groups from titan's seed checkpoint, which the
# golden loaded into 0.3.0's model
pg() {
	"$TRAIN" --module qwen3 --config qwen3_debugmodel_moe_param_groups --training.local_batch_size 2 \
		--training.seq_len 64 --training.mixed_precision_param float32 --debug.seed 7 \
		--dataloader.dataset_path "$TMP/data" "$@"
}
t_run "param_groups: the seed checkpoint" pg --dump_folder "$TMP/pg.seed" --checkpoint.enable \
	--checkpoint.create_seed_checkpoint
t_run "param_groups: 10 steps of qwen3_debugmodel_moe_param_groups" pg --training.steps 10 \
	--dump_folder "$TMP/pg" --checkpoint.enable --checkpoint.initial_load_path "$TMP/pg.seed/checkpoint/step-0"
steps_of "$TMP/pg/metrics.jsonl" >"$TMP/pg.tsv"
t_steps "param_groups: the loss and lr equal 0.3.0's at every step" $GD/tt030_qwen3_moe_param_groups.tsv \
	"$TMP/pg.tsv" 1 10 loss
# the norms within 1e-5; the routers' gates (Adam at lr 1e-4) and the MoE
# layers' ffn_norm within 1e-3: a router's near-tie that flips moves their
# gradients, and Adam's step on an element of a small gradient is up to lr
# whatever its size (measured 1.9e-4 and 6.9e-4; with the gates at the other
# groups' lr 8e-4 they would differ by several 1e-3)
params_equal "param_groups: the parameters of step 10 equal 0.3.0's" \
	$GD/tt030_qwen3_moe_param_groups.params.pt "$TMP/pg/checkpoint/step-10" 1e-5 \
	'ffn_norm\|router\.gate' 1e-3

# DistMuon for the layers' matrices, AdamW for the rest, llama3_debugmodel
mu() { run030 --optimizer.param_groups tests/train/muon_groups.toml --training.steps 10 "$@"; }
t_run "muon: 10 steps of llama3_debugmodel with DistMuon" mu --dump_folder "$TMP/mu" \
	--checkpoint.enable --checkpoint.interval 5
steps_of "$TMP/mu/metrics.jsonl" >"$TMP/mu.tsv"
t_steps "muon: the loss, grad norm and lr equal 0.3.0's at every step" $GD/tt030_llama3_muon.tsv \
	"$TMP/mu.tsv" 1 10
# the norms (AdamW) within 1e-5, a Muon matrix within 1e-4: its direction is
# bfloat16 GEMMs whose sums run in another order than oneDNN's, each a bf16
# ulp apart at times, which the Newton-Schulz iterations carry (measured
# 5.4e-5 of a total update near 1.5e-3; without nesterov, or with another
# lr ratio, it would be off by the update's size)
params_equal "muon: the parameters of step 10 equal 0.3.0's" $GD/tt030_llama3_muon.params.pt \
	"$TMP/mu/checkpoint/step-10" 1e-5 'attention\.wo' 1e-4
# the checkpoint's model and optimizer items are 0.3.0's (DistMuon's
# momentum_buffer and its group's values, AdamW's beside them), by name
"$BIN/titan-ckpt-convert" info "$TMP/mu/checkpoint/step-10" >"$TMP/mu.info" 2>&1
awk '{ print $1 }' "$TMP/mu.info" | grep '\.' | grep -v -e '^lr_scheduler\.' -e '^dataloader\.' \
	-e '^train_state\.' | sort >"$TMP/mu.names"
t_same "muon: the checkpoint's items are 0.3.0's, by name" $GD/tt030_llama3_muon.names "$TMP/mu.names"
# and it resumes: steps 6..10 from the checkpoint of step 5 (its momentum
# buffers loaded) as the whole run
mkdir -p "$TMP/mu5/checkpoint"
cp -r "$TMP/mu/checkpoint/step-5" "$TMP/mu5/checkpoint/"
t_run "muon: resumed from step 5 to step 10" mu --dump_folder "$TMP/mu5" --checkpoint.enable \
	--checkpoint.interval 5
steps_of "$TMP/mu5/metrics.jsonl" >"$TMP/mu5.tsv"
t_steps "muon: the resumed steps equal the whole run's" "$TMP/mu.tsv" "$TMP/mu5.tsv" 6 10

# every plan against one process: the whole matrix gathered over FSDP's and
# TP's boxes, the same direction on every rank
# (a dp rank's batch 1 of the one process's 2: the same rows)
for plan in "fsdp 2:2:--parallelism.data_parallel_shard_degree 2 --training.local_batch_size 1" \
	"tp 2:2:--parallelism.tensor_parallel_degree 2 --training.local_batch_size 2" \
	"fsdp 2 x tp 2:4:--parallelism.data_parallel_shard_degree 2 --parallelism.tensor_parallel_degree 2 --training.local_batch_size 1"; do
	pn=${plan%%:*} rest=${plan#*:}
	np=${rest%%:*} args=${rest#*:}
	d="$TMP/mu.$(echo "$pn" | tr -c 'a-z0-9' _)"
	# shellcheck disable=SC2086
	t_run "muon: $pn" env OMP_NUM_THREADS=1 $MPIRUN -np $np "$TRAIN" --module llama3 \
		--config llama3_debugmodel --training.seq_len 64 \
		--training.mixed_precision_param float32 --debug.seed 7 --dataloader.dataset_path "$TMP/data" \
		--optimizer.param_groups tests/train/muon_groups.toml --training.steps 10 \
		--dump_folder "$d" $args
	steps_of "$d/metrics.jsonl" >"$d.tsv"
	if why=$(compare "$TMP/mu.tsv" "$d.tsv" 1 10 "" 1e-5 1e-5); then
		t_ok "muon: $pn equals one process (loss and grad norm within 1e-5)"
	else
		t_not_ok "muon: $pn equals one process (loss and grad norm within 1e-5)" "$why"
	fi
done
t_done
