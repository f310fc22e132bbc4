#!/bin/sh
# The GPU check's comm stage (issue 24, item 16) as far as a machine without a
# GPU can run it: scripts/gpu/comm_check.sh on this build's comm tests, the
# NCCL test saying it skips and 2 ranks launched through MPIRUN; and the
# wiring that makes it run on a fresh GPU machine: check.sh hands it the
# carried build and mpirun (its own GPU_CHECK build has no comm tests),
# prepare.sh carries those tests and openmpi-bin, selftest.sh hides the
# system's Open MPI programs and runs the stage.  A few seconds.
. tests/lib.sh

if [ -n "$(nvidia-smi -L 2>/dev/null)" ]; then
	t_skip "comm_check.sh without a GPU" "a GPU is here: check.sh's comm stage runs it"
elif [ ! -x "$BUILD/tests/comm/test_comm_nccl" ] || [ ! -x "$BUILD/tests/comm/bench_comm" ]; then
	t_skip "comm_check.sh without a GPU" "no comm tests in $BUILD (a GPU_CHECK build)"
elif ! command -v mpirun >/dev/null; then
	t_skip "comm_check.sh without a GPU" "no mpirun"
else
	if BUILD=$BUILD MPIRUN=mpirun OUT=$TMP/comm sh scripts/gpu/comm_check.sh >"$TMP/log" 2>&1; then
		t_ok "comm_check.sh passes without a GPU (the NCCL test skips, 2 ranks launch)"
	else
		t_not_ok "comm_check.sh passes without a GPU (the NCCL test skips, 2 ranks launch)" \
			"$(tail -8 "$TMP/log")"
	fi
	if BUILD=$TMP/nowhere sh scripts/gpu/comm_check.sh >"$TMP/log2" 2>&1; then
		t_not_ok "comm_check.sh refuses a BUILD without the comm tests" "it passed"
	else
		t_grep "comm_check.sh refuses a BUILD without the comm tests" "no .*tests/comm/test_comm_nccl" \
			"$TMP/log2"
	fi
fi
t_grep "check.sh runs comm_check.sh on the carried build and mpirun" \
	'stage comm [0-9]* env BUILD="\$deps/build" MPIRUN="\$mpirun_carried" sh scripts/gpu/comm_check.sh' \
	scripts/gpu/check.sh
# the comm stage comes before --build-only's exit, so selftest.sh runs it
awk '/stage comm /{c=NR} /if \[ "\$build_only" = 1 \]/{b=NR} END{exit !(c && b && c < b)}' \
	scripts/gpu/check.sh && t_ok "check.sh --build-only (selftest.sh) runs the comm stage" ||
	t_not_ok "check.sh --build-only (selftest.sh) runs the comm stage" "the stage comes after its exit"
t_grep "prepare.sh carries openmpi-bin (mpirun, orted)" '^	openmpi-bin ' scripts/gpu/prepare.sh
t_grep "prepare.sh carries the comm tests" 'build/tests/comm/bench_comm' scripts/gpu/prepare.sh
t_grep "selftest.sh hides the system's mpirun and orted" 'for prog in mpirun mpiexec orterun orted' \
	scripts/gpu/selftest.sh
t_done
