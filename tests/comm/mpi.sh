#!/bin/sh
# lib/comm's MPI implementation with several processes: test_comm's cmocka
# tests (every collective against a float64 reference, byte counts, splits)
# on every rank of 2, 3 and 4 ranks.  (Run alone, run.sh tests a world of one.)
. tests/lib.sh

T=$BUILD/tests/comm/test_comm
for np in 2 3 4; do
	log=$TMP/np$np.log
	$MPIRUN -np "$np" "$T" >"$log" 2>&1
	rc=$?
	passed=$(grep -c '^\[  PASSED  \]' "$log")
	if [ "$rc" -eq 0 ] && [ "$passed" -eq "$np" ] && ! grep -q '^\[  FAILED  \]' "$log"; then
		t_ok "every collective is right on each of $np ranks"
	else
		t_not_ok "every collective is right on each of $np ranks" \
			"mpirun exit $rc, $passed of $np ranks passed: $(grep -e FAILED -e ERROR -e rank "$log" | head -20)"
	fi
done
t_done
