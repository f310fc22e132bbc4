#!/bin/sh
# The cmocka programs of lib/comm and lib/mesh with several processes, on 2, 3
# and 4 ranks (run alone by run.sh, they test a world of one): test_comm
# (every collective against a float64 reference, byte counts, splits) and
# test_mesh (each mesh dimension's communicator holds the layout's ranks).
. tests/lib.sh

# on_ranks NAME PROGRAM NP: every rank's cmocka run passes
on_ranks() {
	log=$TMP/$(basename "$2")-$3.log
	$MPIRUN -np "$3" "$2" >"$log" 2>&1
	rc=$?
	passed=$(grep -c '^\[  PASSED  \]' "$log")
	if [ "$rc" -eq 0 ] && [ "$passed" -eq "$3" ] && ! grep -q '^\[  FAILED  \]' "$log"; then
		t_ok "$1 on each of $3 ranks"
	else
		t_not_ok "$1 on each of $3 ranks" \
			"mpirun exit $rc, $passed of $3 ranks passed: $(grep -e FAILED -e ERROR -e rank "$log" | head -20)"
	fi
}

for np in 2 3 4; do
	on_ranks "every collective is right" "$BUILD/tests/comm/test_comm" "$np"
	on_ranks "every mesh dimension's communicator is right" "$BUILD/tests/mesh/test_mesh" "$np"
done
t_done
