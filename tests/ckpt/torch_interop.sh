#!/bin/sh
# PyTorch loads what titan writes.  Needs $PYTHON with torch and safetensors
# (skipped otherwise, as in CI); $PYTHON_OLD (torch 2.3) adds the old-release check.
. tests/lib.sh
C="$BIN/titan-ckpt-convert"
G=tests/ckpt/golden
PY="${PYTHON:-python3}"
CHK=scripts/ckpt_torch_check.py

if ! "$PY" -c 'import torch, safetensors' >/dev/null 2>&1; then
	t_skip "PyTorch loads titan's DCP folders" "no torch in \$PYTHON ($PY)"
	t_done
fi

"$C" single-to-dcp "$G/single.pt" "$TMP/one" >/dev/null 2>&1
"$C" reshard "$TMP/one" "$TMP/two" --chunks 2 >/dev/null 2>&1
"$C" reshard "$TMP/one" "$TMP/three" --chunks 3 --dim 1 >/dev/null 2>&1
t_run "torch dcp.load reads titan's 1-rank DCP: tensors and values exact" \
	"$PY" "$CHK" load "$TMP/one" "$G/reference.safetensors" "$G/reference.json"
t_run "torch dcp.load reads titan's 2-rank DCP exactly" \
	"$PY" "$CHK" load "$TMP/two" "$G/reference.safetensors" "$G/reference.json"
t_run "torch dcp.load reads titan's 3-rank DCP split on dim 1 exactly" \
	"$PY" "$CHK" load "$TMP/three" "$G/reference.safetensors" "$G/reference.json"
t_run "two torch processes (gloo) load titan's 2-rank DCP resharded on the last dim" \
	"$PY" "$CHK" load2 "$TMP/two" "$G/reference.safetensors"
t_run "format_utils.dcp_to_torch_save converts titan's DCP" "$PY" "$CHK" to_pt "$TMP/two" "$TMP/fu.pt"
t_run "its output loads with torch.load(weights_only=True), exact" \
	"$PY" "$CHK" pt "$TMP/fu.pt" "$G/reference.safetensors"
"$C" dcp-to-single "$TMP/two" "$TMP/titan.pt" >/dev/null 2>&1
t_run "titan's dcp-to-single .pt loads with torch.load(weights_only=True), exact" \
	"$PY" "$CHK" pt "$TMP/titan.pt" "$G/reference.safetensors"
"$C" dcp-to-single "$TMP/two" "$TMP/m.pt" --model-only >/dev/null 2>&1
t_run "model-only .pt loads in torch" "$PY" "$CHK" pt "$TMP/m.pt" "$G/reference.safetensors"

if [ -n "${PYTHON_OLD:-}" ] && "$PYTHON_OLD" -c 'import torch' >/dev/null 2>&1; then
	# torch 2.3 flattens non-tensor dicts differently (one key per dict), so
	# it can read the tensors of a newer layout only: give it model weights.
	"$C" reshard "$TMP/one" "$TMP/m2" --chunks 2 --model-only >/dev/null 2>&1
	t_run "torch 2.3 dcp.load reads titan's 2-rank model-only DCP exactly" \
		"$PYTHON_OLD" "$CHK" load "$TMP/m2" "$G/reference.safetensors"
else
	t_skip "torch 2.3 reads titan's DCP" "no \$PYTHON_OLD"
fi
t_done
