#!/bin/sh
# make bench: titan-shard's write throughput against a dd copy of the same bytes
# (with fsync, as titan-shard fsyncs every shard), and the loader's tokens/s on
# one rank against what a training step consumes.  The machine is shared and
# small: figures are noisy; rerun for a steadier number.
#
# BENCH_SHARD_DOCS (default 64000, ~32M tokens of 32-bit ids) sets the size.
set -eu
: "${BUILD:=build}" "${BIN:=bin}"
make -s "$BUILD/tests/shard/test_gen" "$BUILD/tests/loader/test_loader" >&2
GEN="$BUILD/tests/shard/test_gen"
LOAD="$BUILD/tests/loader/test_loader"
SH="$BIN/titan-shard"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/titan-bench-shard.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
DOCS=${BENCH_SHARD_DOCS:-64000}

now() { date +%s.%N; }
# CPU seconds (user + sys) of this shell's finished children so far.  times
# must run in this shell, not in a $(...) subshell that has no children.
cpu() {
	times >"$TMP/times"
	tail -n 1 "$TMP/times" | tr 'ms' '  ' | awk '{print $1 * 60 + $2 + $3 * 60 + $4}'
}
"$GEN" gen 1 "$DOCS" 128256 1000 >"$TMP/s.tts"
bytes=$(wc -c <"$TMP/s.tts")
cat "$TMP/s.tts" >/dev/null # page cache: every contender reads from memory

t0=$(now)
dd if="$TMP/s.tts" of="$TMP/copy.bin" bs=1M conv=fsync status=none
t1=$(now)
rm -f "$TMP/copy.bin"
cpu >"$TMP/c1"
"$SH" -q --out "$TMP/u" --shard-tokens 8M "$TMP/s.tts"
t2=$(now)
cpu >"$TMP/c2"
"$SH" -q --out "$TMP/z" --shard-tokens 8M --compress zstd "$TMP/s.tts"
t3=$(now)
cpu >"$TMP/c3"
tokens=$("$SH" info --json "$TMP/u" | jq .input.tokens)
zbytes=$("$SH" info --json "$TMP/z" | jq '[.train.shards[].bytes] | add')

echo "titan-shard write: $tokens tokens, $bytes bytes of token stream (32-bit ids, vocab 128256)"
awk -v b="$bytes" -v n="$tokens" -v t0="$t0" -v t1="$t1" -v t2="$t2" -v t3="$t3" -v zb="$zbytes" \
    -v c1="$(cat "$TMP/c1")" -v c2="$(cat "$TMP/c2")" -v c3="$(cat "$TMP/c3")" 'BEGIN {
	dd = t1 - t0; u = t2 - t1; z = t3 - t2
	printf "%-34s %8s %8s %14s %10s %8s\n", "", "seconds", "cpu s", "tokens/s", "MB/s in", "vs dd"
	printf "%-34s %8.2f %8s %14s %10.1f %8s\n", "dd bs=1M conv=fsync (same bytes)", dd, "-", "-", b / dd / 1e6, "1.00"
	printf "%-34s %8.2f %8.2f %14.3g %10.1f %8.2f\n", "titan-shard (uncompressed)", u, c2 - c1, n / u, b / u / 1e6, dd / u
	printf "%-34s %8.2f %8.2f %14.3g %10.1f %8.2f\n", "titan-shard --compress zstd", z, c3 - c2, n / z, b / z / 1e6, dd / z
	printf "zstd shards: %.2f bytes/token of random ids (uncompressed: 4)\n", zb / n
	printf "(titan-shard fsyncs every shard, its folder and the manifest after each shard: when its\n"
	printf " cpu seconds are far below its seconds, the disk is what it waits on)\n"
}'

# Compression of real ids: the fixture corpus through titan-tokenize, if both exist.
TOK="$BIN/titan-tokenize"
CORPUS="${TITAN_FIXTURES:-../shared/fixtures}/corpus/en.jsonl"
LLAMA="${TITAN_FIXTURES:-../shared/fixtures}/tokenizers/llama3_1"
if [ -x "$TOK" ] && [ -e "$CORPUS" ] && [ -e "$LLAMA/tokenizer.json" ]; then
	"$TOK" -q -t "$LLAMA" <"$CORPUS" >"$TMP/real.tts"
	"$SH" -q --out "$TMP/real" --compress zstd --shard-tokens 1M "$TMP/real.tts"
	"$SH" info --json "$TMP/real" | jq -r '"zstd shards of Llama 3 ids of the fixture corpus: " +
		(([.train.shards[].bytes] | add) / .input.tokens * 100 | floor / 100 | tostring) +
		" bytes/token (uncompressed: 4)"'
	R="$TMP/real"
else
	R=""
fi

echo
echo "loader, rank 0 of 1, seq_len 2048, local batch 8, doc ids on, seeded shuffle"
# torchtitan's published Llama 3.1 8B figure on H100 (FSDP, compile, Float8):
# 8,532 tokens/s per GPU; a step never needs more than that from its loader.
need=8532
printf "%-34s %14s %12s\n" "" "tokens/s" "vs 8B step"
for cfg in "u 0 uncompressed, no prefetch" "u 2 uncompressed, prefetch 2" \
	   "z 0 zstd, no prefetch" "z 2 zstd, prefetch 2"; do
	set -- $cfg
	d=$1 p=$2
	shift 2
	tps=$("$LOAD" bench "$TMP/$d" 2048 8 "$p" 1 | cut -d' ' -f1)
	printf "%-34s %14.3g %11.0fx\n" "$*" "$tps" "$(echo "$tps / $need" | bc -l)"
done
if [ -n "$R" ]; then
	tps=$("$LOAD" bench "$R" 2048 8 0 1 | cut -d' ' -f1)
	printf "%-34s %14.3g %11.0fx\n" "zstd, Llama 3 ids, no prefetch" "$tps" "$(echo "$tps / $need" | bc -l)"
fi
