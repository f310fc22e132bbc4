#!/bin/sh
# The cmocka programs of lib/comm and lib/mesh with several processes, on 2, 3
# and 4 ranks (run alone by run.sh, they test a world of one): test_comm
# (every collective against a float64 reference, byte counts, splits) and
# test_mesh (each mesh dimension's communicator holds the layout's ranks).
. tests/lib.sh

for np in 2 3 4; do
	t_on_ranks "every collective is right" "$BUILD/tests/comm/test_comm" "$np"
	t_on_ranks "every mesh dimension's communicator is right" "$BUILD/tests/mesh/test_mesh" "$np"
done
t_done
