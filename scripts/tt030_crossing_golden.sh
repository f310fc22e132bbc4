#!/bin/sh
# Goldens of tests/ckpt/crossing.sh's torchtitan 0.3.0 part, written to
# tests/ckpt/golden/tt030/ (run from the repository root after make):
#   <family>.keys.tsv  what 0.3.0's CheckpointManager writes for
#       <family>_debugmodel (scripts/tt030_crossing.py manifest): the keys of
#       layers 0 and 1 and those outside the layers, kind, dtype and shape;
#   <preset>.keys.tsv  the same for qwen3_debugmodel_non_fused_qkv (q, k, v
#       apart) and gpt_oss_debugmodel (fused with biases);
#   fused/  a small checkpoint 0.3.0's CheckpointManager wrote with its q/k/v
#       fused, and 0.3.0's own split of that state (scripts/tt030_crossing.py
#       fused);
#   loader/  0.3.0's data loader over the same documents after 3 and 10
#       batches: the pickle it saves as dataloader.dp_rank_0, and its next 2
#       batches (scripts/tt030_crossing.py loader-golden);
#   crossing.tsv  per family, 0.3.0's losses at steps 4..6 after it loaded
#       titan-train's step-3 checkpoint of the run crossing.sh makes (seed 7,
#       local_batch_size 2, seq_len 64, float32, training.steps 6);
#   llama3_muon, llama3_bf16_states, deepseek_v3_groups: the same (keys and
#       losses) with the optimizers of tests/train/tt030_optim.sh (DistMuon
#       beside AdamW, fused_opt_states_bf16, the MoE preset's param groups).
# Needs $PYTHON with torch, numpy and datasets, and torchtitan 0.3.0's source
# in $TT030 (put on PYTHONPATH):
#   TT030=<torchtitan 0.3.0> PYTHON=<venv>/bin/python sh scripts/tt030_crossing_golden.sh
set -eu
PY=${PYTHON:-python3}
: "${TT030:?TT030 names torchtitan 0.3.0's source folder}"
OUT=tests/ckpt/golden/tt030
TMP=$(mktemp -d "${TMPDIR:-/tmp}/tt030-golden.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$OUT"
export OMP_NUM_THREADS=2 NO_COLOR=1 PYTHONDONTWRITEBYTECODE=1

build/tests/shard/test_gen gen 11 400 2048 60 >"$TMP/d.tts"
bin/titan-shard -q --out "$TMP/data" --val-fraction 0 "$TMP/d.tts"
{
	echo "# torchtitan 0.3.0's losses after loading titan-train's step-3 checkpoint"
	echo "# (scripts/tt030_crossing_golden.sh): family, step, loss"
} >"$TMP/crossing.tsv"
for fam in llama3 qwen3 deepseek_v3; do
	PYTHONPATH=$TT030 "$PY" scripts/tt030_crossing.py manifest "${fam}_debugmodel" \
		"$OUT/$fam.keys.tsv"
	bin/titan-train --module $fam --config ${fam}_debugmodel --training.local_batch_size 2 \
		--training.seq_len 64 --training.mixed_precision_param float32 --debug.seed 7 \
		--dataloader.dataset_path "$TMP/data" --dump_folder "$TMP/$fam" --training.steps 6 \
		--checkpoint.enable --checkpoint.interval 3 --checkpoint.last_save_model_only false \
		>"$TMP/$fam.log" 2>&1
	PYTHONPATH=$TT030 "$PY" scripts/tt030_crossing.py titan-to-tt030 "${fam}_debugmodel" \
		"$TMP/$fam" "$TMP/d.tts" 3 6 2>"$TMP/$fam.err" |
		sed -n "s/^loss \([0-9]*\) \(.*\)/$fam\t\1\t\2/p" >>"$TMP/crossing.tsv"
done
# the optimizers of tests/train/tt030_optim.sh: NAME FAMILY OPT TITAN-ARGS
while read -r name fam opt args; do
	# shellcheck disable=SC2086
	PYTHONPATH=$TT030 "$PY" scripts/tt030_crossing.py --opt $opt manifest "${fam}_debugmodel" \
		"$OUT/$name.keys.tsv"
	# shellcheck disable=SC2086
	bin/titan-train --module $fam --config ${fam}_debugmodel --training.local_batch_size 2 \
		--training.seq_len 64 --training.mixed_precision_param float32 --debug.seed 7 \
		--dataloader.dataset_path "$TMP/data" --dump_folder "$TMP/$name" --training.steps 6 \
		--checkpoint.enable --checkpoint.interval 3 --checkpoint.last_save_model_only false \
		$args >"$TMP/$name.log" 2>&1
	PYTHONPATH=$TT030 "$PY" scripts/tt030_crossing.py --opt $opt titan-to-tt030 "${fam}_debugmodel" \
		"$TMP/$name" "$TMP/d.tts" 3 6 2>"$TMP/$name.err" |
		sed -n "s/^loss \([0-9]*\) \(.*\)/$name\t\1\t\2/p" >>"$TMP/crossing.tsv"
done <<EOF
llama3_muon llama3 muon=tests/train/muon_groups.toml --optimizer.param_groups tests/train/muon_groups.toml
llama3_bf16_states llama3 bf16_states --optimizer.implementation fused_opt_states_bf16
deepseek_v3_groups deepseek_v3 groups_of=qwen3_debugmodel_moe_param_groups --optimizer.param_groups tests/train/moe_param_groups.toml
EOF
for preset in qwen3_debugmodel_non_fused_qkv gpt_oss_debugmodel; do
	PYTHONPATH=$TT030 "$PY" scripts/tt030_crossing.py manifest $preset "$OUT/$preset.keys.tsv"
done
cp "$TMP/crossing.tsv" "$OUT/crossing.tsv"
rm -rf "$OUT/loader"
PYTHONPATH=$TT030 "$PY" scripts/tt030_crossing.py loader-golden "$OUT/loader" "$TMP/d.tts" \
	2>"$TMP/loader.err"
rm -rf "$OUT/fused"
PYTHONPATH=$TT030 "$PY" scripts/tt030_crossing.py fused "$OUT/fused" 2>"$TMP/fused.err"
echo "wrote $OUT"
