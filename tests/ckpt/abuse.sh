#!/bin/sh
# titan-ckpt-convert on files an attacker (or a crash) leaves: a "billion
# laughs" .pt, FIFOs in place of files, a weight_map that is not a map of
# names, write errors on standard output, a killed conversion's temporary
# file.  Each was a defect on main (the library side: tests/ckpt/test_abuse.c).
. tests/lib.sh
C="$BIN/titan-ckpt-convert"
G=tests/ckpt/golden
T="timeout 60"
LAUGHS=tests/fuzz/corpus/pt_source

# A 2 KB .pt that shares references as [L, L] 40 deep, and {a: D, b: D}.
for cmd in "info @" "dcp-to-single @ $TMP/o.pt" "dcp-to-single @ $TMP/o.safetensors" \
	"single-to-dcp @ $TMP/o-dcp" "diff @ @"; do
	for f in list dict; do
		set -- $(echo "$cmd" | sed "s|@|$LAUGHS/laughs-$f-40.pt|g")
		$T "$C" "$@" >"$TMP/.out" 2>"$TMP/.err"
		rc=$?
		if [ "$rc" -eq 0 ] || [ "$rc" -eq 1 ]; then
			t_ok "$1 of the $f billion laughs .pt ends (exit $rc)"
		else
			t_not_ok "$1 of the $f billion laughs .pt ends" "exit $rc: $(tail -2 "$TMP/.err")"
		fi
	done
done
t_fails "the dict form is refused at the bound" 1 $T "$C" info "$LAUGHS/laughs-dict-40.pt"
t_grep "with the reason" 'once its shared references are followed' "$TMP/.err"

# FIFOs where a .distcp or an HF shard should be: refused, not waited on.
cp -r "$G/torch_new" "$TMP/fifo"
rm "$TMP/fifo/__0_0.distcp"
mkfifo "$TMP/fifo/__0_0.distcp"
t_fails "verify refuses a FIFO .distcp" 1 $T "$C" verify "$TMP/fifo"
t_grep "naming it" '__0_0.distcp: not a regular file' "$TMP/.err"
t_fails "dcp-to-single refuses a FIFO .distcp" 1 $T "$C" dcp-to-single "$TMP/fifo" "$TMP/f.pt"
mkdir "$TMP/hf"
cp "$G/hf/config.json" "$TMP/hf/"
mkfifo "$TMP/hf/model.safetensors"
t_fails "info refuses a FIFO HF shard" 1 $T "$C" info "$TMP/hf"
t_fails "from-hf refuses a FIFO HF shard" 1 $T "$C" from-hf "$TMP/hf" "$TMP/hf-dcp" --flavor debugmodel

# A weight_map whose value is not a file name is named as such, not "(null)".
mkdir "$TMP/wm"
cp "$G/hf/model.safetensors" "$TMP/wm/"
printf '{"metadata": {}, "weight_map": {"model.norm.weight": 5}}\n' >"$TMP/wm/model.safetensors.index.json"
t_fails "a weight_map entry that is a number is refused" 1 "$C" info "$TMP/wm"
t_grep "as not a file name" "maps 'model.norm.weight' to integer, not to a file name" "$TMP/.err"
if grep -q '(null)' "$TMP/.err"; then t_not_ok "no (null) in the message" "$(cat "$TMP/.err")"; else t_ok "no (null) in the message"; fi

# Results on standard output that cannot be written are failures.
t_fails "info > /dev/full fails" 1 sh -c "'$C' info '$G/torch_new' >/dev/full"
t_grep "saying why" 'standard output: No space left on device' "$TMP/.err"
t_fails "info --json > /dev/full fails" 1 sh -c "'$C' info --json '$G/torch_new' >/dev/full"
t_fails "diff > /dev/full fails" 1 sh -c "'$C' diff '$G/torch_new' '$G/torch_new' >/dev/full"
t_fails "verify > /dev/full fails" 1 sh -c "'$C' verify '$G/torch_new' >/dev/full"

# What a killed conversion left (its process is gone) is removed by the next.
dead=$(sh -c 'echo $$')
touch "$TMP/x.pt.tmp.$dead.AbCdEf"
t_run "dcp-to-single after a killed one" "$C" dcp-to-single "$G/torch_new" "$TMP/x.pt"
if [ -e "$TMP/x.pt.tmp.$dead.AbCdEf" ]; then
	t_not_ok "the killed conversion's temporary file is gone" "$(ls "$TMP")"
else
	t_ok "the killed conversion's temporary file is gone"
fi

t_done
