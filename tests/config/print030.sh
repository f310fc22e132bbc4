#!/bin/sh
# torchtitan 0.3.0's presets: titan-train --module FAMILY --config PRESET
# --debug.print_config prints the Trainer.Config as 0.3.0's does, and for
# every preset each value it prints is 0.3.0's (the JSON column of
# tests/config/torchtitan-0.3.0-keys.tsv, which scripts/torchtitan030_keys.py
# made from 0.3.0 itself); every path titan has a value for is printed; a
# preset titan refuses exits 2 with the reason --list-030-presets gives.
. tests/lib.sh

TRAIN="$BIN/titan-train"
TSV=tests/config/torchtitan-0.3.0-keys.tsv

t_run "--list-030-presets" "$TRAIN" --list-030-presets
cp "$TMP/.out" "$TMP/presets"
"$TRAIN" --list-030-paths >"$TMP/paths"
# the paths titan prints: those that set a key or accept one value, and the
# param groups (from titan's optimizer keys)
awk -F'\t' '$2 == "sets" || $2 == "only" || $1 == "optimizer.param_groups" { print $1 }' \
	"$TMP/paths" >"$TMP/printed-paths"

# One line per leaf of the printed JSON (json.dumps(indent=2)'s layout):
# path, the value on one line as json.dumps writes it.
flatten() {
	awk '
	function key(l) { return substr(l, 2, index(l, "\": ") - 2) }
	function path(k,   p, i) { p = ""; for (i = 1; i <= n; i++) p = p st[i] "."; return p k }
	NR == 1 { next }                       # Running with configs: {
	{ l = $0; sub(/^ +/, "", l); sub(/,$/, "", l) }
	depth > 0 {                            # inside a list value
		closer = l ~ /^[]}]$/
		acc = acc ((opened || closer) ? "" : ", ") l
		opened = l ~ /[[{]$/
		depth += gsub(/[[{]$/, "&", l) - closer
		if (depth == 0) print path(lk) "\t" acc
		next
	}
	l ~ /^"[^"]*": \[$/ { lk = key(l); acc = "["; opened = 1; depth = 1; next }
	l ~ /^"[^"]*": \{$/ { st[++n] = key(l); next }
	l == "}" { n--; next }
	l ~ /^"[^"]*": / { print path(key(l)) "\t" substr(l, index(l, "\": ") + 3) }
	'
}

honoured=0
refused=0
bad=""
for preset in $(grep -v '^#' "$TSV" | cut -f1 | uniq); do
	fam=$(awk -F'\t' -v p="$preset" '$2 == p { print $1 }' "$TMP/presets")
	why=$(awk -F'\t' -v p="$preset" '$2 == p && $3 == "refused" { print $4 }' "$TMP/presets")
	if [ -z "$fam" ]; then
		bad="$bad $preset(not in --list-030-presets)"
		continue
	fi
	if "$TRAIN" --module "$fam" --config "$preset" --debug.print_config \
		>"$TMP/out" 2>"$TMP/err"; then
		rc=0
	else
		rc=$?
	fi
	if [ -n "$why" ]; then
		refused=$((refused + 1))
		if [ "$rc" != 2 ] || ! grep -qF -- "--config $preset: refused: $why" "$TMP/err"; then
			bad="$bad $preset(refusal: rc $rc, $(head -c 200 "$TMP/err"))"
		fi
		continue
	fi
	honoured=$((honoured + 1))
	if [ "$rc" != 0 ] || ! head -1 "$TMP/out" | grep -q '^Running with configs: {$'; then
		bad="$bad $preset(rc $rc: $(head -c 200 "$TMP/err"))"
		continue
	fi
	flatten <"$TMP/out" | sort >"$TMP/got"
	# 0.3.0's values of the paths titan prints (model_spec's name and flavor
	# too), print_config being the one given
	awk -F'\t' -v p="$preset" 'NR == FNR { want[$1] = 1; next }
		$2 == "debug.print_config" { $5 = "true" }
		$1 == p && ($2 in want || $2 ~ /^model_spec\./) { print $2 "\t" $5 }' \
		"$TMP/printed-paths" "$TSV" | sort >"$TMP/want"
	if ! cmp -s "$TMP/got" "$TMP/want"; then
		bad="$bad $preset($(diff "$TMP/want" "$TMP/got" | grep '^[<>]' | head -4 | tr '\n' ' '))"
	fi
done

if [ -z "$bad" ]; then
	t_ok "$honoured presets print 0.3.0's values of every path titan has; $refused refused with their reasons"
else
	t_not_ok "every preset prints 0.3.0's values, or is refused with its reason" "$bad"
fi
n=$(wc -l <"$TMP/presets")
m=$(grep -v '^#' "$TSV" | cut -f1 | uniq | wc -l)
if [ "$n" = "$m" ]; then t_ok "--list-030-presets lists the $m presets of the list"; else t_not_ok "--list-030-presets lists the presets of the list" "$n listed, $m in $TSV"; fi

# The planner takes every preset titan honours, the big ones on 64 ranks.
bad=""
for fp in $(awk -F'\t' '$3 == "honoured" { print $1 ":" $2 }' "$TMP/presets"); do
	"$TRAIN" --module "${fp%%:*}" --config "${fp#*:}" --dry-run --world-size 64 \
		--device-memory 80GiB >"$TMP/out" 2>"$TMP/err" || bad="$bad ${fp#*:}($(head -c 200 "$TMP/err"))"
done
if [ -z "$bad" ]; then t_ok "--dry-run plans every honoured preset on 64 ranks"; else t_not_ok "--dry-run plans every honoured preset" "$bad"; fi

# 0.3.0 refuses a sequence longer than the flavor's RoPE cache: Qwen3's
# sizes have 40960 positions, its debug models 4096.
t_run "qwen3_0_6b trains on 8192 positions" "$TRAIN" --module qwen3 --config qwen3_0_6b \
	--training.seq_len 8192 --dry-run --world-size 8
t_fails "qwen3_debugmodel refuses 8192 positions" 2 "$TRAIN" --module qwen3 \
	--config qwen3_debugmodel --training.seq_len 8192 --dry-run
t_grep "the refusal names the RoPE length" \
	'training.seq_len 8192: exceeds the RoPE maximum sequence length 4096 of flavor debugmodel' \
	"$TMP/.err"

# A path given on the command line is what is printed.
t_run "an override is printed" "$TRAIN" --module qwen3 --config qwen3_0_6b --training.steps 7 \
	--debug.print_config
t_grep "training.steps printed as 7" '^    "steps": 7,$' "$TMP/.out"

t_done
