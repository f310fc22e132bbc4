#!/bin/sh
# The pipeline engine across processes, over lib/comm: test_pp_mpi on 2, 3
# and 4 ranks (each schedule's step against the plain model; ranks that built
# different schedules are refused, not hung).
. tests/lib.sh
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
for np in 2 3 4; do
	t_on_ranks "every pipeline schedule trains as the plain model" "$BUILD/tests/pp/test_pp_mpi" \
		"$np" '^pp '
done
t_done
