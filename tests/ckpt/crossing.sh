#!/bin/sh
# Checkpoints cross between titan-train and torchtitan, both ways.
#
# torchtitan 0.3.0 (titan-train --module F --config F_debugmodel, F llama3,
# qwen3, deepseek_v3; local_batch_size 2, seq_len 64, float32, 6 steps):
#   always (goldens of scripts/tt030_crossing_golden.sh in
#   tests/ckpt/golden/tt030): titan's step-3 checkpoint holds exactly the
#   keys, kinds, dtypes and shapes 0.3.0's CheckpointManager writes (q, k and
#   v's optimizer state as the fused qkv_linear.wqkv's; a tied model's
#   lm_head.weight beside tok_embeddings.weight; lr_scheduler.last_epoch
#   alone), and titan resumed from it trains steps 4..6 with the losses 0.3.0
#   had after loading it; the keys of qwen3_debugmodel_non_fused_qkv's (q, k,
#   v apart) and gpt_oss_debugmodel's checkpoints are 0.3.0's too;
#   titan-ckpt-convert reads a small checkpoint of 0.3.0's own with its q/k/v
#   fused (tests/ckpt/golden/tt030/fused), splits its optimizer state as
#   0.3.0's own hook does and fuses it back;
#   the data loader's state (tests/ckpt/golden/tt030/loader): titan's loader
#   set from the pickle 0.3.0's loader saved after 3 and after 10 batches
#   gives 0.3.0's next 2 batches (inputs, labels, positions), the pickle titan
#   writes at those positions holds 0.3.0's keys and values, and a pickle over
#   other documents is refused; titan resumes its own step 3 from the
#   pickle's titan record;
#   the same for llama3 with DistMuon (tests/train/muon_groups.toml), with
#   fused_opt_states_bf16, and deepseek_v3 with qwen3_debugmodel_moe_param_
#   groups' groups (goldens llama3_muon, llama3_bf16_states,
#   deepseek_v3_groups);
#   with torchtitan 0.3.0's source in $TT030 and $PYTHON (torch, numpy,
#   datasets), live, scripts/tt030_crossing.py: 0.3.0 loads titan's step 3
#   (its data loader too, from titan's pickle: each batch it gives after is
#   its own run's) and trains 4..6 with titan's losses, and titan-train
#   resumes the step-3 checkpoint 0.3.0's own CheckpointManager wrote (its
#   data loader from 0.3.0's pickle) with 0.3.0's losses at steps 4..6.
#
# torchtitan 0.2.2, on the debugmodel flavor (embedding and output of
# vocab_size 2048 rows, as torchtitan sizes them, with data of a 256-token
# vocabulary), live only:
#   titan -> torchtitan: torchtitan's CheckpointManager loads titan's seed
#     checkpoint (the same weights bit for bit) and its full step-3 checkpoint
#     (model, AdamW, lr scheduler, train_state), and its step 4 gives titan's
#     loss and weights;
#   torchtitan -> titan: titan-train resumes torchtitan's step-2 checkpoint
#     (its data loader state is a pickle titan cannot read: titan resumes the
#     data from train_state.ntokens_seen) and its step 3 gives torchtitan's
#     loss and weights.
# The torchtitan side is scripts/ckpt_crossing.py.  Needs $PYTHON with torch,
# safetensors and torchtitan 0.2.2; skipped otherwise (as in CI):
#   PYTHON=/path/to/venv/bin/python [TT030=<torchtitan 0.3.0>] make check TITAN_TEST_FILTER=crossing
. tests/lib.sh

GEN="$BUILD/tests/shard/test_gen"
TRAIN="$BIN/titan-train"
C="$BIN/titan-ckpt-convert"
PY="${PYTHON:-python3}"
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 NO_COLOR=1

# torchtitan 0.3.0 ------------------------------------------------------------
G30=tests/ckpt/golden/tt030
"$GEN" gen 11 400 2048 60 >"$TMP/d30.tts"
"$BIN/titan-shard" -q --out "$TMP/data30" --val-fraction 0 "$TMP/d30.tts"
run030() { # FAMILY DUMP ARGS...
	fam=$1 dump=$2
	shift 2
	"$TRAIN" --module "$fam" --config "${fam}_debugmodel" --training.local_batch_size 2 \
		--training.seq_len 64 --training.mixed_precision_param float32 --debug.seed 7 \
		--dataloader.dataset_path "$TMP/data30" --dump_folder "$dump" --training.steps 6 \
		--checkpoint.enable --checkpoint.interval 3 --checkpoint.last_save_model_only false "$@"
}
# titan-ckpt-convert info as scripts/tt030_crossing.py manifest writes it
manifest() { # DIR
	"$C" info "$1" | awk '
		/ items, / { next }
		match($1, /(^|\.)layers\.[0-9]+\./) {
			n = substr($1, RSTART, RLENGTH); gsub(/[^0-9]/, "", n); if (n + 0 > 1) next
		}
		{
			shape = "-"
			if ($2 == "tensor" && match($0, /\([^)]*\)/)) {
				shape = substr($0, RSTART + 1, RLENGTH - 2); gsub(/ /, "", shape)
			}
			printf "%s\t%s\t%s\t%s\n", $1, $2, $2 == "tensor" ? $3 : "-", shape
		}' | LC_ALL=C sort
}
# LOSSES (step loss) within 1e-5 relative of WANT (step loss), steps 4..6
same_losses() { # NAME GOT WANT
	if why=$(awk 'NR == FNR { w[$1] = $2; next }
		{ d = ($2 - w[$1]) / w[$1]; if (d < 0) d = -d; if (d > m) m = d; n++
		  if (!($1 in w) || d > 1e-5) { printf "step %s: %s, wanted %s; ", $1, $2, w[$1]; bad = 1 } }
		END { if (n != 3) { printf "%d steps", n; bad = 1 }; printf "largest relative difference %.2g", m; exit bad }' \
		"$3" "$2"); then
		t_ok "$1 ($why)"
	else
		t_not_ok "$1" "$why"
	fi
}
steps_of() { # metrics.jsonl: step loss of steps 4..6
	sed -n 's/^{"step":\([4-6]\),"loss":\([^,]*\),.*/\1 \2/p' "$1"
}
# torchtitan 0.3.0 live: its source in $TT030, run by $PYTHON
live030=0
if [ -n "${TT030:-}" ] && PYTHONPATH=$TT030 "$PY" -c 'import torch, numpy, datasets
from torchtitan.components.checkpointer.dcp import CheckpointManager' >/dev/null 2>&1; then
	live030=1
fi
py030() { PYTHONPATH=$TT030 PYTHONDONTWRITEBYTECODE=1 "$PY" scripts/tt030_crossing.py "$@"; }

# 0.3.0's data loader state, a pickle of its own (after 3 and 10 batches of
# 2 rows of 64 pairs over d30's documents), and titan's at the same positions.
S30="$BUILD/tests/loader/test_state030"
for s in 3 10; do
	t_run "0.3.0's loader state after $s batches: titan's loader reads it" \
		"$S30" next "$TMP/data30" 64 2 "$G30/loader/step-$s.pkl" 2
	t_same "its next 2 batches are 0.3.0's (inputs, labels, positions)" \
		"$G30/loader/step-$s.next.tsv" "$TMP/.out"
	t_run "titan's pickle after $((2 * s)) windows" \
		"$S30" encode "$TMP/data30" 64 2 $((2 * s)) "$TMP/l$s.pkl"
	"$S30" fields "$G30/loader/step-$s.pkl" >"$TMP/g$s.fields" 2>&1
	"$S30" fields "$TMP/l$s.pkl" >"$TMP/l$s.fields" 2>&1
	t_same "it holds 0.3.0's keys and values (sample_idx, epoch, buffers, counters)" \
		"$TMP/g$s.fields" "$TMP/l$s.fields"
done
t_fails "0.3.0's state of 2 dp ranks: not continued" 1 \
	"$S30" next "$TMP/data30" 64 2 "$G30/loader/step-3.pkl" 2 2
t_grep "saying why" "split the documents over 2 dp ranks" "$TMP/.err"
"$GEN" gen 12 400 2048 60 >"$TMP/other.tts"
"$BIN/titan-shard" -q --out "$TMP/other" --val-fraction 0 "$TMP/other.tts"
t_fails "0.3.0's state over other documents: refused" 1 \
	"$S30" next "$TMP/other" 64 2 "$G30/loader/step-3.pkl" 2
t_grep "naming the buffer that differs" "dataset_state.inputs_buffer\[0\] is [0-9]*, titan's document 11 has" \
	"$TMP/.err"
# under SAN=1 llama3 and qwen3 (fused q, k, v and the tied listing) alone:
# make check compares every family
FAMS="llama3 qwen3 deepseek_v3"
[ "${SAN:-0}" = 1 ] && FAMS="llama3 qwen3"
# cross NAME FAMILY OPT [TITAN ARGS...]: titan's F_debugmodel run (with TITAN
# ARGS) against 0.3.0's (scripts/tt030_crossing.py --opt OPT, none when "-"),
# NAME the goldens' (NAME.keys.tsv, crossing.tsv's rows)
cross() {
	cn=$1 cf=$2 co=$3
	shift 3
	po=
	[ "$co" != - ] && po="--opt $co"
	X="$TMP/x$cn"
	t_run "$cn: titan trains 6 steps as 0.3.0, saving steps 3 and 6" run030 $cf "$X" "$@"
	manifest "$X/checkpoint/step-3" >"$TMP/$cn.keys.tsv"
	t_same "$cn: titan's checkpoint holds 0.3.0's keys, kinds, dtypes and shapes" \
		"$G30/$cn.keys.tsv" "$TMP/$cn.keys.tsv"
	mkdir -p "$TMP/r$cn/checkpoint"
	cp -r "$X/checkpoint/step-3" "$TMP/r$cn/checkpoint/"
	t_run "$cn: titan resumes its step 3" run030 $cf "$TMP/r$cn" "$@"
	t_grep "$cn: its data from the titan record in its dataloader.dp_rank_0 pickle" \
		"data resumes after 6 windows of seq_len 64 (loader state: titan's record in the pickle)" \
		"$TMP/.err"
	steps_of "$TMP/r$cn/metrics.jsonl" >"$TMP/r$cn.loss"
	sed -n "s/^$cn\t\([0-9]*\)\t/\1 /p" "$G30/crossing.tsv" >"$TMP/g$cn.loss"
	same_losses "$cn: steps 4..6 from titan's step 3 are 0.3.0's from it (golden)" \
		"$TMP/r$cn.loss" "$TMP/g$cn.loss"
	if [ $live030 = 0 ]; then
		t_skip "$cn: 0.3.0 resumes titan's checkpoint and the reverse, live" \
			"no torchtitan 0.3.0 (set TT030=<its source> and PYTHON=<venv>/bin/python)"
		return
	fi
	steps_of "$X/metrics.jsonl" >"$TMP/x$cn.loss"
	# shellcheck disable=SC2086
	t_run "$cn: 0.3.0 loads titan's step 3 (model, optimizer, lr_scheduler, train_state, dataloader)" \
		py030 $po titan-to-tt030 "${cf}_debugmodel" "$X" "$TMP/d30.tts" 3 6
	t_grep "$cn: its loader, set from titan's pickle, gives its own run's batches 4..6" \
		'^batch 6 same$' "$TMP/.out"
	sed -n 's/^loss //p' "$TMP/.out" >"$TMP/t$cn.loss"
	same_losses "$cn: its steps 4..6 are titan's" "$TMP/t$cn.loss" "$TMP/x$cn.loss"
	Y="$TMP/y$cn"
	t_run "$cn: titan's seed checkpoint" run030 $cf "$Y" --checkpoint.create_seed_checkpoint "$@"
	# shellcheck disable=SC2086
	t_run "$cn: 0.3.0 trains 6 steps from it, its CheckpointManager saving step 3" \
		py030 $po tt030-to-titan "${cf}_debugmodel" "$Y" "$TMP/d30.tts" 3 6
	sed -n 's/^loss \([4-6]\) /\1 /p' "$TMP/.out" >"$TMP/y$cn.want"
	rm -rf "$Y/checkpoint/step-6"
	t_run "$cn: titan-train resumes 0.3.0's step 3" run030 $cf "$Y" "$@"
	t_grep "$cn: the data from 0.3.0's dataloader.dp_rank_0 pickle" \
		"data resumes after 6 windows of seq_len 64 (loader state: torchtitan 0.3.0's: 12 documents read, 7 pairs buffered)" \
		"$TMP/.err"
	steps_of "$Y/metrics.jsonl" >"$TMP/y$cn.loss"
	same_losses "$cn: titan's steps 4..6 are 0.3.0's" "$TMP/y$cn.loss" "$TMP/y$cn.want"
}
for fam in $FAMS; do
	cross $fam $fam -
done
# the optimizers of tests/train/tt030_optim.sh: DistMuon beside AdamW
# (momentum_buffer and its group's values), AdamW's states in bfloat16
# (fused_opt_states_bf16), qwen3_debugmodel_moe_param_groups' groups over
# deepseek_v3_debugmodel (each parameter's group values); under SAN=1 make
# check has crossed them
if [ "${SAN:-0}" != 1 ]; then
	cross llama3_muon llama3 muon=tests/train/muon_groups.toml \
		--optimizer.param_groups tests/train/muon_groups.toml
	cross llama3_bf16_states llama3 bf16_states --optimizer.implementation fused_opt_states_bf16
	cross deepseek_v3_groups deepseek_v3 groups_of=qwen3_debugmodel_moe_param_groups \
		--optimizer.param_groups tests/train/moe_param_groups.toml
fi

# Two data-parallel ranks: titan's ranks take turns over one stream, 0.3.0's
# read a block of the documents each, so titan's pickle holds its own record
# alone (saying why), and titan resumes from it.
dp2() { # DUMP
	$MPIRUN -np 2 "$TRAIN" --module llama3 --config llama3_debugmodel \
		--training.local_batch_size 1 --training.seq_len 64 \
		--training.mixed_precision_param float32 --debug.seed 7 \
		--dataloader.dataset_path "$TMP/data30" --dump_folder "$1" --training.steps 4 \
		--checkpoint.enable --checkpoint.interval 2 --checkpoint.last_save_model_only false
}
t_run "llama3, 2 dp ranks: titan trains 4 steps, saving step 2" dp2 "$TMP/dp2"
t_grep "it says why its data position has no 0.3.0 equivalent" \
	"dataloader.dp_rank_0: titan's data position has no torchtitan 0.3.0 equivalent (at a dp degree above 1" \
	"$TMP/.err"
mkdir -p "$TMP/dp2r/checkpoint" && cp -r "$TMP/dp2/checkpoint/step-2" "$TMP/dp2r/checkpoint/"
t_run "it resumes its step 2" dp2 "$TMP/dp2r"
t_grep "from the titan record in the pickle" \
	"data resumes after 4 windows of seq_len 64 (loader state: titan's record in the pickle)" \
	"$TMP/.err"
sed -n 's/^{"step":\([34]\),"loss":\([^,]*\),.*/\1 \2/p' "$TMP/dp2/metrics.jsonl" >"$TMP/dp2.loss"
sed -n 's/^{"step":\([34]\),"loss":\([^,]*\),.*/\1 \2/p' "$TMP/dp2r/metrics.jsonl" >"$TMP/dp2r.loss"
if [ "$(wc -l <"$TMP/dp2.loss")" -eq 2 ] && cmp -s "$TMP/dp2.loss" "$TMP/dp2r.loss"; then
	t_ok "steps 3 and 4 are the uninterrupted run's, bit for bit ($(tr '\n' ' ' <"$TMP/dp2r.loss"))"
else
	t_not_ok "steps 3 and 4 are the uninterrupted run's" "$(cat "$TMP/dp2.loss" "$TMP/dp2r.loss")"
fi

# Two presets more: q, k and v apart (their optimizer state their own), and
# GPT-OSS's fused q/k/v with biases.
for p in "qwen3 qwen3_debugmodel_non_fused_qkv" "gpt_oss gpt_oss_debugmodel"; do
	set -- $p
	t_run "$2: titan's checkpoint" "$TRAIN" --module "$1" --config "$2" \
		--training.local_batch_size 2 --training.seq_len 64 --training.mixed_precision_param float32 \
		--debug.seed 7 --dataloader.dataset_path "$TMP/data30" --dump_folder "$TMP/$2" \
		--training.steps 1 --checkpoint.enable --checkpoint.last_save_model_only false
	manifest "$TMP/$2/checkpoint/step-1" >"$TMP/$2.keys.tsv"
	t_same "$2: it holds 0.3.0's keys, kinds, dtypes and shapes" "$G30/$2.keys.tsv" \
		"$TMP/$2.keys.tsv"
done

# A checkpoint 0.3.0 wrote with its q/k/v fused (dim 32, 4 query heads on 2
# kv heads of 8 rows), and 0.3.0's own split of its optimizer state:
# titan-ckpt-convert reads it, splits it under 0.2.2's names and fuses it back.
F=$G30/fused
"$C" info "$F/step-2" >"$TMP/f.info" 2>&1
t_grep "info: 0.3.0's fused optimizer state as stored" \
	'^optimizer.state.layers.0.attention.qkv_linear.wqkv.weight.exp_avg  *tensor  *float32  *(64, 32)' \
	"$TMP/f.info"
t_fails "to 0.2.2's names without the head dim: refused" 1 \
	"$C" single-to-dcp "$F/step-2" "$TMP/f22" --names 0.2.2
t_grep "saying what is missing" "needs the head dim to split it (--head-dim N)" "$TMP/.err"
t_fails "a head dim the rows do not divide into: refused" 1 \
	"$C" single-to-dcp "$F/step-2" "$TMP/f22" --names 0.2.2 --head-dim 5
t_grep "saying why" "64 rows are not kv groups of 20 (2 query heads per kv head, head dim 5)" "$TMP/.err"
t_run "to 0.2.2's names with --head-dim 8" "$C" single-to-dcp "$F/step-2" "$TMP/f22" --names 0.2.2 \
	--head-dim 8
"$C" diff "$F/split.pt" "$TMP/f22" >"$TMP/f.diff" 2>&1
n=$(grep -c ' ok  *max_abs 0 max_rel 0$' "$TMP/f.diff")
bad=$(grep -v -e ' ok ' -e only-in-B "$TMP/f.diff" | wc -l)
if [ "$n" -eq 18 ] && [ "$bad" -eq 0 ]; then
	t_ok "wq, wk, wv's exp_avg and exp_avg_sq are 0.3.0's split, bit for bit (and the 12 weights)"
else
	t_not_ok "wq, wk, wv's state is 0.3.0's split" "$n equal, $bad other: $(grep -v ' ok ' "$TMP/f.diff" | head -3)"
fi
t_run "back to 0.3.0's names, fused again" "$C" single-to-dcp "$TMP/f22" "$TMP/f30" --names 0.3.0 \
	--head-dim 8
t_run "every item as 0.3.0 wrote it" "$C" diff "$F/step-2" "$TMP/f30"
"$C" info "$TMP/f30" | awk '{ print $1 }' >"$TMP/f30.names"
awk '{ print $1 }' "$TMP/f.info" >"$TMP/f.names"
t_same "under the same names, in the same order" "$TMP/f.names" "$TMP/f30.names"
t_run "diff compares the two layouts" "$C" diff "$F/step-2" "$TMP/f22" --head-dim 8
t_run "to-hf exports its model" "$C" to-hf "$F/step-2" "$TMP/fhf" --flavor debugmodel --n-heads 4 \
	--n-kv-heads 2

# torchtitan 0.2.2 -------------------------------------------------------------
if ! "$PY" -c 'import torch, safetensors, torchtitan, importlib.metadata as m; assert m.version("torchtitan") == "0.2.2"' \
	>/dev/null 2>&1; then
	t_skip "checkpoints cross between titan-train and torchtitan" \
		"no torchtitan 0.2.2 in \$PYTHON ($PY); run with PYTHON=<venv>/bin/python"
	t_done
fi

"$GEN" gen 5 200 256 120 >"$TMP/s.tts"
"$BIN/titan-shard" -q --out "$TMP/data" --val-fraction 0.05 "$TMP/s.tts"
"$BIN/titan-shard" cat --split train "$TMP/data" >"$TMP/train.tts"

# The settings of scripts/ckpt_crossing.py's job_config().  Both sides compute
# in float32 (no autocast): the crossing is of the state, compared closely.
cat >"$TMP/cross.toml" <<EOF
[model]
flavor = "debugmodel"
[optimizer]
lr = 1e-3
[lr_scheduler]
warmup_steps = 2
total_steps = 10
[training]
dataset_path = "$TMP/data"
local_batch_size = 2
seq_len = 16
max_norm = 1.0
mixed_precision_param = "float32"
[checkpoint]
enable = true
interval = 100
keep_latest_k = 0
last_save_model_only = false
[activation_checkpoint]
mode = "none"
[debug]
seed = 42
EOF

loss_at() { # metrics.jsonl STEP
	grep "^{\"step\":$2,\"loss\"" "$1" | tail -1 | sed 's/.*"loss":\([^,]*\),.*/\1/'
}

close_to() { # NAME TITAN TORCHTITAN RELATIVE-TOLERANCE
	if awk -v a="$2" -v b="$3" -v r="$4" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= r * b) }'; then
		t_ok "$1 ($2, $3)"
	else
		t_not_ok "$1" "titan $2, torchtitan $3"
	fi
}

# titan -> torchtitan.
A="$TMP/a"
t_run "titan writes a seed checkpoint" "$TRAIN" --config "$TMP/cross.toml" --job.dump_folder "$A" \
	--checkpoint.create_seed_checkpoint
t_run "titan trains 3 steps from it" "$TRAIN" --config "$TMP/cross.toml" --job.dump_folder "$A" \
	--training.steps 3
cp -r "$A/checkpoint/step-3" "$TMP/step-3.saved"
t_run "titan trains step 4" "$TRAIN" --config "$TMP/cross.toml" --job.dump_folder "$A" --training.steps 4
loss_at "$A/metrics.jsonl" 4 >"$TMP/loss4"
"$C" dcp-to-single "$A/checkpoint/step-0" "$TMP/seed.safetensors" >/dev/null 2>&1
"$C" dcp-to-single "$A/checkpoint/step-4" "$TMP/step4.safetensors" --model-only >/dev/null 2>&1
rm -rf "$A/checkpoint/step-4"
t_run "torchtitan loads titan's seed and step-3 checkpoints and its step 4 matches titan's" \
	"$PY" scripts/ckpt_crossing.py titan-to-torchtitan "$A" "$TMP/train.tts" "$TMP/seed.safetensors" \
	"$TMP/loss4" "$TMP/step4.safetensors"
sed 's/^/# /' "$TMP/.out"

# torchtitan -> titan.
B="$TMP/b"
t_run "torchtitan trains 2 steps and saves step-2" \
	"$PY" scripts/ckpt_crossing.py torchtitan-to-titan "$B" "$TMP/train.tts" "$TMP/loss3" \
	"$TMP/tt3.safetensors"
t_run "titan-train resumes torchtitan's step-2 and trains step 3" \
	"$TRAIN" --config "$TMP/cross.toml" --job.dump_folder "$B" --training.steps 3
t_grep "titan resumes torchtitan's data position from ntokens_seen" \
	'resumes after train_state.ntokens_seen = 64 tokens (4 windows)' "$TMP/.err"
t_grep "titan starts at step 3" 'Training starts at step 3' "$TMP/.err"
close_to "step 3 after torchtitan's step-2: titan's loss is torchtitan's" \
	"$(loss_at "$B/metrics.jsonl" 3)" "$(cat "$TMP/loss3")" 1e-4
"$C" dcp-to-single "$B/checkpoint/step-3" "$TMP/b3.safetensors" --model-only >/dev/null 2>&1
"$C" diff "$TMP/tt3.safetensors" "$TMP/b3.safetensors" --tol 2e-6 >"$TMP/b3.diff" 2>&1
bad=$(grep -vc ' ok ' "$TMP/b3.diff")
n=$(grep -c ' ok ' "$TMP/b3.diff")
if [ "$n" -eq 57 ] && [ "$bad" -eq 0 ]; then
	t_ok "step 3 weights: titan's equal torchtitan's within 2e-6 (57 tensors)"
else
	t_not_ok "step 3 weights: titan's equal torchtitan's within 2e-6" "$n ok, $bad other: $(grep -v ' ok ' "$TMP/b3.diff" | head -3)"
fi

# HF safetensors both ways (checkpoint.last_save_in_hf, initial_load_in_hf).
t_run "titan's last save in HF safetensors" "$TRAIN" --config "$TMP/cross.toml" --job.dump_folder "$TMP/h" \
	--training.steps 2 --checkpoint.last_save_model_only --checkpoint.last_save_in_hf \
	--model.hf_assets_path "$TMP/none"
t_run "the same run with a DCP last save" "$TRAIN" --config "$TMP/cross.toml" --job.dump_folder "$TMP/hd" \
	--training.steps 2 --checkpoint.last_save_model_only
"$C" dcp-to-single "$TMP/hd/checkpoint/step-2" "$TMP/hd2.safetensors" --model-only >/dev/null 2>&1
t_run "torchtitan's initial_load_in_hf loads titan's HF last save: the model, bit for bit" \
	"$PY" scripts/ckpt_crossing.py hf-load "$TMP/h/checkpoint/step-2" "$TMP/hd2.safetensors"
sed 's/^/# /' "$TMP/.out"
t_run "torchtitan's last_save_in_hf" "$PY" scripts/ckpt_crossing.py hf-save "$TMP/g" "$TMP/train.tts" \
	"$TMP/loss1" "$TMP/g.safetensors"
sed 's/^/# /' "$TMP/.out"
"$C" from-hf "$TMP/g/checkpoint/step-1" "$TMP/g-dcp" --flavor debugmodel >/dev/null 2>"$TMP/fromhf.err"
"$C" diff "$TMP/g.safetensors" "$TMP/g-dcp" >"$TMP/g.diff" 2>&1
n=$(grep -c ' ok  *max_abs 0 max_rel 0$' "$TMP/g.diff")
[ "$n" -eq 57 ] && t_ok "titan reads torchtitan's HF last save as torchtitan's model, bit for bit" ||
	t_not_ok "titan reads torchtitan's HF last save as torchtitan's model" "$n equal: $(head -3 "$TMP/g.diff") $(cat "$TMP/fromhf.err")"
t_run "titan-train starts from torchtitan's HF last save (initial_load_in_hf)" "$TRAIN" \
	--config "$TMP/cross.toml" --job.dump_folder "$TMP/gt" --training.steps 1 \
	--checkpoint.initial_load_in_hf --checkpoint.initial_load_path "$TMP/g/checkpoint/step-1"
close_to "its first loss is torchtitan's on the same batch" \
	"$(loss_at "$TMP/gt/metrics.jsonl" 1)" "$(cat "$TMP/loss1")" 1e-5

t_done
