#!/bin/sh
# Ring attention across processes, over lib/comm: test_cp_mpi on 2, 3 and 4
# ranks (every rotate method and load balancer, the op against whole-sequence
# attention and the model against the whole model).
. tests/lib.sh
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
for np in 2 3 4; do
	t_on_ranks "ring attention equals whole-sequence attention" "$BUILD/tests/cp/test_cp_mpi" \
		"$np" '^cp \|^model\|^plan'
done
t_done
