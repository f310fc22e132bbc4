#!/bin/sh
# What a start of titan-train loads: alone (no launcher) it starts no MPI
# (lib/comm/solo.c: MPI_Init alone costs 0.2 s), and on the CPU backend it
# loads no cuBLASLt (lib/gpu/cublaslt.c: linked, it costs 60 ms).  Under
# mpirun it does start MPI, which shows the check can see MPI load.  The
# dynamic linker's own record (LD_DEBUG=files) says which libraries were
# opened.  Start-up time is measured by scripts/bench/startup.sh.
. tests/lib.sh

TRAIN="$BIN/titan-train"
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1 NO_COLOR=1

t_random_shards "$TMP/data" 7 60 256 60 0.1
t_tiny_job "$TMP/job.toml" "$TMP/data" 1

# opened LOG NAME: whether the linker's record LOG.* opened a library NAME
opened() { cat "$1".* 2>/dev/null | grep -q "file=[^ ]*$2"; }

t_run "a one-process run" env LD_DEBUG=files LD_DEBUG_OUTPUT="$TMP/alone" "$TRAIN" \
	--config "$TMP/job.toml" --job.dump_folder "$TMP/out1" --threads 1
if ls "$TMP"/alone.* >/dev/null 2>&1 && ! opened "$TMP/alone" "mca_"; then
	t_ok "... starts no MPI (no Open MPI component loaded)"
else
	t_not_ok "... starts no MPI (no Open MPI component loaded)" \
		"$(cat "$TMP"/alone.* 2>/dev/null | grep -o 'file=[^ ]*mca_[^ ]*' | head -3)"
fi
if opened "$TMP/alone" "libcublasLt"; then
	t_not_ok "... loads no cuBLASLt on the CPU backend" "$(grep -h -o 'file=[^ ]*cublasLt[^ ]*' "$TMP"/alone.* | head -2)"
else
	t_ok "... loads no cuBLASLt on the CPU backend"
fi

t_fails "TITAN_COMM of another value than mpi is refused" 1 env TITAN_COMM=nccl "$TRAIN" \
	--config "$TMP/job.toml" --job.dump_folder "$TMP/out3" --threads 1
t_grep "... naming the variable" 'TITAN_COMM=nccl: the one value it takes is mpi' "$TMP/.err"

mpirun="mpirun --oversubscribe --bind-to none -np 2"
[ "$(id -u)" -ne 0 ] || mpirun="$mpirun --allow-run-as-root"
t_run "a run on 2 ranks" $mpirun env LD_DEBUG=files LD_DEBUG_OUTPUT="$TMP/ranks" "$TRAIN" \
	--config "$TMP/job.toml" --job.dump_folder "$TMP/out2" --threads 1
if opened "$TMP/ranks" "mca_"; then t_ok "... starts MPI"
else t_not_ok "... starts MPI" "$(ls "$TMP" | head)"; fi
t_done
