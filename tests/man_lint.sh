#!/bin/sh
# Every man page passes mandoc's lint at warning level.
n=0
for m in man/*.[1-9]; do
	n=$((n + 1))
	if out=$(mandoc -Tlint -Wwarning "$m" 2>&1) && [ -z "$out" ]; then
		echo "ok $n $m"
	else
		echo "not ok $n $m"
		echo "$out" | sed 's/^/# /'
	fi
done
