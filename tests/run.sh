#!/bin/sh
# Run every test: the cmocka programs given as arguments, the end-to-end scripts
# tests/*/*.sh (TAP lines "ok N name" / "not ok N name"), and the man page lint.
# Prints each failure, then one closing line "N passed, N failed[, N skipped]".
#
# Environment: BUILD, BIN (where the programs are), TITAN_TEST_FILTER (a substring
# of the test file names to run), TITAN_FIXTURES (default ../shared/fixtures),
# TITAN_TEST_TIMEOUT (seconds one test file may run, default 900: a hang fails
# that file instead of stalling CI).
set -u
: "${BUILD:=build}" "${BIN:=bin}"
ROOT=$(pwd)
build_rel=$BUILD
export BIN="$ROOT/$BIN" BUILD="$ROOT/$BUILD" ROOT
export TITAN_FIXTURES="${TITAN_FIXTURES:-$ROOT/../shared/fixtures}"
filter="${TITAN_TEST_FILTER:-}"
timeout_s="${TITAN_TEST_TIMEOUT:-900}"
# Sanitizer builds: CUDA's runtime needs the shadow gap unprotected; stop at the
# first UBSan report with a stack.  (Plain builds ignore these.)
export ASAN_OPTIONS="${ASAN_OPTIONS:-protect_shadow_gap=0:detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
log="$BUILD/test-logs"
mkdir -p "$log"

passed=0 failed=0 skipped=0
failures=""

count() { # file -> adds TAP / cmocka counts
	p=$(grep -c '^ok ' "$1")
	s=$(grep -c '^ok .*# *[Ss][Kk][Ii][Pp]' "$1")
	f=$(grep -c '^not ok ' "$1")
	cp=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$1" | awk '{s+=$1} END {print s+0}')
	cf=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$1" | awk '{s+=$1} END {print s+0}')
	cs=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$1" | awk '{s+=$1} END {print s+0}')
	passed=$((passed + p - s + cp))
	skipped=$((skipped + s + cs))
	failed=$((failed + f + cf))
}

run_one() { # name, command...
	name=$1; shift
	out="$log/$(echo "$name" | tr '/' '_').log"
	start=$(date +%s)
	timeout -k 10 "$timeout_s" "$@" >"$out" 2>&1
	rc=$?
	[ "$rc" -eq 124 ] && echo "not ok - $name timed out after ${timeout_s}s" >>"$out"
	end=$(date +%s)
	before=$failed
	count "$out"
	ran=$(grep -c -e '^ok ' -e '^not ok ' -e '^\[  PASSED  \]' -e '^\[  FAILED  \]' "$out")
	if [ "$rc" -ne 0 ] && [ "$failed" -eq "$before" ]; then
		failed=$((failed + 1)) # crashed or exited non-zero without saying why
		echo "not ok - $name exited with status $rc" >>"$out"
	elif [ "$ran" -eq 0 ]; then
		failed=$((failed + 1))
		echo "not ok - $name ran no test" >>"$out"
	fi
	if [ "$failed" -ne "$before" ]; then
		failures="$failures $name"
		echo "FAIL $name ($((end - start))s), log: $out"
		grep -e '^not ok' -e '\[  FAILED  \]' -e 'ERROR' -e 'runtime error' -e 'Sanitizer' "$out" | head -20
	else
		echo "pass $name ($((end - start))s)"
	fi
	grep -i '# *skip' "$out" | sed 's/^/    /' | head -5
}

for t in "$@"; do
	rel=${t#"$build_rel"/} # tests/core/test_json: the filter ignores the build folder
	case "$rel" in *"$filter"*) ;; *) continue ;; esac
	run_one "$rel" "$t"
done

for s in tests/*/*.sh; do
	[ -e "$s" ] || continue
	case "$s" in tests/lib.sh|tests/run.sh) continue ;; esac
	case "$s" in *"$filter"*) ;; *) continue ;; esac
	run_one "$s" sh "$s"
done

if [ -z "$filter" ] || [ "$filter" = man ]; then
	run_one "man-lint" sh tests/man_lint.sh
fi

echo
[ -n "$failures" ] && echo "failed:$failures"
if [ "$skipped" -gt 0 ]; then
	echo "$passed passed, $failed failed, $skipped skipped"
else
	echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
