#!/bin/sh
# titan-train following torchtitan 0.3.0's MoE and other presets step for step:
# qwen3_debugmodel, deepseek_v3_debugmodel, gpt_oss_debugmodel_flex and
# deepseek_v3_debugmodel_mtp against 0.3.0's golden runs
# (tests/train/golden/tt030_*.tsv, scripts/tt030_golden.py), from titan's
# seed checkpoints; the MTP depth's checkpoint, resume, FSDP x EP and TP runs
# and its HF export and import.
# Under SAN=1 (make check ran the goldens; the sanitizers look at memory) the
# MTP part alone, its runs 3 steps, compared through step 2 (the warmup's,
# whose lr does not depend on the run's length), the checkpoint at step 2,
# up to the HF round trip.
. tests/lib.sh
. tests/train/tt030.inc
N=15 W=15 CK=10 FAMS="qwen3 deepseek_v3 gpt_oss"
[ "${SAN:-0}" = 1 ] && N=3 W=2 CK=2 FAMS=
[ -z "$FAMS" ] && t_skip "qwen3, deepseek_v3 and gpt_oss against 0.3.0" "make check runs them"

# qwen3_debugmodel and deepseek_v3_debugmodel (MLA with YaRN at every length,
# as 0.3.0 builds it; a mixture of experts) against 0.3.0 from titan's seed
# checkpoint of seed 7 under 0.3.0's names, which scripts/tt030_golden.py
# loaded into 0.3.0's models (deepseek_v3's: routed_experts, expert_bias_E).
for fam in $FAMS; do
	[ $fam = gpt_oss ] && continue
	mod() {
		"$TRAIN" --module $fam --config ${fam}_debugmodel --training.local_batch_size 2 \
			--training.seq_len 64 --training.mixed_precision_param float32 --debug.seed 7 \
			--dataloader.dataset_path "$TMP/data" "$@"
	}
	if [ $fam = deepseek_v3 ]; then
		t_run "$fam: titan's seed checkpoint" mod --dump_folder "$TMP/$fam.seed" \
			--checkpoint.enable --checkpoint.create_seed_checkpoint
		from="--checkpoint.enable --checkpoint.load_only --checkpoint.initial_load_path $TMP/$fam.seed/checkpoint/step-0"
	else
		from=
	fi
	# shellcheck disable=SC2086
	t_run "$fam: $N steps of ${fam}_debugmodel as 0.3.0" mod --training.steps $N \
		--dump_folder "$TMP/$fam" $from
	steps_of "$TMP/$fam/metrics.jsonl" >"$TMP/$fam.tsv"
	if why=$(compare tests/train/golden/tt030_$fam.tsv "$TMP/$fam.tsv" 1 $W loss); then
		t_ok "$fam: the loss and lr equal 0.3.0's at every step"
	else
		t_not_ok "$fam: the loss and lr equal 0.3.0's at every step" "$why"
	fi
done

# gpt_oss_debugmodel_flex (0.3.0's debugmodel, titan's debugmodel_030: sinks,
# sliding windows, YaRN, biased experts with the clamped SwiGLU) against
# 0.3.0 from titan's seed checkpoint, its experts' GEMMs in bfloat16 as 0.3.0
# runs them (GroupedExperts casts to bfloat16 for torch._grouped_mm whatever
# the run's dtype; titan's stay float32) and its expert-bias hook registered:
# the step-1 loss within 1e-5, the later ones within 2e-4 (measured 2.2e-6 and
# 1.3e-4 at AVX-512 and AVX2 alike; the experts' bfloat16 is the drift).
case " $FAMS " in *" gpt_oss "*)
	mod() {
		"$TRAIN" --module gpt_oss --config gpt_oss_debugmodel_flex --training.local_batch_size 2 \
			--training.seq_len 64 --training.mixed_precision_param float32 --debug.seed 7 \
			--dataloader.dataset_path "$TMP/data" "$@"
	}
	t_run "gpt_oss: titan's seed checkpoint" mod --dump_folder "$TMP/gpt_oss.seed" --checkpoint.enable \
		--checkpoint.create_seed_checkpoint
	t_run "gpt_oss: $N steps of gpt_oss_debugmodel_flex as 0.3.0" mod --training.steps $N \
		--dump_folder "$TMP/gpt_oss" --checkpoint.enable --checkpoint.load_only \
		--checkpoint.initial_load_path "$TMP/gpt_oss.seed/checkpoint/step-0"
	steps_of "$TMP/gpt_oss/metrics.jsonl" >"$TMP/gpt_oss.tsv"
	if why=$(compare tests/train/golden/tt030_gpt_oss.tsv "$TMP/gpt_oss.tsv" 1 1 loss 1e-5) &&
		why=$(compare tests/train/golden/tt030_gpt_oss.tsv "$TMP/gpt_oss.tsv" 1 $W loss 2e-4); then
		t_ok "gpt_oss: the loss and lr equal 0.3.0's (step 1 within 1e-5, then 2e-4)"
	else
		t_not_ok "gpt_oss: the loss and lr equal 0.3.0's (step 1 within 1e-5, then 2e-4)" "$why"
	fi
	;;
esac

# deepseek_v3_debugmodel_mtp: one multi-token prediction depth and MTPLoss
# (mtp_scale 0.3) against 0.3.0's MTPDecoder from titan's seed checkpoint
# (scripts/tt030_golden.py loaded it: mtp_layers.0.* are 0.3.0's names); the
# checkpoint of step 10 holds the depth and its optimizer state under those
# names and resumes exactly; what 0.3.0 refuses with MTP is refused.
mtp() {
	"$TRAIN" --module deepseek_v3 --config deepseek_v3_debugmodel_mtp \
		--training.local_batch_size 2 --training.seq_len 64 \
		--training.mixed_precision_param float32 --debug.seed 7 \
		--dataloader.dataset_path "$TMP/data" "$@"
}
t_run "mtp: titan's seed checkpoint" mtp --dump_folder "$TMP/mtp.seed" --checkpoint.enable \
	--checkpoint.create_seed_checkpoint
t_run "mtp: $N steps of deepseek_v3_debugmodel_mtp as 0.3.0" mtp --training.steps $N \
	--dump_folder "$TMP/mtp" --checkpoint.initial_load_path "$TMP/mtp.seed/checkpoint/step-0" \
	--checkpoint.enable --checkpoint.interval $CK
t_grep "mtp: the log names the depth" 'Multi-token prediction: 1 depth' "$TMP/.err"
steps_of "$TMP/mtp/metrics.jsonl" >"$TMP/mtp.tsv"
t_steps "mtp: the loss (main + 0.3 x MTP) and lr equal 0.3.0's at every step" \
	tests/train/golden/tt030_deepseek_v3_mtp.tsv "$TMP/mtp.tsv" 1 $W loss
"$BIN/titan-ckpt-convert" info "$TMP/mtp/checkpoint/step-$CK" >"$TMP/mtp.info" 2>&1
t_grep "mtp: eh_proj by 0.3.0's name" '^mtp_layers.0.eh_proj.weight .*(256, 512)' "$TMP/mtp.info"
t_grep "mtp: its experts as 0.3.0 spells them" \
	'^mtp_layers.0.moe.routed_experts.inner_experts.w1_EFD ' "$TMP/mtp.info"
t_grep "mtp: its expert bias" '^mtp_layers.0.moe.expert_bias_E ' "$TMP/mtp.info"
t_grep "mtp: its optimizer state" '^optimizer.state.mtp_layers.0.mtp_norm.weight.exp_avg ' \
	"$TMP/mtp.info"
t_run "mtp: resume from step $CK" mtp --training.steps $N --dump_folder "$TMP/mtp" \
	--checkpoint.enable --checkpoint.interval $CK --checkpoint.load_step $CK
steps_of "$TMP/mtp/metrics.jsonl" | awk -v n=$N 'NR > n' >"$TMP/mtp.b.tsv"
steps_of "$TMP/mtp/metrics.jsonl" | awk -v n=$N -v k=$CK 'NR > k && NR <= n' >"$TMP/mtp.a11.tsv"
t_same "mtp: the resumed steps $((CK + 1))..$N equal the run's" "$TMP/mtp.a11.tsv" "$TMP/mtp.b.tsv"
# FSDP 2 x EP 2 on two ranks (one row each): the same steps, a checkpoint of
# the depth's shards that resumes
t_run "mtp: FSDP 2 x EP 2" env OMP_NUM_THREADS=1 $MPIRUN -np 2 "$TRAIN" --module deepseek_v3 \
	--config deepseek_v3_debugmodel_mtp --training.local_batch_size 1 --training.seq_len 64 \
	--training.mixed_precision_param float32 --debug.seed 7 --dataloader.dataset_path "$TMP/data" \
	--training.steps 3 --dump_folder "$TMP/mtp.ep" --checkpoint.enable --checkpoint.interval 2 \
	--checkpoint.initial_load_path "$TMP/mtp.seed/checkpoint/step-0" \
	--parallelism.data_parallel_shard_degree 2 --parallelism.expert_parallel_degree 2
steps_of "$TMP/mtp.ep/metrics.jsonl" >"$TMP/mtp.ep.tsv"
t_steps "mtp: FSDP 2 x EP 2's steps are 0.3.0's" tests/train/golden/tt030_deepseek_v3_mtp.tsv \
	"$TMP/mtp.ep.tsv" 1 3 loss
"$BIN/titan-ckpt-convert" info "$TMP/mtp.ep/checkpoint/step-2" >"$TMP/mtp.ep.info" 2>&1
t_grep "mtp: the depth's experts saved in the ranks' shards" \
	'^mtp_layers.0.moe.routed_experts.inner_experts.w1_EFD .* 2 chunks' "$TMP/mtp.ep.info"
t_run "mtp: one process resumes the two ranks' step 2" mtp --training.steps 3 \
	--dump_folder "$TMP/mtp.ep" --checkpoint.enable --checkpoint.interval 2 --checkpoint.load_step 2
steps_of "$TMP/mtp.ep/metrics.jsonl" | awk 'NR == 4' >"$TMP/mtp.ep3.tsv"
steps_of "$TMP/mtp.ep/metrics.jsonl" | awk 'NR == 3' >"$TMP/mtp.ep3a.tsv"
if why=$(awk -F'\t' 'NR == FNR { l = $2; next } { d = ($2 - l) / l; if (d < 0) d = -d
	if (d > 1e-5) { print "step 3 loss " $2 " vs " l; exit 1 } }' "$TMP/mtp.ep3a.tsv" "$TMP/mtp.ep3.tsv"); then
	t_ok "mtp: and its step 3 is the two ranks' (1e-5)"
else
	t_not_ok "mtp: and its step 3 is the two ranks' (1e-5)" "$why"
fi
# HF both ways with the depth: 0.3.0's DeepSeekV3StateDictAdapter numbers it
# as the layer after the last (model.layers.6.*: enorm, hnorm, eh_proj,
# shared_head.norm and the block's own keys); to-hf's names and shapes are
# its to_hf's (tests/ckpt/golden/tt030_mtp_hf/to_hf.tsv, scripts/
# mtp_hf_golden.py), from-hf gives back every tensor bit for bit, and
# initial_load_in_hf of the export trains as the DCP checkpoint does
C="$BIN/titan-ckpt-convert"
MO="--model deepseek_v3 --flavor debugmodel"
t_run "mtp: to-hf with the depth" "$C" to-hf "$TMP/mtp/checkpoint/step-$CK" "$TMP/mtp.hf" $MO
"$C" info "$TMP/mtp.hf" 2>/dev/null | sed -n 's/^\(model[^ ]*\|lm_head[^ ]*\)  *tensor  *[a-z0-9]*  *(\([0-9, ]*\)).*/\1\t\2/p' |
	tr -d ' ' | LC_ALL=C sort >"$TMP/mtp.hf.tsv"
LC_ALL=C sort tests/ckpt/golden/tt030_mtp_hf/to_hf.tsv >"$TMP/mtp.hf.gold"
t_same "mtp: to-hf's tensors are 0.3.0's to_hf's, names and shapes" "$TMP/mtp.hf.gold" "$TMP/mtp.hf.tsv"
t_grep "mtp: config.json counts the depth apart" '"num_nextn_predict_layers": 1' \
	"$TMP/mtp.hf/config.json"
t_run "mtp: from-hf with the depth" "$C" from-hf "$TMP/mtp.hf" "$TMP/mtp.fromhf" $MO \
	--num-mtp-layers 1 --names 0.3.0
weights_back "mtp: to-hf then from-hf gives back every tensor bit for bit" "$TMP/mtp.fromhf" \
	"$TMP/mtp/checkpoint/step-$CK" '^mtp_layers.0.eh_proj.weight  *ok '
"$C" info "$TMP/mtp.fromhf" | grep -c '^mtp_layers\.0\.' >"$TMP/mtp.n"
echo 19 >"$TMP/mtp.n19"
t_same "mtp: the depth's 19 tensors among them" "$TMP/mtp.n19" "$TMP/mtp.n"
t_fails "mtp: from-hf into a flavor without the depth" 1 "$C" from-hf "$TMP/mtp.hf" "$TMP/x" $MO
t_grep "mtp: names the depth and the option" 'mtp_layers.0.* depths after layer 5, .*--num-mtp-layers' \
	"$TMP/.err"
# Under SAN=1 the rest compares numbers (make check does) on code the runs
# above and tests/plan/ep.sh's MTP meshes run under the sanitizers.
if [ "${SAN:-0}" = 1 ]; then
	t_skip "mtp: the HF start, TP 2 and mtp_scale 0" "numbers make check compares"
	t_fails "mtp: validation refused" 2 mtp --validator.enable
	t_done
fi
# two fresh runs from step CK's weights, one from the DCP checkpoint, one from
# its HF export (each saves step 2: the second in HF, last_save_in_hf)
t_run "mtp: 2 steps from step $CK's DCP weights" mtp --training.steps 2 --dump_folder "$TMP/mtp.d" \
	--checkpoint.enable --checkpoint.interval 2 --checkpoint.initial_load_model_only \
	--checkpoint.initial_load_path "$TMP/mtp/checkpoint/step-$CK"
t_run "mtp: 2 steps from its HF export (initial_load_in_hf), saved in HF" mtp --training.steps 2 \
	--dump_folder "$TMP/mtp.h" --checkpoint.enable --checkpoint.interval 2 \
	--checkpoint.initial_load_in_hf --checkpoint.initial_load_path "$TMP/mtp.hf" \
	--checkpoint.last_save_in_hf --checkpoint.last_save_model_only
steps_of "$TMP/mtp.d/metrics.jsonl" >"$TMP/mtp.d.tsv"
steps_of "$TMP/mtp.h/metrics.jsonl" >"$TMP/mtp.h.tsv"
t_same "mtp: the HF start trains as the DCP one (loss, grad norm, lr)" "$TMP/mtp.d.tsv" "$TMP/mtp.h.tsv"
"$C" from-hf "$TMP/mtp.h/checkpoint/step-2" "$TMP/mtp.h2" $MO --num-mtp-layers 1 --names 0.3.0 \
	>/dev/null 2>&1
weights_back "mtp: last_save_in_hf holds step 2's weights and expert biases, the depth's too" \
	"$TMP/mtp.h2" "$TMP/mtp.d/checkpoint/step-2" '^mtp_layers.0.moe.expert_bias  *ok'
# TP 2 (two ranks, the same rows; the depth sequence parallel as 0.3.0's
# sharding.py lays it out): 0.3.0's steps
t_run "mtp: TP 2" env OMP_NUM_THREADS=1 $MPIRUN -np 2 "$TRAIN" --module deepseek_v3 \
	--config deepseek_v3_debugmodel_mtp --training.local_batch_size 2 --training.seq_len 64 \
	--training.mixed_precision_param float32 --debug.seed 7 --dataloader.dataset_path "$TMP/data" \
	--training.steps 3 --dump_folder "$TMP/mtp.tp" --checkpoint.enable --checkpoint.load_only \
	--checkpoint.initial_load_path "$TMP/mtp.seed/checkpoint/step-0" \
	--parallelism.tensor_parallel_degree 2
steps_of "$TMP/mtp.tp/metrics.jsonl" >"$TMP/mtp.tp.tsv"
t_steps "mtp: TP 2's steps are 0.3.0's" tests/train/golden/tt030_deepseek_v3_mtp.tsv \
	"$TMP/mtp.tp.tsv" 1 3 loss
t_fails "mtp: validation refused" 2 mtp --validator.enable
t_grep "mtp: with 0.3.0's reason" 'validator calls MTPLoss without the positions' "$TMP/.err"
t_fails "mtp: loss.num_chunks is not MTPLoss's" 2 mtp --loss.num_chunks 4
# 0.3.0's load-balancing hook walks model.layers: the depth's expert bias stays 0
"$BIN/titan-ckpt-convert" diff "$TMP/mtp.seed/checkpoint/step-0" "$TMP/mtp/checkpoint/step-$CK" \
	>"$TMP/mtp.diff" 2>&1
t_grep "mtp: the layers' expert biases moved" '^layers.5.moe.expert_bias  *differs' "$TMP/mtp.diff"
t_grep "mtp: the depth's did not" '^mtp_layers.0.moe.expert_bias  *ok' "$TMP/mtp.diff"
# loss.mtp_scale 0: the main loss alone, which is deepseek_v3_debugmodel's (the
# seed's main tensors are drawn as that preset's: the depth's come after them)
t_run "mtp: loss.mtp_scale 0" mtp --loss.mtp_scale 0 --training.steps 1 --dump_folder "$TMP/mtp.0" \
	--checkpoint.enable --checkpoint.load_only --checkpoint.initial_load_path "$TMP/mtp.seed/checkpoint/step-0"
# (one step: its lr is not the 15-step schedule's, the loss and grad norm are)
steps_of "$TMP/mtp.0/metrics.jsonl" | awk -F'\t' -v OFS='\t' '{ $4 = 0.0004; print }' \
	>"$TMP/mtp.0.tsv"
t_steps "mtp: with mtp_scale 0 step 1 is deepseek_v3_debugmodel's (loss 1e-5, grad norm 1e-4)" \
	tests/train/golden/tt030_deepseek_v3.tsv "$TMP/mtp.0.tsv" 1 1

t_done
