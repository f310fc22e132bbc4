#!/bin/sh
# make bench: titan-tokenize's throughput and peak memory with -j 1, 2 and 4
# on the shared English corpus (gzip, as C4 ships), with the Llama 3 tokenizer,
# and BPE training time for an 8k vocabulary.  Throughput is megabytes of
# decoded text per second of the encoding phase (the summary line; tokenizer
# loading excluded).  The machine is shared and has 2 cores: figures are noisy,
# and -j 4 cannot beat -j 2 there; rerun for steadier numbers.
set -eu
: "${BIN:=bin}"
FIX=${TITAN_FIXTURES:-../shared/fixtures}
IN=$FIX/corpus/en.jsonl.gz
TK=$FIX/tokenizers/llama3_1
T="$BIN/titan-tokenize"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/titan-bench-tokenize.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
[ -e "$IN" ] && [ -e "$TK/tokenizer.json" ] || { echo "missing fixtures under $FIX" >&2; exit 1; }

printf '%-28s %10s %12s\n' "run" "MB/s" "peak RSS MB"
for j in 1 2 4; do
	/usr/bin/time -f '%M' -o "$TMP/rss" "$T" -t "$TK" -j "$j" "$IN" >/dev/null 2>"$TMP/err"
	mbs=$(sed -n 's/.*(\([0-9.]*\) MB\/s).*/\1/p' "$TMP/err")
	printf '%-28s %10s %12d\n' "titan-tokenize -j $j" "$mbs" $(($(tail -1 "$TMP/rss") / 1024))
done

head -n 10000 "$FIX/corpus/en.jsonl" >"$TMP/train.jsonl"
/usr/bin/time -f '%e %M' -o "$TMP/t" "$T" train -q --vocab-size 8000 -o "$TMP/tok" "$TMP/train.jsonl"
read -r secs rss <"$TMP/t"
printf '%-28s %10s %12d   (%s s, 3 MB, one core)\n' "train --vocab-size 8000" "-" $((rss / 1024)) "$secs"
