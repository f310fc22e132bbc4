#!/bin/sh
# Ring attention across processes, over lib/comm: test_cp_mpi on 2, 3 and 4
# ranks (every rotate method and load balancer, the op against whole-sequence
# attention and the model against the whole model), and the planner's peak
# and cp bytes for CP plans (CP over every rank; CP 2 x TP 2 on 4) against
# the plan's measured ones (the peak's error printed).
. tests/lib.sh
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
for np in 2 3 4; do
	t_on_ranks "ring attention equals whole-sequence attention" "$BUILD/tests/cp/test_cp_mpi" \
		"$np" '^cp \|^model\|^docs\|^plan'
done
t_done
