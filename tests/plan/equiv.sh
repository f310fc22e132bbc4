#!/bin/sh
# Every parallel plan trains as the single process does (test_plan under
# mpirun, one run per plan): 5 steps of a small Llama, per-step loss and grad
# norm and the final parameters within the tolerances of test_plan.c, and the
# bytes each rank sends on every mesh dimension equal to titan-train(1)'s
# formula.  Each line: the plan (TITAN_PLAN_TEST), its ranks.  prec=fsdp:
# bf16 parameters and activations, float32 reduce, on both sides.
. tests/lib.sh

T=$BUILD/tests/plan/test_plan
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive

plan() {
	np=$1
	shift
	log=$TMP/plan.log
	t0=$(date +%s)
	TITAN_PLAN_TEST="$*" $MPIRUN -np "$np" "$T" >"$log" 2>&1
	rc=$?
	secs=$(($(date +%s) - t0))
	passed=$(grep -c '^\[  PASSED  \]' "$log")
	if [ "$rc" -eq 0 ] && [ "$passed" -eq "$np" ]; then
		t_ok "$* on $np ranks (${secs}s): $(grep -h 'worst differences' "$log" | sed 's/.*: worst/worst/')"
	else
		t_not_ok "$* on $np ranks" "exit $rc: $(grep -e ERROR -e FAILED -e rank "$log" | head -12)"
	fi
}

plan 2 shard=2
plan 3 shard=3
plan 4 shard=4
plan 4 rep=2 shard=2
plan 2 rep=2 shard=1
plan 2 shard=2 reshard=always accum=2
plan 2 shard=2 reshard=never accum=3
plan 2 tp=2
plan 2 tp=2 lp=0
plan 2 tp=2 async=1 accum=2
plan 2 tp=2 ac=full
plan 2 tp=2 async=1 ac=op
plan 4 shard=2 tp=2 accum=2
plan 4 shard=2 tp=2 async=1 reshard=always ac=sel2
# FSDP2's mixed precision (mixed_precision_param bf16, reduce float32) against
# one process in the same mode, 200 steps (issue 12's bound; test_plan.c)
plan 2 shard=2 prec=fsdp steps=200
plan 2 shard=2 prec=fsdp accum=2 reshard=always
t_done
