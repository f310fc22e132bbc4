#!/bin/sh
# lib/fluxfsdp's test program on 2, 3 and 4 ranks (run alone by run.sh it
# tests a world of one): the sharded Flux transformer trains as the whole
# model with its gradients all-reduced, each rank holding its rows.
. tests/lib.sh
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive

for np in 2 3 4; do
	t_on_ranks "the sharded Flux model trains as the whole one" \
		"$BUILD/tests/fluxfsdp/test_fluxfsdp" "$np"
done
t_done
