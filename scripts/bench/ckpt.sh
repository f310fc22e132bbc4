#!/bin/sh
# Checkpoint save/load throughput of titan's DCP writer/reader for a 1 GB
# state (64 MiB float32 tensors) against the raw disk measured in the same run
# with dd: write with fsync, read after dropping the page cache, both sides.
# CKPT_BENCH_SIZE (default 1G) and CKPT_BENCH_DIR (default $TMPDIR or /tmp)
# change the size and the disk.  Shared machines are noisy: repeat to trust a
# difference under ~20%.
set -eu
BIN=${BIN:-bin}
SIZE=${CKPT_BENCH_SIZE:-1G}
BASE=${CKPT_BENCH_DIR:-${TMPDIR:-/tmp}}
W=$(mktemp -d "$BASE/titan-ckpt-bench.XXXXXX")
trap 'rm -rf "$W"' EXIT
C="$BIN/titan-ckpt-convert"

mb=$(numfmt --from=iec "$SIZE")
count=$((mb / 4194304))
rate() { # bytes seconds
	awk -v b="$1" -v s="$2" 'BEGIN { printf "%.1f", b / 1e6 / s }'
}
secs() { # command...; prints wall seconds
	s=$(date +%s.%N)
	"$@" >/dev/null 2>&1
	e=$(date +%s.%N)
	awk -v s="$s" -v e="$e" 'BEGIN { printf "%.3f", e - s }'
}

dw=$(secs dd if=/dev/zero of="$W/raw" bs=4M count="$count" conv=fsync)
dd if="$W/raw" iflag=nocache count=0 2>/dev/null
dr=$(secs dd if="$W/raw" of=/dev/null bs=4M)
rm -f "$W/raw"
raw_w=$(rate "$mb" "$dw")
raw_r=$(rate "$mb" "$dr")

"$C" bench "$W/step-1" --size "$SIZE" >"$W/sync.txt"
rm -rf "$W/step-1"
"$C" bench "$W/step-2" --size "$SIZE" --async >"$W/async.txt"
rm -rf "$W/step-2"
"$C" bench "$W/step-3" --size "$SIZE" --chunks 4 >"$W/four.txt"
rm -rf "$W/step-3"

get() { sed -n "s/^$2 \([0-9.]*\) MB.*/\1/p" "$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
printf "%-44s %10s %10s %8s\n" "checkpoint I/O, $SIZE state" "MB/s" "raw MB/s" "ratio"
for f in sync async four; do
	case $f in
	sync) label="titan DCP, 1 rank file" ;;
	async) label="titan DCP, async (copy + thread)" ;;
	four) label="titan DCP, 4 rank files" ;;
	esac
	s=$(get "$W/$f.txt" save)
	l=$(get "$W/$f.txt" load)
	printf "%-44s %10s %10s %8s\n" "save: $label" "$s" "$raw_w" "$(ratio "$s" "$raw_w")"
	printf "%-44s %10s %10s %8s\n" "load: $label" "$l" "$raw_r" "$(ratio "$l" "$raw_r")"
done
sed -n "s/^save blocked the caller \([0-9.]*\) s (copy; \([0-9.]*\) s.*/async save blocked the training loop for \1 s per save (\2 s the first time, staging buffer faults)/p" "$W/async.txt"
echo "raw: dd bs=4M, write conv=fsync, read after iflag=nocache (page cache dropped)"
