#!/bin/sh
# Whole processes, one thread each: titan-tokenize -j 1 against a Python program
# that does the same job with tiktoken (scripts/tok_bench_process.py: load the
# tiktoken file, read the JSON Lines corpus, encode every document with BOS and
# EOS, write the ids).  titan runs from the same tiktoken file and from Llama 3's
# tokenizer.json, each with the compiled cache cold (--no-cache) and warm.
# Figures: wall and CPU (user + system) seconds of the whole process, best of
# TITAN_BENCH_PASSES runs (default 3), and the speed-up over the Python program.
# The machine is shared: CPU seconds are the steadier figure; the load is printed.
#
#   sh scripts/bench/tokenize_process.sh [CORPUS.jsonl]
#
# Environment: PYTHON (with tiktoken; without it the reference row says so),
# TITAN_FIXTURES (default ../shared/fixtures, then build/fixtures).
set -u
FIXDIRS="${TITAN_FIXTURES:-../shared/fixtures} build/fixtures"
fx() { for d in $FIXDIRS; do [ -e "$d/$1" ] && { echo "$d/$1"; return 0; }; done; return 1; }
CORPUS=${1:-$(fx corpus/en.jsonl)} || { echo "tokenize_process bench: no corpus (make fixtures)" >&2; exit 1; }
TT=$(fx tokenizers/llama3_tiktoken/tokenizer.model || fx tokenizers/cl100k_base/cl100k_base.tiktoken) ||
	{ echo "tokenize_process bench: no tiktoken file (make fixtures)" >&2; exit 1; }
HF=$(fx tokenizers/llama3_1 || fx tokenizers/qwen3)
PY=${PYTHON:-python3}
T=${BIN:-bin}/titan-tokenize
PASSES=${TITAN_BENCH_PASSES:-3}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/titan-bench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
[ -x "$T" ] || { echo "tokenize_process bench: no $T (make)" >&2; exit 1; }

# best LABEL CMD...: the best wall and CPU seconds of PASSES runs -> a row
best() {
	label=$1
	shift
	: >"$TMP/times"
	i=0
	while [ $i -lt "$PASSES" ]; do
		/usr/bin/time -f "%e %U %S" -o "$TMP/t" "$@" >"$TMP/out" 2>"$TMP/err" ||
			{ echo "tokenize_process bench: $label failed: $(tail -2 "$TMP/err")" >&2; return 1; }
		awk '{print $1, $2 + $3}' "$TMP/t" >>"$TMP/times"
		i=$((i + 1))
	done
	wall=$(sort -n "$TMP/times" | head -1 | cut -d' ' -f1)
	cpu=$(sort -k2 -n "$TMP/times" | head -1 | cut -d' ' -f2)
	echo "$label $wall $cpu $(wc -c <"$TMP/out")" >>"$TMP/rows"
}

cache="$TMP/cache"
if "$PY" -c 'import tiktoken' 2>/dev/null; then
	best "python+tiktoken" "$PY" scripts/tok_bench_process.py "$TT" "$CORPUS"
else
	echo "(no tiktoken under $PY: the reference row is missing; set PYTHON)" >&2
fi
best "titan,tiktoken,cold" "$T" -q -j 1 --no-cache -t "$TT" "$CORPUS"
"$T" -q -j 1 --cache "$cache" -t "$TT" /dev/null >/dev/null 2>&1
best "titan,tiktoken,warm" "$T" -q -j 1 --cache "$cache" -t "$TT" "$CORPUS"
if [ -n "$HF" ]; then
	best "titan,json,cold" "$T" -q -j 1 --no-cache -t "$HF" "$CORPUS"
	"$T" -q -j 1 --cache "$cache" -t "$HF" /dev/null >/dev/null 2>&1
	best "titan,json,warm" "$T" -q -j 1 --cache "$cache" -t "$HF" "$CORPUS"
fi
best "titan,json,load-only" "$T" -q -j 1 --cache "$cache" -t "${HF:-$TT}" /dev/null

echo "tokenize_process: whole processes, one thread, $(basename "$CORPUS") ($(wc -c <"$CORPUS") bytes), $(basename "$TT") / $(basename "${HF:-none}"); best of $PASSES; load:$(uptime | sed 's/.*load average://')"
awk -v pw="$(awk '$1 == "python+tiktoken" {print $2}' "$TMP/rows")" \
    -v pc="$(awk '$1 == "python+tiktoken" {print $3}' "$TMP/rows")" '
BEGIN { printf "%-22s %8s %8s %11s %10s %10s\n", "process", "wall s", "CPU s", "output B", "x wall", "x CPU" }
{
	xw = pw && $2 > 0 ? sprintf("%.2f", pw / $2) : "-"
	xc = pc && $3 > 0 ? sprintf("%.2f", pc / $3) : "-"
	printf "%-22s %8.2f %8.2f %11d %10s %10s\n", $1, $2, $3, $4, xw, xc
}' "$TMP/rows"
echo "(x: the Python program's seconds over the row's; output bytes: ids + titan's stream framing)"
