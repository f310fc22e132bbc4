#!/bin/sh
# Run every test: the cmocka programs given as arguments, the end-to-end scripts
# tests/*/*.sh (TAP lines "ok N name" / "not ok N name"), and the man page lint.
# Prints a line per test file and each failure, then one closing line
# "N passed, N failed[, N skipped]".
#
# Environment: BUILD, BIN (where the programs are), TITAN_TEST_FILTER (a substring
# of the test file names to run), TITAN_FIXTURES (default ../shared/fixtures),
# TITAN_TEST_TIMEOUT (seconds one test file may run, default 900, 1800 under
# the sanitizers: a hang fails that file instead of stalling CI),
# TITAN_TEST_JOBS (test files run at once,
# default 1: some end-to-end tests time kills and stalls, which load slows;
# .ci/run runs 2 (2 cores), the longest first (tests/slow.list);
# the report keeps the files' order either way), TITAN_TEST_EXEC (a command the
# cmocka programs run under, e.g. qemu-aarch64: make check-arm64),
# TITAN_TEST_SCRIPTS (the end-to-end scripts to run instead of tests/*/*.sh;
# tests/arm64/ runs only when named there).  A file named NAME@LEVEL is NAME
# run under TITAN_CPU_ISA=LEVEL (tests/isa.list).
set -u

# One test file, run by xargs: "run.sh --one NAME KIND PATH" (KIND is bin or sh)
# writes NAME's output, exit status and seconds into the log folder.
if [ "${1:-}" = --one ]; then
	out="$TITAN_TEST_LOG/$(echo "$2" | tr '/' '_').log"
	# NAME@LEVEL: the file again under TITAN_CPU_ISA=LEVEL (tests/isa.list)
	case "$2" in *@*) export TITAN_CPU_ISA="${2##*@}" ;; esac
	start=$(date +%s)
	if [ "$3" = sh ]; then
		timeout -k 10 "$TITAN_TEST_TIMEOUT_S" sh "$4" >"$out" 2>&1
	else
		# shellcheck disable=SC2086
		timeout -k 10 "$TITAN_TEST_TIMEOUT_S" ${TITAN_TEST_EXEC:-} "$4" >"$out" 2>&1
	fi
	rc=$?
	[ "$rc" -eq 124 ] && echo "not ok - $2 timed out after ${TITAN_TEST_TIMEOUT_S}s" >>"$out"
	echo "$rc $(($(date +%s) - start))" >"$out.status"
	exit 0
fi

: "${BUILD:=build}" "${BIN:=bin}"
ROOT=$(pwd)
build_rel=$BUILD
export BIN="$ROOT/$BIN" BUILD="$ROOT/$BUILD" ROOT
export TITAN_FIXTURES="${TITAN_FIXTURES:-$ROOT/../shared/fixtures}"
filter="${TITAN_TEST_FILTER:-}"
# (tests/fluxtrain/train.sh took 800 s under ASan on a 2-core AVX2 Zen)
[ "${SAN:-0}" = 1 ] && timeout_default=1800 || timeout_default=900
export TITAN_TEST_TIMEOUT_S="${TITAN_TEST_TIMEOUT:-$timeout_default}"
jobs="${TITAN_TEST_JOBS:-1}"
# Sanitizer builds: CUDA's runtime needs the shadow gap unprotected; stop at the
# first UBSan report with a stack.  Clearing the shadow of a large region
# writes zeros instead of handing the pages back (clear_shadow_mmap_threshold,
# 1 TiB): unmapped shadow pages fault in again at the next poisoning, and a
# flux-tiny run of 12 steps took a sixth fewer page faults.  (Plain builds
# ignore these.)
export ASAN_OPTIONS="${ASAN_OPTIONS:-protect_shadow_gap=0:detect_leaks=1:abort_on_error=0:clear_shadow_mmap_threshold=1099511627776}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$ROOT/tests/lsan.supp}"
export TITAN_TEST_LOG="$BUILD/test-logs"
log=$TITAN_TEST_LOG
mkdir -p "$log"

# The test files, in order: "NAME KIND PATH" a line.
# This run's own lists (another run.sh over the same build, say a filtered
# one, must not truncate the file this run's xargs is still reading).
list="$log/.list.$$"
order="$log/.order.$$"
trap 'rm -f "$list" "$list.isa" "$order"' EXIT
: >"$list"
for t in "$@"; do
	rel=${t#"$build_rel"/} # tests/core/test_json: the filter ignores the build folder
	case "$rel" in *"$filter"*) echo "$rel bin $t" >>"$list" ;; esac
done
for s in ${TITAN_TEST_SCRIPTS:-tests/*/*.sh}; do
	[ -e "$s" ] || continue
	case "$s" in tests/lib.sh|tests/run.sh|tests/man_lint.sh) continue ;; esac
	[ -z "${TITAN_TEST_SCRIPTS:-}" ] && case "$s" in tests/arm64/*) continue ;; esac
	case "$s" in *"$filter"*) echo "$s sh $s" >>"$list" ;; esac
done
if { [ -z "$filter" ] || [ "$filter" = man ]; } && [ -z "${TITAN_TEST_SCRIPTS:-}" ]; then
	echo "man-lint sh tests/man_lint.sh" >>"$list"
fi

# The files of tests/isa.list run a second time at a lower level of
# core/cpu_isa, so that every machine tests two paths: where the processor has
# AVX-512, at avx2 (the portable bf16 GEMMs, the x86-64-v3 kernels); where it
# has AVX2 only, at baseline (the baseline kernels); on aarch64, at baseline
# (the NEON kernels where the processor has SVE, the table CRC32C).  A level
# the processor lacks is refused by every titan program, which is how this
# asks; a TITAN_CPU_ISA already set stands for the processor
# (TITAN_CPU_ISA=avx2 make check tests as an AVX2 machine would).  Under the
# sanitizers only the unit programs run again (the end-to-end files are the
# slowest there, and the same code).
isa_ok() { TITAN_CPU_ISA=$1 "$BIN/titan-shard" --version >/dev/null 2>&1; }
alt=""
case "${TITAN_CPU_ISA:-native}" in
native)
	if isa_ok avx512; then
		alt=avx2
	elif isa_ok avx2 || isa_ok crc; then
		alt=baseline
	fi
	;;
amx | avx512_bf16 | avx512) alt=avx2 ;;
avx2 | v2 | sve | crc) alt=baseline ;;
esac
if [ -n "$alt" ] && [ -f tests/isa.list ]; then
	grep -v '^#' tests/isa.list | while read -r t; do
		case "$t" in *.sh) [ "${SAN:-0}" = 1 ] && continue ;; esac
		grep "^$t " "$list" | sed "s|^$t |$t@$alt |"
	done >"$list.isa"
	cat "$list.isa" >>"$list"
fi

while read -r name _ _; do
	rm -f "$log/$(echo "$name" | tr '/' '_').log.status"
done <"$list"
# With several jobs, the longest files start first so that the jobs end
# together (tests/slow.list, longest first: a few minutes saved in CI).
: >"$order"
if [ "$jobs" -gt 1 ] && [ -f tests/slow.list ]; then
	grep -v '^#' tests/slow.list | while read -r slow; do
		grep -e "^$slow " -e "^$slow@[a-z0-9_]* " "$list"
	done >"$order"
fi
grep -v -x -F -f "$order" "$list" >>"$order"
xargs -P "$jobs" -L 1 sh tests/run.sh --one <"$order"

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

report() { # name: count its log, say pass or FAIL
	name=$1
	out="$log/$(echo "$name" | tr '/' '_').log"
	if [ -f "$out.status" ]; then
		read -r rc secs <"$out.status"
	else
		rc=1 secs=0
		echo "not ok - $name did not run" >>"$out"
	fi
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
		echo "FAIL $name (${secs}s), log: $out"
		grep -e '^not ok' -e '\[  FAILED  \]' -e 'ERROR' -e 'runtime error' -e 'Sanitizer' "$out" | head -20
	else
		echo "pass $name (${secs}s)"
	fi
	grep -i '# *skip' "$out" | sed 's/^/    /' | head -5
}

while read -r name _ _; do
	report "$name"
done <"$list"

echo
[ -n "$failures" ] && echo "failed:$failures"
if [ "$skipped" -gt 0 ]; then
	echo "$passed passed, $failed failed, $skipped skipped"
else
	echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
