#!/bin/sh
# make install PREFIX=... puts every program in PREFIX/bin and every man page in
# PREFIX/share/man/manN; DESTDIR stages the same tree elsewhere.
. tests/lib.sh
unset MAKEFLAGS MFLAGS MAKELEVEL
root=$ROOT
prefix=$TMP/prefix
# Install the build under test (plain, or the sanitizer build in asan-check).
build="make -C $root SAN=${SAN:-0} BUILD=$BUILD BIN=$BIN"

if $build install PREFIX="$prefix" >"$TMP/install.log" 2>&1; then
	t_ok "make install PREFIX=dir succeeds"
else
	t_not_ok "make install PREFIX=dir succeeds" "$(tail -5 "$TMP/install.log")"
	t_done
fi

n_man=0
for m in "$root"/man/*.[1-9]; do
	page=$(basename "$m")
	sec=${page##*.}
	n_man=$((n_man + 1))
	t_same "man page $page installed in man$sec" "$m" "$prefix/share/man/man$sec/$page"
done
[ "$n_man" -ge 2 ] && t_ok "titan(7) and titan-formats(5) at least ($n_man pages)" ||
	t_not_ok "titan(7) and titan-formats(5) at least" "only $n_man man pages"
# The installed overview page renders.
# (-T ascii overstrikes bold text: "N\bNA\bA..."; strip the backspaces.)
bs=$(printf '\b')
if mandoc -T ascii "$prefix/share/man/man7/titan.7" >"$TMP/titan.raw" 2>&1 &&
	sed "s/.$bs//g" "$TMP/titan.raw" >"$TMP/titan.txt"; then
	t_grep "installed titan(7) renders with its overview" "DESCRIPTION" "$TMP/titan.txt"
else
	t_not_ok "installed titan(7) renders" "$(head -3 "$TMP/titan.txt")"
fi

# Every program that the build made is installed, executable and identical.
for p in "$BIN"/titan-*; do
	[ -e "$p" ] || continue
	name=$(basename "$p")
	if [ -x "$prefix/bin/$name" ] && cmp -s "$p" "$prefix/bin/$name"; then
		t_ok "$name installed in PREFIX/bin"
	else
		t_not_ok "$name installed in PREFIX/bin" "missing or different: $prefix/bin/$name"
	fi
done
# ...and nothing else: no test programs, no library.
extra=$(cd "$prefix/bin" 2>/dev/null && ls | grep -v '^titan-' || true)
if [ -z "$extra" ]; then t_ok "PREFIX/bin holds only titan programs"; else t_not_ok "PREFIX/bin holds only titan programs" "$extra"; fi

# DESTDIR stages under another root, for packagers.
if $build install DESTDIR="$TMP/stage" PREFIX=/usr >"$TMP/stage.log" 2>&1 &&
	[ -f "$TMP/stage/usr/share/man/man5/titan-formats.5" ]; then
	t_ok "make install DESTDIR=dir PREFIX=/usr stages under dir"
else
	t_not_ok "make install DESTDIR=dir PREFIX=/usr stages under dir" "$(tail -3 "$TMP/stage.log")"
fi
t_done
