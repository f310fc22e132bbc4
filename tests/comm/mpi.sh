#!/bin/sh
# The cmocka programs of lib/comm and lib/mesh with several processes, on 2, 3
# and 4 ranks (run alone by run.sh, they test a world of one): test_comm
# (every collective against a float64 reference, byte counts, splits) and
# test_mesh (each mesh dimension's communicator holds the layout's ranks).
# Alone, run.sh's run tests the world of one without MPI (lib/comm/solo.c);
# TITAN_COMM=mpi runs test_comm on MPI's own world of one as well.
. tests/lib.sh

t_run "every collective is right on MPI's world of one" env TITAN_COMM=mpi \
	"$BUILD/tests/comm/test_comm"

for np in 2 3 4; do
	t_on_ranks "every collective is right" "$BUILD/tests/comm/test_comm" "$np"
	t_on_ranks "every mesh dimension's communicator is right" "$BUILD/tests/mesh/test_mesh" "$np"
done
t_done
