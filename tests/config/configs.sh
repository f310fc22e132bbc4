#!/bin/sh
# titan-train's configuration from the command line: the shipped configs parse,
# every key of titan-config(5) is accepted, misspellings are refused with a
# suggestion, later features are refused with a reason.
. tests/lib.sh

TRAIN="$BIN/titan-train"

for f in configs/*.toml; do
	t_run "shipped config $f parses" "$TRAIN" --config "$f" --job.print_config
	# What it prints is itself a config that reads back to the same thing.
	cp "$TMP/.out" "$TMP/printed.toml"
	"$TRAIN" --config "$TMP/printed.toml" --job.print_config 2>"$TMP/.err" |
		sed "s|^# config_file = .*|# config_file = \"$f\"|" >"$TMP/again.toml"
	t_same "printed $f reads back unchanged" "$TMP/printed.toml" "$TMP/again.toml"
done
n=$(ls configs/*.toml | wc -l)
if [ "$n" -ge 7 ]; then t_ok "configs for debugmodel, 1B, 3B, 8B, 70B, 405B and demo ($n)"; else t_not_ok "configs shipped" "only $n"; fi

t_run "8B config keeps torchtitan's values" "$TRAIN" --config configs/llama3_8b.toml --job.print_config
t_grep "8B: lr 3e-4" '^lr = 0.00029999999999999997$' "$TMP/.out"
t_grep "8B: seq_len 8192" '^seq_len = 8192$' "$TMP/.out"
t_grep "8B: flavor" '^flavor = "8B"$' "$TMP/.out"

# The page's KEYS, TITAN EXTENSIONS and TORCHTITAN 0.3.0 sections are the
# schema's and the 0.3.0 paths' table's, as scripts/config_man.sh writes them.
TITAN_TRAIN="$TRAIN" sh scripts/config_man.sh >"$TMP/man.gen"
sed -n '/^\.Sh KEYS$/,/^\.Sh FILES$/p' man/titan-config.5 | sed '$d' >"$TMP/man.have"
t_same "titan-config(5) lists every key as the schema has it (else: scripts/config_man.sh --write)" \
	"$TMP/man.gen" "$TMP/man.have"

# Every key of the man page, given on the command line with its default.
keys=$(sed '/^\.Sh TORCHTITAN 0\.3\.0$/,/^\.Sh FILES$/d' man/titan-config.5 |
	sed -n 's/^\.It Cm \([a-z0-9_.]*\)$/\1/p')
"$TRAIN" --list-keys >"$TMP/schema.tsv"
cut -f1 "$TMP/schema.tsv" | sort >"$TMP/schema"
echo "$keys" | sort >"$TMP/man"
t_same "titan-config(5) lists exactly the keys titan-train knows ($(echo "$keys" | wc -l))" \
	"$TMP/schema" "$TMP/man"
# (All of them on one command line; only when that is refused, one key a run
# to name each key refused: some 170 runs.)
default() { # key -> its default as a command-line value
	d=$(awk -F'\t' -v k="$1" '$1 == k { print $3 }' "$TMP/schema.tsv")
	[ "$1" = job.config_file ] && d=configs/debug_model.toml
	case "$d" in
	\"*\") d=${d#\"}; d=${d%\"} ;;
	\[*\]) d=$(echo "$d" | tr -d '[]" ') ;;
	esac
	printf '%s\n' "$d"
}
set --
for k in $keys; do
	set -- "$@" "--$k" "$(default "$k")"
done
bad=""
if ! "$TRAIN" "$@" --job.print_config >/dev/null 2>"$TMP/k.err"; then
	bad="all at once: $(cat "$TMP/k.err");"
	for k in $keys; do
		"$TRAIN" "--$k" "$(default "$k")" --job.print_config >/dev/null 2>"$TMP/k.err" ||
			bad="$bad $k($(cat "$TMP/k.err"))"
	done
fi
if [ -z "$bad" ]; then t_ok "every key of titan-config(5) is accepted"; else t_not_ok "every key of titan-config(5) is accepted" "$bad"; fi

# A TOML file setting every key of torchtitan 0.2.2's JobConfig to its
# default (those whose default is None are left out: TOML has no None) is
# read, and prints the same configuration as no file at all.
awk -F'\t' '
/^#/ { next }
$3 == "none" { next }
{
	sec = $1; sub(/\.[^.]*$/, "", sec)
	key = $1; sub(/.*\./, "", key)
	v = $3
	if ($2 ~ /^string/) v = "\"" v "\""
	else if ($2 ~ /^list/) { gsub(/,/, "\", \"", v); v = (v == "") ? "[]" : "[\"" v "\"]" }
	body[sec] = body[sec] key " = " v "\n"
	if (!(sec in seen)) { seen[sec] = 1; order[++n] = sec }
}
END { for (i = 1; i <= n; i++) printf "[%s]\n%s\n", order[i], body[order[i]] }
' tests/config/torchtitan-0.2.2-keys.tsv >"$TMP/all.toml"
t_run "every torchtitan 0.2.2 key at its default, in a TOML file" \
	"$TRAIN" --config "$TMP/all.toml" --job.print_config
grep -v '^# config_file = ' "$TMP/.out" >"$TMP/all.printed"
"$TRAIN" --job.print_config 2>/dev/null | grep -v '^# config_file = ' >"$TMP/none.printed"
t_same "torchtitan's defaults are titan-train's" "$TMP/all.printed" "$TMP/none.printed"

# Keys titan-train cannot act on: refused away from the default, or warned about.
t_fails "a key whose feature is missing is refused" 2 "$TRAIN" --quantize.linear.mx.recipe_name mxfp8 \
	--training.steps 1
t_grep "the refusal names the key and what is missing" \
	'quantize.linear.mx.recipe_name = "mxfp8": MX (MXFP8) training is not built' "$TMP/.err"
t_run "lr_scheduler.total_steps is accepted" "$TRAIN" --lr_scheduler.total_steps 500 --job.print_config
t_grep "total_steps printed" '^total_steps = 500$' "$TMP/.out"

# Misspellings: exit 2, file:line, the key, the suggestion.
printf '[training]\nsteps = 5\n\nlocal_batchsize = 4\n' >"$TMP/typo.toml"
t_fails "misspelt key in a file is refused" 2 "$TRAIN" --config "$TMP/typo.toml"
t_grep "refusal names file:line, key and the suggestion" \
	"typo.toml:4: training.local_batchsize: unknown key (did you mean training.local_batch_size?)" "$TMP/.err"
t_fails "misspelt option is refused" 2 "$TRAIN" --checkpoint.keep_latest 3
t_grep "option refusal suggests the option" "did you mean --checkpoint.keep_latest_k?" "$TMP/.err"
t_fails "bad value is refused" 2 "$TRAIN" --lr_scheduler.decay_type cubic
t_grep "bad value names the allowed ones" 'decay_type: "cubic" is not one of linear|sqrt|cosine' "$TMP/.err"
t_fails "keep_latest_k 1 is refused" 2 "$TRAIN" --checkpoint.keep_latest_k 1 --job.print_config

# Bare booleans and explicit values.
t_run "bare boolean flag" "$TRAIN" --checkpoint.enable --job.print_config
t_grep "bare flag sets true" '^enable = true$' "$TMP/.out"
t_run "boolean with a value" "$TRAIN" --config configs/debug_model.toml --metrics.enable_tensorboard false --job.print_config
t_grep "explicit false" '^enable_tensorboard = false$' "$TMP/.out"

# Features of later issues are refused before any work, with a reason.
t_fails "70B config (tensor parallel 8) is refused in one process" 2 "$TRAIN" --config configs/llama3_70b.toml
t_grep "refusal says the mesh does not fit one process" 'tensor_parallel_degree = 8: more than the world size 1' "$TMP/.err"
t_fails "tensor parallel 3 on 3 ranks is refused (heads)" 2 $MPIRUN_REFUSED -np 3 "$TRAIN" --parallelism.tensor_parallel_degree 3
t_grep "refusal names the heads" 'parallelism.tensor_parallel_degree = 3 does not divide n_heads = 16' "$TMP/.err"
t_fails "a torch.compile backend is refused" 2 "$TRAIN" --compile.backend eager
t_grep "compile.backend refusal" 'compile.backend' "$TMP/.err"
t_fails "MX is refused" 2 "$TRAIN" --model.converters quantize.linear.mx
t_fails "pipeline parallel is refused" 2 "$TRAIN" --parallelism.pipeline_parallel_degree 2

t_fails "a mesh that is not the world size is refused" 2 $MPIRUN_REFUSED -np 2 "$TRAIN" \
	--training.steps 1 --parallelism.data_parallel_shard_degree 3
t_grep "refusal names the world size" 'data_parallel_shard_degree = 3: more than the world size 2' "$TMP/.err"

t_run "--list-flavors" "$TRAIN" --list-flavors
t_grep "flavors listed with sizes" '^8B .* 8,030,261,248$' "$TMP/.out"
t_grep "titan's flux-tiny listed with its size" '^flux-tiny .* 8,314,944$' "$TMP/.out"

# --flavor: another flavor of the config's model (a 0.3.0 preset's too, which
# 0.3.0's own command line cannot change); 0.3.0's name for a preset's model
# only while the model is the preset's
t_run "--flavor 8B on a TOML config" "$TRAIN" --config configs/debug_model.toml --flavor 8B \
	--job.print_config
t_grep "  sets model.flavor" '^flavor = "8B"$' "$TMP/.out"
t_run "--flavor 20b on gpt_oss_debugmodel" "$TRAIN" --module gpt_oss --config gpt_oss_debugmodel \
	--flavor 20b --debug.print_config
t_grep "  0.3.0's config prints it" '^    "flavor": "20b"$' "$TMP/.out"
t_run "gpt_oss_debugmodel's own flavor" "$TRAIN" --module gpt_oss --config gpt_oss_debugmodel \
	--debug.print_config
t_grep "  by 0.3.0's name for it" '^    "flavor": "debugmodel"$' "$TMP/.out"
t_fails "--flavor of another model is refused" 2 "$TRAIN" --module flux --config flux_debugmodel \
	--flavor 8B
t_grep "  naming the flavor and the model" '--flavor 8B: not a flavor of model.name "flux"' "$TMP/.err"
t_run "--help" "$TRAIN" --help
t_grep "help names --config" '--config FILE' "$TMP/.out"

t_done
