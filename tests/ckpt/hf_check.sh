#!/bin/sh
# HF folders that are not the model: an integer or boolean weight, a missing
# weight, a transposed or flattened one, a 2-D norm, another vocabulary.
# titan-ckpt-convert from-hf --flavor debugmodel refuses each with the message
# titan-train's checkpoint.initial_load_in_hf gives (one check, dcp_hf_read's);
# on main from-hf wrote a DCP of them and both cast integers silently.  The
# folders come from tests/ckpt/test_hf_check make.
. tests/lib.sh

TRAIN="$BIN/titan-train"
C="$BIN/titan-ckpt-convert"
MAKE_HF="$BUILD/tests/ckpt/test_hf_check"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive NO_COLOR=1

if ! "$MAKE_HF" make "$TMP/hf" 2>"$TMP/make.err"; then
	t_not_ok "HF folders written" "$(cat "$TMP/make.err")"
	t_done
fi
t_random_shards "$TMP/data" 9 100 256 60 0.1
t_tiny_job "$TMP/c.toml" "$TMP/data" 1
cat >>"$TMP/c.toml" <<EOF
[checkpoint]
enable = true
initial_load_in_hf = true
[activation_checkpoint]
mode = "none"
EOF

t_run "from-hf converts the whole model" "$C" from-hf "$TMP/hf/good" "$TMP/good.dcp" --flavor debugmodel
t_run "titan-train starts from it" "$TRAIN" --config "$TMP/c.toml" --job.dump_folder "$TMP/run-good" \
	--checkpoint.initial_load_path "$TMP/hf/good"

# refused V MESSAGE: both programs refuse folder V, saying MESSAGE (after the
# folder's name) in the same words
refused() {
	v=$1 msg="$TMP/hf/$v: $2"
	"$C" from-hf "$TMP/hf/$v" "$TMP/$v.dcp" --flavor debugmodel >/dev/null 2>"$TMP/conv.err"
	rc=$?
	if [ "$rc" -eq 1 ] && grep -qF "$msg" "$TMP/conv.err" && [ ! -e "$TMP/$v.dcp" ]; then
		t_ok "from-hf refuses $v: $2"
	else
		t_not_ok "from-hf refuses $v: $2" "exit $rc: $(tail -2 "$TMP/conv.err")"
	fi
	"$TRAIN" --config "$TMP/c.toml" --job.dump_folder "$TMP/run-$v" \
		--checkpoint.initial_load_path "$TMP/hf/$v" >/dev/null 2>"$TMP/train.err"
	rc=$?
	if [ "$rc" -eq 1 ] && grep -qF "$msg" "$TMP/train.err"; then
		t_ok "titan-train refuses $v in the same words"
	else
		t_not_ok "titan-train refuses $v in the same words" "exit $rc: $(tail -2 "$TMP/train.err")"
	fi
}

for t in i64:I64 i32:I32 u8:U8 bool:BOOL; do
	refused "${t%%:*}" "model.layers.0.mlp.up_proj.weight is stored as ${t#*:}, not as a floating-point type"
done
refused nonorm "no weight for norm.weight"
refused transposed "layers.0.feed_forward.w3.weight has shape (256, 768), the model (768, 256)"
refused flat "layers.0.feed_forward.w3.weight has shape (196608), the model (768, 256)"
refused norm2d "norm.weight has shape (16, 16), the model (256)"
refused vocab "output.weight has shape (1024, 256), the model (2048, 256)"

t_done
