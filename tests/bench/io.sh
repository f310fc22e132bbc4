#!/bin/sh
# titan-bench io under abuse: sizes it cannot hold refused in one line before
# anything is written (--size 0 no longer means the default; 1000T is more
# than any disk here), and a run stopped by SIGTERM or SIGHUP leaves no
# scratch folder behind.
. tests/lib.sh
B="$BIN/titan-bench"

t_fails "io --size 0 is refused" 2 "$B" io --size 0 --dir "$TMP"
t_grep "... saying the least size" "^titan-bench: --size '0': at least 1M$" "$TMP/.err"
mkdir "$TMP/big"
t_fails "io --size 1000T is refused before writing" 2 timeout 30 "$B" io --size 1000T --dir "$TMP/big"
t_grep "... with what it needs and what the disk has" "io --size 1000.0 TiB: needs .* free in $TMP/big .*, which has " "$TMP/.err"
if [ -z "$(ls -A "$TMP/big")" ]; then t_ok "... and nothing written"
else t_not_ok "... and nothing written" "$(ls -A "$TMP/big")"; fi

for sig in TERM HUP; do
	mkdir "$TMP/$sig"
	"$B" io --size 256M --seq 64 --batch 2 --threads 1 --dir "$TMP/$sig" >/dev/null 2>"$TMP/$sig.err" &
	pid=$!
	n=0
	while [ $n -lt 100 ] && ! ls -d "$TMP/$sig"/titan-bench-io.* >/dev/null 2>&1; do
		sleep 0.1
		n=$((n + 1))
	done
	sleep 0.5
	kill -$sig $pid
	wait $pid
	rc=$?
	if [ -z "$(ls -A "$TMP/$sig")" ]; then t_ok "io stopped by SIG$sig (exit $rc) leaves no scratch folder"
	else t_not_ok "io stopped by SIG$sig leaves no scratch folder" "exit $rc: $(ls -A "$TMP/$sig")"; fi
done
t_done
