#!/bin/sh
# The pipeline's bubble on the CPU: every schedule's step run by the engine
# over lib/comm on 2 processes (one per core; more would share cores and time
# the sharing), measured next to the schedule's formula and to its simulation
# with the op costs measured.  Environment: BENCH_STEPS (default 3),
# BENCH_MICROBATCHES (default 8).  The load of the machine is printed: the
# figures mean little on a busy one.
set -eu
BUILD=${BUILD:-build}
make -s "$BUILD/tests/pp/bench_pp" >&2
MPIRUN="mpirun --oversubscribe --bind-to none"
[ "$(id -u)" -eq 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
echo "load: $(uptime | sed 's/.*load average: //')"
OMP_NUM_THREADS=1 $MPIRUN -np 2 "$BUILD/tests/pp/bench_pp" "${BENCH_STEPS:-3}" "${BENCH_MICROBATCHES:-8}"
