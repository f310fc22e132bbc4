# Shell harness for end-to-end tests; source it from tests/<area>/*.sh.
#
#   . tests/lib.sh
#   t_run "name" cmd args...            ok when cmd exits 0
#   t_fails "name" STATUS cmd args...   ok when cmd exits with STATUS
#   t_same "name" FILE_A FILE_B         ok when the files are identical
#   t_grep "name" PATTERN FILE          ok when FILE has a line matching PATTERN
#   t_ok "name" / t_not_ok "name" "why" / t_skip "name" "why"
#   t_done                               at the end
#
# Output is TAP ("ok N name", "not ok N name") read by tests/run.sh.
# $BIN is the folder of the programs, $TMP a fresh folder removed at exit.
# Fixtures: `fx REL` prints the path of fixture REL, found in $TITAN_FIXTURES
# (default ../shared/fixtures) or else build/fixtures (make fixtures);
# `t_have REL` says whether it exists; `t_need_fixture REL...` ends the file as
# skipped when one is missing, `t_skip_fixture NAME REL` skips one test, both
# saying how to get it, and both fail instead under CI=true.

: "${BIN:=$(pwd)/bin}"
: "${TITAN_FIXTURES:=$(pwd)/../shared/fixtures}"
FIXTURES=$TITAN_FIXTURES
TMP=$(mktemp -d "${TMPDIR:-/tmp}/titan-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
# Compiled tokenizers go to the test's own folder, not the user's cache.
TITAN_TOK_CACHE=$TMP/tok-cache
export TITAN_TOK_CACHE
T_N=0
T_FAILED=0
export BIN FIXTURES TMP

# mpirun as the tests run it: as root too, more ranks than cores, unbound.
MPIRUN="mpirun --oversubscribe --bind-to none"
[ "$(id -u)" -eq 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
# mpirun for a job that every rank refuses (exits non-zero): mpirun kills the
# ranks still exiting once the first has, which can cut LeakSanitizer's scan
# at exit short, so these ranks skip it (single-process runs keep it).
MPIRUN_REFUSED="env ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 $MPIRUN"

t_ok() { T_N=$((T_N + 1)); echo "ok $T_N $1"; }
t_not_ok() {
	T_N=$((T_N + 1)); T_FAILED=$((T_FAILED + 1))
	echo "not ok $T_N $1"
	[ -n "${2:-}" ] && echo "$2" | sed 's/^/# /'
	return 0
}
t_skip() { T_N=$((T_N + 1)); echo "ok $T_N $1 # SKIP ${2:-}"; }

# t_skip_unless_ci NAME WHY: NAME skipped saying WHY, or under CI=true (where
# nothing may be missing) failed saying it.
t_skip_unless_ci() {
	if [ "${CI:-}" = true ]; then t_not_ok "$1" "$2"; else t_skip "$1" "$2"; fi
}

# With TITAN_TEST_TIMES=1, t_run and t_fails say how long their command took
# (a TAP comment), to find where a slow file's time goes.
t_clock() { [ -z "${TITAN_TEST_TIMES:-}" ] || date +%s.%N; }
t_took() {
	[ -n "${TITAN_TEST_TIMES:-}" ] && awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "# %.2f s\n", b - a }'
	return 0
}

t_run() {
	name=$1; shift
	t_t0=$(t_clock)
	if "$@" >"$TMP/.out" 2>"$TMP/.err"; then
		t_ok "$name"
	else
		t_not_ok "$name" "exit $?: $(tail -5 "$TMP/.err")"
	fi
	t_took "$t_t0"
}

t_fails() {
	name=$1; want=$2; shift 2
	t_t0=$(t_clock)
	"$@" >"$TMP/.out" 2>"$TMP/.err"
	rc=$?
	t_took "$t_t0"
	if [ "$rc" -eq "$want" ]; then
		t_ok "$name"
	else
		t_not_ok "$name" "exit $rc, wanted $want: $(tail -3 "$TMP/.err")"
	fi
}

t_same() {
	if cmp -s "$2" "$3"; then t_ok "$1"; else t_not_ok "$1" "$(cmp "$2" "$3" 2>&1 | head -3)"; fi
}

t_grep() {
	if grep -q -e "$2" "$3"; then t_ok "$1"; else t_not_ok "$1" "no line matches '$2' in $3: $(head -3 "$3")"; fi
}

fx() {
	for d in "$TITAN_FIXTURES" "${ROOT:-$(pwd)}/build/fixtures"; do
		[ -e "$d/$1" ] && { echo "$d/$1"; return 0; }
	done
	return 1
}
t_have() { fx "$1" >/dev/null; }
t_fixture_how() {
	case "$1" in
	tokenizers/llama3*) echo "HF_TOKEN=<token> make fixtures (gated Llama 3 files)" ;;
	*) echo "make deps && make fixtures" ;;
	esac
}
t_skip_fixture() {
	if [ "${CI:-}" = true ]; then
		t_not_ok "$1" "fixture $2 missing under CI=true: $(t_fixture_how "$2")"
	else
		t_skip "$1" "no fixture $2: $(t_fixture_how "$2")"
	fi
}
# t_need_disk GIB WHAT: GIB GiB free where the test writes (TMPDIR), else
# one check says so and the test ends: a SKIP, or a failure under CI=true
# (a full disk midway fails every later check without saying why).
t_need_disk() {
	free_kb=$(df -Pk "$TMP" | awk 'NR == 2 { print $4 }')
	[ "${free_kb:-0}" -ge $(($1 * 1024 * 1024)) ] && return 0
	t_skip_unless_ci "$1 GiB of disk" "$2 needs $1 GiB free in ${TMPDIR:-/tmp}, which has $((${free_kb:-0} / 1024 / 1024)) GiB (set TMPDIR)"
	t_done
}
# ranks_pass LOG PROGRAM NP [VAR=VALUE]: run the cmocka PROGRAM under mpirun
# on NP ranks (with VAR=VALUE in the environment), its output in LOG; true
# when every rank passed.  Leaves the exit status in rc and the ranks that
# passed in passed.
ranks_pass() {
	env ${4:+"$4"} $MPIRUN -np "$3" "$2" >"$1" 2>&1
	rc=$?
	passed=$(grep -c '^\[  PASSED  \]' "$1")
	[ "$rc" -eq 0 ] && [ "$passed" -eq "$3" ] && ! grep -q '^\[  FAILED  \]' "$1"
}

# t_on_ranks NAME PROGRAM NP [SHOW]: a cmocka PROGRAM under mpirun on NP ranks
# passes on every rank; lines of its output matching SHOW are echoed as
# comments.
t_on_ranks() {
	log=$TMP/$(basename "$2")-$3.log
	if ranks_pass "$log" "$2" "$3"; then
		t_ok "$1 on each of $3 ranks"
		[ -n "${4:-}" ] && grep -e "$4" "$log" | sed 's/^/# /'
	else
		t_not_ok "$1 on each of $3 ranks" \
			"mpirun exit $rc, $passed of $3 ranks passed: $(grep -e FAILED -e ERROR -e rank "$log" | head -20)"
	fi
	return 0
}

# t_mpi_cases NP PROGRAM VAR CASE|LABEL...: the cases (a program that runs
# its tests once per case of VAR, tests/support/case_batch.h) in one mpirun
# on NP ranks, one ok per case, each naming the batch's seconds and its
# "worst differences" line; a case passes when every rank passed its tests
# and none failed.  A batch whose mpirun fails after its cases passed (a leak
# found at exit) fails once more, so nothing found at the end is lost.
t_mpi_cases() {
	np=$1 prog=$2 var=$3
	shift 3
	list=
	for cl in "$@"; do list="$list${list:+;}${cl%%|*}"; done
	log=$TMP/mpi_cases.log
	t0=$(date +%s)
	env "$var=$list" $MPIRUN -np "$np" "$prog" >"$log" 2>&1
	rc=$?
	secs=$(($(date +%s) - t0))
	all_ok=1
	for cl in "$@"; do
		c=${cl%%|*} label=${cl#*|}
		n_ok=$(grep -F "[       OK ] " "$log" | grep -cF " [$c]")
		if [ "$n_ok" -ge "$np" ] && ! grep -F "[  FAILED  ] " "$log" | grep -qF " [$c]"; then
			t_ok "$label on $np ranks (batch of $#: ${secs}s): $(awk -v w="$c: worst differences" \
				'index($0, w) == 1 { sub(/.*: worst/, "worst"); print; exit }' "$log")"
		else
			all_ok=0
			t_not_ok "$label on $np ranks" "$n_ok of $np ranks passed (batch of $#, mpirun exit $rc): $(grep -F " [$c]" "$log" | grep -e FAILED -e ERROR | head -4; grep -e ERROR -e rank "$log" | grep -vF "[       OK ]" | head -8)"
		fi
	done
	[ "$rc" -eq 0 ] || [ "$all_ok" -eq 0 ] ||
		t_not_ok "the batch of $# on $np ranks ends well" "mpirun exit $rc after its cases: $(tail -12 "$log")"
}

# t_mpi_queue NP PROGRAM VAR CASE LABEL: CASE joins the batch of PROGRAM's
# cases on NP ranks, which t_mpi_flush (and t_done) runs with t_mpi_cases,
# the batches in the order of their first cases.
t_mpi_queue() {
	q=$TMP/.mpi-queue.$1
	if [ ! -f "$q" ]; then
		echo "$1" >>"$TMP/.mpi-queue-order"
		printf '%s\n%s\n' "$2" "$3" >"$q.key"
	fi
	printf '%s|%s\n' "$4" "$5" >>"$q"
}

t_mpi_flush() {
	[ -f "$TMP/.mpi-queue-order" ] || return 0
	for qn in $(cat "$TMP/.mpi-queue-order"); do
		q=$TMP/.mpi-queue.$qn
		old_ifs=$IFS
		IFS='
'
		set -f
		set -- $(cat "$q")
		set +f
		IFS=$old_ifs
		t_mpi_cases "$qn" "$(sed -n 1p "$q.key")" "$(sed -n 2p "$q.key")" "$@"
		rm -f "$q" "$q.key"
	done
	rm -f "$TMP/.mpi-queue-order"
}

t_need_fixture() {
	for f in "$@"; do
		t_have "$f" && continue
		t_skip_fixture "fixture $f present" "$f"
		t_done
	done
}

# t_random_shards DIR SEED DOCS VOCAB MAXLEN VALFRAC: DOCS documents of up to
# MAXLEN random ids below VOCAB (tests/shard/test_gen, seeded) into a titan-shard
# folder DIR; a test that cannot make them fails and ends.
t_random_shards() {
	gen="$BUILD/tests/shard/test_gen"
	if [ ! -x "$gen" ]; then
		t_not_ok "token stream generator built" "missing $gen"
		t_done
	fi
	"$gen" gen "$2" "$3" "$4" "$5" >"$TMP/.random.tts"
	t_run "random data set shards" "$BIN/titan-shard" -q --out "$1" --val-fraction "$6" \
		"$TMP/.random.tts"
}

# t_demo_data DIR: make demo's kind of corpus in little: six of Debian's
# fortune files, their documents (blank-line separated) interleaved in a fixed
# order so that every stretch of the stream mixes them, a 2048-id BPE trained
# on them as the demo does, and its tokens as titan-shard folder DIR (2% to
# validation); about a second.  Without the fortunes (make deps installs them)
# the test file ends: skipped, or failed under CI=true.
t_demo_data() {
	t_demo_corpus
	t_run "tokenizer trained on the demo corpus" "$BIN/titan-tokenize" train --vocab-size 2048 \
		--format text --split blank --add-eos -o "$TMP/.demo-tok" "$TMP/.demo.txt"
	"$BIN/titan-tokenize" -q -t "$TMP/.demo-tok" --format text --split blank --bos --eos \
		"$TMP/.demo.txt" | "$BIN/titan-shard" -q --out "$1" --val-fraction 0.02
	t_run "demo corpus sharded" "$BIN/titan-shard" info "$1"
}

# t_demo_corpus: t_demo_data's text alone, in $TMP/.demo.txt (the file ends,
# skipped or failed, without it).
t_demo_corpus() {
	fortunes=/usr/share/games/fortunes
	if [ ! -f "$fortunes/fortunes" ]; then
		if [ "${CI:-}" = true ]; then
			t_not_ok "demo corpus present" "no $fortunes/fortunes (make deps installs fortunes)"
		else
			t_skip "demo corpus present" "no $fortunes/fortunes: run make deps"
		fi
		t_done
	fi
	for f in fortunes computers science wisdom literature people; do
		sed 's/^%$//' "$fortunes/$f" | tr -d '\010\r'
		echo
	done | awk 'BEGIN { RS = ""; ORS = "\n\n" } { doc[NR] = $0 }
		END { for (i = 0; i < NR; i++) print doc[(i * 7919) % NR + 1] }' >"$TMP/.demo.txt"
}

# t_debugmodel_job FILE DATA STEPS: a titan-train config for debugmodel on the
# shards in DATA, batch 4 x 32, STEPS steps from seed 7, lr 2e-3 with 5 warmup
# steps and cosine decay (the job the precision tests compare runs of).
# t_relay_tap NAME PROGRAM [ARG...]: a test program that prints TAP lines of
# its own ("ok N what", "not ok N what", then "1..N" at its end): each line
# counted here, and a program that died before its end a failure.
t_relay_tap() {
	name=$1
	shift
	"$@" >"$TMP/tap.out" 2>"$TMP/tap.err"
	rc=$?
	while read -r line; do
		case $line in
		"ok "*) t_ok "${line#ok [0-9]* }" ;;
		"not ok "*) t_not_ok "${line#not ok [0-9]* }" ;;
		esac
	done <"$TMP/tap.out"
	grep -q '^1\.\.' "$TMP/tap.out" ||
		t_not_ok "$name ran to its end (status $rc)" "$(tail -5 "$TMP/tap.err")"
}

# t_losses METRICS FIRST LAST: the last record's loss of each step FIRST to
# LAST in a metrics.jsonl, one a line (a resumed run logs its steps again).
# t_kill_after PID DIR CKPT STEP: once DIR (a run's dump folder) holds the
# whole checkpoint of step CKPT and step STEP's metrics record (or PID ended,
# or 300 s passed), kill -9 PID and reap it.  PID is a child of this shell.
t_kill_after() {
	n=0
	while [ $n -lt 15000 ] && kill -0 "$1" 2>/dev/null; do
		[ -f "$2/checkpoint/step-$3/.metadata" ] &&
			grep -q "^{\"step\":$4," "$2/metrics.jsonl" 2>/dev/null && break
		sleep 0.02
		n=$((n + 1))
	done
	kill -9 "$1" 2>/dev/null
	wait "$1" 2>/dev/null
}

t_losses() {
	for s in $(seq "$2" "$3"); do
		grep "^{\"step\":$s,\"loss\"" "$1" | tail -1 | sed 's/.*"loss":\([^,]*\),.*/\1/'
	done
}

# t_tiny_job FILE DATA STEPS: the smallest debugmodel job over the titan-shard
# folder DATA (one sequence of 16 tokens a step), for tests of what happens
# around training (checkpoints, loading, folders); they append their own
# sections.
t_tiny_job() {
	cat >"$1" <<EOF
[model]
flavor = "debugmodel"
[training]
dataset_path = "$2"
local_batch_size = 1
seq_len = 16
steps = $3
EOF
}

t_debugmodel_job() {
	cat >"$1" <<EOF
[model]
flavor = "debugmodel"
[optimizer]
lr = 2e-3
[lr_scheduler]
warmup_steps = 5
decay_type = "cosine"
[training]
dataset_path = "$2"
local_batch_size = 4
seq_len = 32
steps = $3
[metrics]
log_freq = 10
[debug]
seed = 7
EOF
}

# t_need_emu WHAT: the CUDA emulator's builds (tests/emu/emu.mk) are there, or
# this file ends: skipped under SAN=1 (make check runs them, with their own
# sanitizers) and where CUDA's headers are missing (a failure under CI=true).
t_need_emu() {
	if [ "${SAN:-0}" = 1 ]; then
		t_skip "$1" "make check runs it, with the emulator's own sanitizers"
		t_done
	fi
	[ -x "$ROOT/build/emu/asan/test_gpu_ops" ] && [ -x "$ROOT/build/emu/tsan/test_gpu_ops" ] && return 0
	t_skip_unless_ci "$1" "the CUDA emulator is not built: no CUDA headers (CUDA_HOME); make emu"
	t_done
}

t_done() {
	t_mpi_flush
	echo "# $T_N tests, $T_FAILED failed"
	[ "$T_FAILED" -eq 0 ]
	exit $?
}
