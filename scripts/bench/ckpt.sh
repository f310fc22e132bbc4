#!/bin/sh
# Checkpoint save and load throughput, side by side in one run: titan's DCP
# writer and reader (titan-ckpt-convert bench), torch.distributed.checkpoint
# (scripts/bench/ckpt_torch.py, when $PYTHON has torch) and the disk itself
# (dd: writing with conv=fsync; reading the files titan loads, after dropping
# the page cache).  The state
# is a model with its AdamW state (bench.c); 1 and 4 ranks write one folder
# (titan's ranks under mpirun, torch's under torchrun with gloo), and every
# load reads a folder written with the page cache dropped first: by the
# saving job's ranks, and resharded (4 -> 1, 1 -> 4).  Then titan-train's
# mean step time without checkpoints, with a synchronous save after every
# step and with an asynchronous one (checkpoint.async_mode) in flight.
#
#   sh scripts/bench/ckpt.sh     CKPT_BENCH_SIZES ("1G 4G"), CKPT_BENCH_DIR
#                                ($TMPDIR or /tmp), CKPT_BENCH_TRAIN (0: no
#                                titan-train part), PYTHON, TORCHRUN, BIN
#
# Each row's figures are taken together (see save_row, load_row), 4-rank titan
# and torch runs with one OpenMP thread a rank.
# Ratios: titan / disk and titan / torch; "goal" is ok when titan is at least
# 80 % of the disk, ahead of torch, and twice torch wherever torch is under
# half the disk.  Shared machines are noisy: repeat to trust a difference
# under ~20 %.
set -eu
BIN=${BIN:-bin}
PY=${PYTHON:-python3}
TORCHRUN=${TORCHRUN:-$(dirname "$(command -v "$PY" || echo .)")/torchrun}
SIZES=${CKPT_BENCH_SIZES:-1G 4G}
BASE=${CKPT_BENCH_DIR:-${TMPDIR:-/tmp}}
MPIRUN=${MPIRUN:-mpirun --allow-run-as-root --oversubscribe -np}
HERE=$(dirname "$0")
C="$BIN/titan-ckpt-convert"
W=$(mktemp -d "$BASE/titan-ckpt-bench.XXXXXX")
trap 'rm -rf "$W"' EXIT
# a signal (^C, or a reader such as head closing the pipe) exits through the
# EXIT trap too: the folders hold gigabytes, and $RAND lives in /dev/shm
trap 'exit 1' INT TERM HUP PIPE

if "$PY" -c 'import torch.distributed.checkpoint' 2>/dev/null; then have_torch=1; else have_torch=0; fi
if [ -w /proc/sys/vm/drop_caches ]; then
	dropping="echo 1 > /proc/sys/vm/drop_caches (after sync)"
else
	dropping="dd iflag=nocache count=0 on each file (no permission for drop_caches)"
fi

drop() { # DIR: the page cache, before every read
	if [ -w /proc/sys/vm/drop_caches ]; then
		sync
		echo 1 >/proc/sys/vm/drop_caches
	else
		for f in "$1"/* "$1"/.metadata; do
			[ -f "$f" ] && dd if="$f" iflag=nocache count=0 2>/dev/null
		done
	fi
	return 0
}
secs() { # command...: wall seconds
	s=$(date +%s.%N)
	"$@" >/dev/null 2>&1
	e=$(date +%s.%N)
	awk -v s="$s" -v e="$e" 'BEGIN { printf "%.3f", e - s }'
}
rate() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.1f", b / 1e6 / s }'; }
mbs() { sed -n 's/^\(save\|load\) \([0-9.]*\) MB\/s.*/\2/p' "$1" | tail -n 1; }

run_titan() { # RANKS PHASE DIR SIZE: MB/s
	if [ "$1" = 1 ]; then
		"$C" bench "$3" --size "$4" --phase "$2" >"$W/out" 2>"$W/err" || { cat "$W/err" >&2; exit 1; }
	else
		# one OpenMP thread a rank, as torchrun gives torch's: 4 ranks on
		# fewer cores would otherwise spin against each other
		OMP_NUM_THREADS=1 $MPIRUN "$1" "$C" bench "$3" --size "$4" --phase "$2" >"$W/out" 2>"$W/err" ||
			{ cat "$W/err" >&2; exit 1; }
	fi
	mbs "$W/out"
}
run_torch() { # RANKS PHASE DIR SIZE: MB/s, "-" without torch
	if [ "$have_torch" = 0 ]; then echo -; return 0; fi
	if [ "$1" = 1 ]; then
		"$PY" "$HERE/ckpt_torch.py" --dir "$3" --size "$4" --phase "$2" >"$W/out" 2>"$W/err" ||
			{ cat "$W/err" >&2; exit 1; }
	else
		OMP_NUM_THREADS=1 "$TORCHRUN" --standalone --nproc-per-node "$1" "$HERE/ckpt_torch.py" \
			--dir "$3" --size "$4" --phase "$2" >"$W/out" 2>"$W/err" || { cat "$W/err" >&2; exit 1; }
	fi
	mbs "$W/out"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }
goal() { # TITAN TORCH DISK
	awk -v t="$1" -v p="$2" -v d="$3" 'BEGIN {
		ok = t >= 0.8 * d
		if (p != "-") ok = ok && t > p && (p >= d / 2 || t >= 2 * p)
		print ok ? "ok" : "MISS" }'
}
row() { # SIZE WHAT TITAN TORCH DISK
	printf "%-5s %-24s %9s %9s %9s %7s %7s  %s\n" "$1" "$2" "$3" "$4" "$5" \
		"$(ratio "$3" "$5")" "$(ratio "$3" "$4")" "$(goal "$3" "$4" "$5")"
}

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
printf "%-5s %-24s %9s %9s %9s %7s %7s  %s\n" size "checkpoint I/O, MB/s" titan torch disk "/disk" "/torch" goal
best() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == "-" || a > b) print a; else print b }'; }
# dd writes random bytes, not zeros: this VM's disk reads zeros back at
# twice the speed of data (3.6 against 2.0 GB/s), which no checkpoint is.
# A 256 MiB block in memory, written as many times as SIZE needs.
RAND=$(mktemp "${CKPT_BENCH_SHM:-/dev/shm}/titan-ckpt-rand.XXXXXX" 2>/dev/null || mktemp "$W/rand.XXXXXX")
trap 'rm -rf "$W" "$RAND"' EXIT
head -c 268435456 /dev/urandom >"$RAND"
dd_blocks() { # COUNT: write COUNT x 256 MiB of $RAND into $W/raw, the last with fsync
	i=0
	while [ "$i" -lt "$1" ]; do
		conv=notrunc
		if [ $((i + 1)) -eq "$1" ]; then conv=notrunc,fsync; fi
		dd if="$RAND" of="$W/raw" bs=4M seek=$((i * 64)) conv=$conv 2>/dev/null || return 1
		i=$((i + 1))
	done
}
dd_write() { # SIZE: MB/s of dd writing SIZE of random bytes with fsync
	blocks=$(($(numfmt --from=iec "$1") / 268435456))
	rm -f "$W/raw"
	rate $((blocks * 268435456)) "$(secs dd_blocks "$blocks")"
	rm -f "$W/raw"
}
# The disk a load is held against is dd reading the very files titan loads,
# one after another, page cache dropped: this VM's disk sits behind its
# host's cache, which keeps what was touched last.  A file dd had just
# written read back at 3 GB/s; titan loading its 4 rank files ran at
# 1.1-1.8 GB/s after torch had loaded its own (even 10 s after), and at
# 1.7-2.2 otherwise.
dd_files() { # DIR: each data file of DIR in turn
	for f in "$1"/*.distcp; do
		dd if="$f" of=/dev/null bs=4M 2>/dev/null || return 1
	done
}
dd_read() { # DIR: MB/s of dd reading DIR's data files with the page cache dropped
	bytes=$(stat -c %s "$1"/*.distcp | awk '{ s += $1 } END { print s }')
	drop "$1"
	rate "$bytes" "$(secs dd_files "$1")"
}
# A row's three figures are taken together, in the order disk, titan, torch,
# torch, titan, disk: this VM's disk runs at 400 MB/s to 2 GB/s from one
# minute to the next, and its host's cache favours what was touched last.
# Each figure is the better of its two runs, saves as loads: with one save of
# each side against the better of two dd runs, the disk had two chances to
# the savers' one (titan's 1 GiB save measured 0.51-0.71 of dd that way, and
# 1.2 of it over 5 alternated runs each).  The side that saves last, whose
# files the host's cache then holds for the loads after, alternates: torch
# in the 1-rank save's row, titan in the 4-rank one.
both_twice() { # PHASE SIZE RANKS A B: runs A B B A; "titan torch", each the better of its two
	a=0 t=0
	for who in "$4" "$5" "$5" "$4"; do
		[ "$who" = torch ] && [ "$have_torch" = 0 ] && continue
		if [ "$1" = save ]; then rm -rf "${W:?}/$who"; else drop "$W/$who"; fi
		if [ "$who" = titan ]; then
			a=$(best "$a" "$(run_titan "$3" "$1" "$W/titan" "$2")")
		else
			t=$(best "$t" "$(run_torch "$3" "$1" "$W/torch" "$2")")
		fi
	done
	[ "$have_torch" = 0 ] && t=-
	echo "$a $t"
}
save_row() { # SIZE RANKS: "titan torch disk"
	d=$(dd_write "$1")
	if [ "$2" = 1 ]; then
		r=$(both_twice save "$1" "$2" torch titan)
	else
		r=$(both_twice save "$1" "$2" titan torch)
	fi
	echo "$r $(best "$d" "$(dd_write "$1")")"
}
load_row() { # SIZE LOADERS: "titan torch disk"
	d=$(dd_read "$W/titan")
	r=$(both_twice load "$1" "$2" titan torch)
	echo "$r $(best "$d" "$(dd_read "$W/titan")")"
}
for size in $SIZES; do
	for saver in 1 4; do
		other=$((saver == 1 ? 4 : 1))
		set -- $(save_row "$size" "$saver")
		row "$size" "save, $saver rank$([ "$saver" = 1 ] || echo s)" "$1" "$2" "$3"
		for loader in "$saver" "$other"; do
			set -- $(load_row "$size" "$loader")
			row "$size" "load, $saver -> $loader rank$([ "$loader" = 1 ] || echo s)" "$1" "$2" "$3"
		done
		rm -rf "$W/titan" "$W/torch"
	done
done

if [ "${CKPT_BENCH_TRAIN:-1}" = 1 ]; then
	sh "$HERE/ckpt_train.sh" "$W"
fi
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "disk: dd bs=4M, writing the same size of random bytes (conv=fsync) and reading titan's data files"
echo "  one after another after the page cache was dropped,"
echo "  measured with each row: disk, titan, torch, torch, titan, disk (the 1-rank save: torch first and last)"
echo "  (each figure the better of its two runs)"
echo "page cache dropped before every read by $dropping"
echo "titan: titan-ckpt-convert bench (fsync, rank files written by mpirun's ranks, every load checked);"
echo "torch: torch.distributed.checkpoint dcp.save / dcp.load, FileSystemWriter defaults (torchrun, gloo, DTensor Shard(0))"
