#!/bin/sh
# titan-train's optimizer.param_groups following torchtitan 0.3.0 step for
# step: qwen3_debugmodel_moe_param_groups' groups (AdamW without decay, Adam
# at lr 1e-4 for the routers' gates, AdamW) over deepseek_v3_debugmodel and
# DistMuon (tests/train/muon_groups.toml over llama3_debugmodel) against
# 0.3.0's golden runs (scripts/tt030_golden.py: tests/train/golden/
# tt030_moe_param_groups.*, tt030_llama3_muon.*), 10 steps in float32: the
# loss, lr (and Muon's grad norm) at every step and the final parameters;
# Muon's checkpoint and resume; Muon refused under expert parallelism;
# AdamW's states in bfloat16 (fused_opt_states_bf16, tt030_llama3_bf16_states.*).  Every
# plan against one process: tests/plan/equiv.sh (muon=1).
# Under SAN=1 (make check compared the goldens) 3 steps of Muon beside AdamW
# groups, a checkpoint and its resume, and 2 steps with bf16 states: the new
# code under the sanitizers.
. tests/lib.sh
. tests/train/tt030.inc
GD=tests/train/golden
if [ "${SAN:-0}" = 1 ]; then
	t_skip "param groups and Muon against 0.3.0" "make check runs them"
	t_run "muon: 3 steps, a checkpoint at step 2" run030 --optimizer.param_groups \
		tests/train/muon_groups.toml --training.steps 3 --dump_folder "$TMP/san" \
		--checkpoint.enable --checkpoint.interval 2
	mkdir -p "$TMP/san2/checkpoint" && cp -r "$TMP/san/checkpoint/step-2" "$TMP/san2/checkpoint/"
	t_run "muon: resumed at step 2" run030 --optimizer.param_groups \
		tests/train/muon_groups.toml --training.steps 3 --dump_folder "$TMP/san2" \
		--checkpoint.enable --checkpoint.interval 2
	t_run "bf16 states: 2 steps and a checkpoint" run030 --optimizer.implementation \
		fused_opt_states_bf16 --training.steps 2 --dump_folder "$TMP/sanb" --checkpoint.enable
	t_done
fi

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

# qwen3_debugmodel_moe_param_groups' groups (tests/train/moe_param_groups.toml:
# the preset's, which titan holds as that file says) over deepseek_v3_debugmodel
# (33M parameters against the preset's model's 316M: the golden takes the
# preset's own optimizer object), from titan's seed checkpoint, which the
# golden loaded into 0.3.0's model
pgs() { sed -n '/"param_groups": \[/,/^    \]/p'; }
"$TRAIN" --module qwen3 --config qwen3_debugmodel_moe_param_groups --debug.print_config 2>&1 |
	pgs >"$TMP/pg.preset"
"$TRAIN" --module deepseek_v3 --config deepseek_v3_debugmodel --optimizer.param_groups \
	tests/train/moe_param_groups.toml --debug.print_config 2>&1 | pgs >"$TMP/pg.file"
if [ -s "$TMP/pg.preset" ] && grep -q router "$TMP/pg.preset"; then
	t_same "param_groups: qwen3_debugmodel_moe_param_groups' groups are the test's file" \
		"$TMP/pg.preset" "$TMP/pg.file"
else
	t_not_ok "param_groups: qwen3_debugmodel_moe_param_groups' groups are the test's file" \
		"no param_groups in its --debug.print_config"
fi
pg() { run030_preset deepseek_v3 deepseek_v3_debugmodel "$@"; }
t_run "param_groups: the seed checkpoint" pg --dump_folder "$TMP/pg.seed" --checkpoint.enable \
	--checkpoint.create_seed_checkpoint
t_run "param_groups: 10 steps of deepseek_v3_debugmodel under the preset's groups" pg \
	--optimizer.param_groups tests/train/moe_param_groups.toml --training.steps 10 \
	--dump_folder "$TMP/pg" --checkpoint.enable --checkpoint.initial_load_path "$TMP/pg.seed/checkpoint/step-0"
steps_of "$TMP/pg/metrics.jsonl" >"$TMP/pg.tsv"
t_steps "param_groups: the loss and lr equal 0.3.0's at every step" $GD/tt030_moe_param_groups.tsv \
	"$TMP/pg.tsv" 1 10 loss
# the norms within 1e-5; the routers' gates (Adam at lr 1e-4) and the MoE
# layers' ffn_norm within 1e-3: a router's near-tie that flips moves their
# gradients, and Adam's step on an element of a small gradient is up to lr
# whatever its size (measured 1.4e-4 and 1.9e-4)
params_equal "param_groups: the parameters of step 10 equal 0.3.0's" \
	$GD/tt030_moe_param_groups.params.pt "$TMP/pg/checkpoint/step-10" 1e-5 \
	'ffn_norm\|router\.gate' 1e-3

# DistMuon for the layers' matrices, AdamW for the rest, llama3_debugmodel
mu() { run030 --optimizer.param_groups tests/train/muon_groups.toml --training.steps 10 "$@"; }
t_run "muon: 10 steps of llama3_debugmodel with DistMuon" mu --dump_folder "$TMP/mu" \
	--checkpoint.enable --checkpoint.interval 5
cp "$TMP/.err" "$TMP/mu.log"
steps_of "$TMP/mu/metrics.jsonl" >"$TMP/mu.tsv"
# Muon's matrices keep a momentum_buffer and no exp_avg_sq: of the 6,163,712
# parameters the layers' 6 x (4 x 256 x 256 + 3 x 768 x 256) = 5,111,808 are
# Muon's, so the states hold (6,163,712 + 1,051,904) x 4 bytes = 0.0269 GiB
# (AdamW's two states: 0.0459)
t_grep "muon: the optimizer's states are a momentum buffer for Muon's matrices" \
	"Memory per rank: .* optimizer 0.0269 GiB" "$TMP/mu.log"
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

# optimizer.implementation = "fused_opt_states_bf16": exp_avg and exp_avg_sq
# in bfloat16 beside float32 parameters, against 0.3.0's run with its
# pre-hook (the golden's update a transcription of torch's CUDA
# FusedAdamMathFunctorMP, which the CPU op equals bit for bit on the same
# inputs).  The loss within 1e-4 (measured 2.5e-7), the grad norm within
# 3e-4 (measured 7.2e-5) and the parameters within 5e-5 (measured 1.7e-5): a
# gradient's float32 order can move a state across a bf16 rounding boundary,
# 2^-8 of it, which float32 states would not show
bs() { run030 --optimizer.implementation fused_opt_states_bf16 --training.steps 10 "$@"; }
t_run "bf16 states: 10 steps of llama3_debugmodel" bs --dump_folder "$TMP/bs" --checkpoint.enable \
	--checkpoint.interval 5
cp "$TMP/.err" "$TMP/bs.log"
steps_of "$TMP/bs/metrics.jsonl" >"$TMP/bs.tsv"
if why=$(compare $GD/tt030_llama3_bf16_states.tsv "$TMP/bs.tsv" 1 10 "" 1e-4 3e-4); then
	t_ok "bf16 states: the loss, grad norm and lr equal 0.3.0's at every step"
else
	t_not_ok "bf16 states: the loss, grad norm and lr equal 0.3.0's at every step" "$why"
fi
params_equal "bf16 states: the parameters of step 10 equal 0.3.0's" \
	$GD/tt030_llama3_bf16_states.params.pt "$TMP/bs/checkpoint/step-10" 5e-5
# saved as 0.3.0 saves them: exp_avg and exp_avg_sq bfloat16, step float32
"$BIN/titan-ckpt-convert" info "$TMP/bs/checkpoint/step-10" 2>&1 |
	awk '$1 ~ /^optimizer\.state\./ { print $1 "\t" $3 }' | sort >"$TMP/bs.states"
t_same "bf16 states: the checkpoint's states and their dtypes are 0.3.0's" \
	$GD/tt030_llama3_bf16_states.states "$TMP/bs.states"
# two bytes a state: half of AdamW's float32 0.0459 GiB
t_grep "bf16 states: the optimizer's memory is halved" "Memory per rank: .* optimizer 0.0230 GiB" \
	"$TMP/bs.log"
mkdir -p "$TMP/bs5/checkpoint"
cp -r "$TMP/bs/checkpoint/step-5" "$TMP/bs5/checkpoint/"
t_run "bf16 states: resumed from step 5 to step 10" bs --dump_folder "$TMP/bs5" --checkpoint.enable \
	--checkpoint.interval 5
steps_of "$TMP/bs5/metrics.jsonl" >"$TMP/bs5.tsv"
t_steps "bf16 states: the resumed steps equal the whole run's" "$TMP/bs.tsv" "$TMP/bs5.tsv" 6 10

# expert parallelism: an expert's box is summed over ep too, which the
# gather does not do: refused, naming the tensor
printf '%s\n' '[[optimizer.param_groups]]' 'pattern = "experts"' 'optimizer_name = "DistMuon"' \
	'[[optimizer.param_groups]]' 'pattern = ".*"' 'optimizer_name = "AdamW"' >"$TMP/ep.toml"
t_fails "muon: refused under expert parallelism" 1 env OMP_NUM_THREADS=1 $MPIRUN -np 2 \
	"$TRAIN" --module deepseek_v3 --config deepseek_v3_debugmodel --training.local_batch_size 1 \
	--training.seq_len 64 --dataloader.dataset_path "$TMP/data" --training.steps 1 \
	--parallelism.expert_parallel_degree 2 --optimizer.param_groups "$TMP/ep.toml" \
	--dump_folder "$TMP/ep"
t_grep "muon: the refusal names the experts and expert parallelism" \
	"experts.*DistMuon under expert parallelism is not built" "$TMP/.err"
t_done
