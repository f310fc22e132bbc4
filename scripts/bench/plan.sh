#!/bin/sh
# make bench: a training step of a 100M Llama (dim 768, 12 layers, seq 256,
# 4 sequences a step) on this machine's CPU, one process with 2 threads
# against FSDP 2 (2 processes of 1 thread each, the same global batch), TP 2
# (2 x 1 thread) and CP 2 (2 x 1 thread, each on half of every sequence, ring
# attention by allgather and by alltoall).  Each figure is the median of PLAN_BENCH_STEPS steps
# (default 3) after a warm-up step; comm is the time the slowest rank was
# blocked in communication (waiting for a collective: FSDP's all-gathers and
# reduce-scatters, TP's, the loss and norm all-reduces), the rest compute
# (CP's ring waits inside the model's attention, so they count as compute).
# ratio = the 1-process step / the plan's step (above 1: the plan is faster).
# The load is printed first: on a shared machine the processes compete with
# other jobs for the 2 cores.
set -eu
: "${BUILD:=build}"
make -s "$BUILD/tests/plan/bench_plan" >&2
B="$BUILD/tests/plan/bench_plan"
steps=${PLAN_BENCH_STEPS:-3}
mpirun="mpirun --oversubscribe --bind-to none"
[ "$(id -u)" -ne 0 ] || mpirun="$mpirun --allow-run-as-root"
export OMP_WAIT_POLICY=passive

echo "load: $(uptime | sed 's/.*load average: //')   cores: $(nproc)"
printf "%-26s %9s %9s %9s %8s %10s %12s\n" plan step_s comm_s compute_s ratio tokens/s params/rank
one=$(OMP_NUM_THREADS=2 $mpirun -np 1 "$B" 2 "$steps" 4 256)
show() { # NAME LINE
	echo "$2" | awk -v name="$1" -v ref="$(echo "$one" | cut -d' ' -f4)" \
		'{ printf "%-26s %9.3f %9.3f %9.3f %8.2f %10.1f %12d\n", name, $4, $5, $4 - $5, ref / $4, $6, $7 }'
}
show "1 process x 2 threads" "$one"
show "FSDP 2: 2 proc x 1 thread" "$(OMP_NUM_THREADS=1 $mpirun -np 2 "$B" 1 "$steps" 4 256)"
show "TP 2: 2 proc x 1 thread" "$(OMP_NUM_THREADS=1 $mpirun -np 2 "$B" 1 "$steps" 4 256 2)"
show "CP 2 allgather: 2 x 1" "$(OMP_NUM_THREADS=1 $mpirun -np 2 "$B" 1 "$steps" 4 256 1 2)"
show "CP 2 alltoall: 2 x 1" "$(OMP_NUM_THREADS=1 $mpirun -np 2 "$B" 1 "$steps" 4 256 1 2 alltoall)"
