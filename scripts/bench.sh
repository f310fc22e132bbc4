#!/bin/sh
# make bench: run every benchmark under scripts/bench/ (each prints its own table of
# figures against the reference tools).  BENCH_FILTER=word runs only matching ones.
set -u
status=0
for b in scripts/bench/*.sh; do
	[ -e "$b" ] || continue
	case "$b" in *"${BENCH_FILTER:-}"*) ;; *) continue ;; esac
	echo "== $b"
	sh "$b" || { echo "bench $b failed" >&2; status=1; }
done
exit $status
