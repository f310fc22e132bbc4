#!/bin/sh
# Flux checkpoints: titan-ckpt-convert's Flux paths, and checkpoints crossing
# with torchtitan 0.3.0.
#
# Always (the small model of scripts/flux_ckpt_golden.py, its weights and
# AdamW state drawn by test_flux_ckpt save): titan-ckpt-convert to-hf --model
# flux writes diffusers' folder (sharded, with config.json) and BFL's single
# file, from-hf reads either back bit for bit with the sizes taken from the
# files (and with --flavor, a flavor that does not fit is refused naming the
# tensor); info lists 0.3.0's keys.
# Live, with torchtitan 0.3.0's source in $TT030 and $PYTHON (torch):
# torch.distributed.checkpoint loads titan's full checkpoint into 0.3.0's
# FluxModel, AdamW (0.3.0's flat optimizer state dict), lr scheduler,
# train_state and data loader with every value titan drew; and titan loads
# the one torch.distributed.checkpoint saves from 0.3.0's objects as 0.3.0's
# CheckpointManager lays it out, with every value 0.3.0 drew.  Skipped
# otherwise (as in CI):
#   PYTHON=/path/to/venv/bin/python TT030=<torchtitan 0.3.0> make check TITAN_TEST_FILTER=flux/ckpt
. tests/lib.sh

T="$BUILD/tests/flux/test_flux_ckpt"
C="$BIN/titan-ckpt-convert"
PY="${PYTHON:-python3}"

t_run "titan's full checkpoint of the small Flux model" "$T" save "$TMP/full"
"$C" info "$TMP/full" >"$TMP/info" 2>&1
t_grep "info: an AdamW state under 0.3.0's key" \
	'^optimizer.state.single_blocks.1.linear1.weight.exp_avg  *tensor  *float32  *(358, 64)' "$TMP/info"
t_grep "info: the lr scheduler as 0.3.0's container saves it" '^lr_scheduler.last_epoch  *bytes' \
	"$TMP/info"
t_run "to-hf --model flux: diffusers' folder, shards of 100k" "$C" to-hf "$TMP/full" "$TMP/diff" \
	--model flux --max-shard-size 100000
t_run "  with diffusers' index and config.json" test -s "$TMP/diff/diffusion_pytorch_model.safetensors.index.json" \
	-a -s "$TMP/diff/config.json"
t_grep "  config.json names the class" '"_class_name": "FluxTransformer2DModel"' "$TMP/diff/config.json"
t_run "from-hf reads it back, the sizes from its tensors" "$C" from-hf "$TMP/diff" "$TMP/back" --model flux
"$C" diff "$TMP/full" "$TMP/back" >"$TMP/d1" 2>&1
n=$(grep -c ' ok  *max_abs 0 max_rel 0$' "$TMP/d1")
[ "$n" -eq 80 ] && t_ok "the 80 weights bit for bit" || t_not_ok "the 80 weights bit for bit" "$n: $(grep -v ' ok ' "$TMP/d1" | grep -v only-in-A | head -3)"
t_run "to-hf to a .safetensors file: BFL's layout" "$C" to-hf "$TMP/full" "$TMP/flux1.safetensors" \
	--model flux
"$C" info "$TMP/flux1.safetensors" >"$TMP/bfl.info" 2>&1
t_grep "  the QK norms' weights named .scale" '^double_blocks.0.img_attn.norm.query_norm.scale ' \
	"$TMP/bfl.info"
t_run "from-hf reads BFL's file back" "$C" from-hf "$TMP/flux1.safetensors" "$TMP/bback" --model flux
"$C" diff "$TMP/back" "$TMP/bback" >"$TMP/d2" 2>&1
t_run "  bit for bit" test "$(grep -c ' ok  *max_abs 0 max_rel 0$' "$TMP/d2")" -eq 80
t_fails "from-hf with a flavor that does not fit: refused" 1 "$C" from-hf "$TMP/diff" "$TMP/x" \
	--model flux --flavor flux-debug
t_grep "  naming the tensor" "x_embedder.weight has shape (64, 16), the model (1536, 64)" "$TMP/.err"
t_fails "--format is flux's alone" 2 "$C" to-hf "$TMP/full" "$TMP/y" --format bfl --flavor debugmodel

live=0
if [ -n "${TT030:-}" ] && PYTHONPATH=$TT030 "$PY" -c 'import torch, numpy
from torchtitan.models.flux.model.state_dict_adapter import FluxStateDictAdapter' >/dev/null 2>&1; then
	live=1
fi
if [ $live = 0 ]; then
	t_skip "0.3.0 loads titan's Flux checkpoint and titan 0.3.0's, live" \
		"no torchtitan 0.3.0 (set TT030=<its source> and PYTHON=<venv>/bin/python)"
	t_done
fi
py() { PYTHONPATH=$TT030 PYTHONDONTWRITEBYTECODE=1 "$PY" -W ignore scripts/flux_ckpt_golden.py "$@"; }
t_run "0.3.0's FluxModel, AdamW, lr scheduler, train_state and loader load titan's checkpoint" \
	py load-titan "$TMP/full"
sed 's/^/# /' "$TMP/.out"
t_run "0.3.0's objects saved as its CheckpointManager lays them out" py write "$TMP/tt"
t_run "titan loads them, every value 0.3.0's" "$T" check "$TMP/tt"
sed 's/^/# /' "$TMP/.out"
t_done
