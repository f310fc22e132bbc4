#!/bin/sh
# Single-thread encode speed of lib/tok against tiktoken and HF tokenizers on the
# same texts (the "text" of every line of en.jsonl, Llama 3 vocabulary), in the
# same run, with peak memory.  Speeds are CPU time of the encode calls only (load
# and JSON parsing excluded on both sides); the machine is shared, so expect noise.
#
#   sh scripts/bench/tokenize.sh [CORPUS.jsonl]
#
# Environment: PYTHON (an interpreter with tiktoken and tokenizers; without them the
# reference rows say so), TITAN_FIXTURES (default ../shared/fixtures).
set -u
FIX=${TITAN_FIXTURES:-../shared/fixtures}
CORPUS=${1:-$FIX/corpus/en.jsonl}
PY=${PYTHON:-python3}
DRV=build/tests/tok/test_tok_corpus
make -s "$DRV" >/dev/null || { echo "tokenize bench: cannot build $DRV" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/titan-bench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

peak() { # file written by /usr/bin/time -v -> MB
	awk -F: '/Maximum resident set size/ {printf "%.0f", $2 / 1024}' "$1"
}

run_titan() { # label tokenizer-folder [pcre2]
	/usr/bin/time -v "$DRV" bench "$FIX/tokenizers/$2" "$CORPUS" ${3:-} >"$TMP/out" 2>"$TMP/time" ||
		{ echo "tokenize bench: $DRV failed: $(tail -3 "$TMP/time")" >&2; exit 1; }
	set -- "$1" "$(awk '{print $8}' "$TMP/out")" "$(awk '{print $4}' "$TMP/out")" "$(peak "$TMP/time")"
	echo "$1 $2 $3 $4" >>"$TMP/rows"
}

run_titan "titan(tokenizer.json)" llama3_1
run_titan "titan(tiktoken-file)" llama3_tiktoken
run_titan "titan(pcre2-path)" llama3_1 pcre2
if "$PY" -c 'import tiktoken, tokenizers, numpy' 2>/dev/null; then
	/usr/bin/time -v "$PY" scripts/tok_bench_ref.py "$FIX" "$CORPUS" >"$TMP/ref" 2>"$TMP/time" ||
		{ echo "tokenize bench: reference failed: $(tail -3 "$TMP/time")" >&2; exit 1; }
	cat "$TMP/ref" >>"$TMP/rows"
else
	echo "(no tiktoken/tokenizers under $PY: reference rows missing; set PYTHON)" >&2
fi

echo "tokenize: single-thread encode, Llama 3 vocabulary, $(basename "$CORPUS") ($(wc -c <"$CORPUS") bytes of JSONL)"
awk -v tk="$(awk '$1 == "tiktoken" {print $2}' "$TMP/rows")" \
    -v hf="$(awk '$1 == "hf-tokenizers" {print $2}' "$TMP/rows")" '
BEGIN { printf "%-22s %9s %10s %9s %11s %9s\n", "encoder", "MB/s", "tokens", "peak MB", "x tiktoken", "x HF" }
{
	rt = tk ? sprintf("%.2f", $2 / tk) : "-"
	rh = hf ? sprintf("%.2f", $2 / hf) : "-"
	printf "%-22s %9.2f %10d %9s %11s %9s\n", $1, $2, $3, $4, rt, rh
}' "$TMP/rows"
echo "(peak MB of the reference rows is the Python process after both; tokens must agree)"
