#!/bin/sh
# The kernels of tests/gpu/emu.sh again, built with ThreadSanitizer: each
# thread of a block is a fiber TSan tracks as a thread, ordered only by
# __syncthreads and __syncwarp (tests/emu/emu.cc), so a race between the
# threads of a block (a missing barrier, threads writing one place) fails.
# (tests/gpu/emu_mutants.sh holds it to finding one.)
. tests/lib.sh

emu=$ROOT/build/emu/tsan
t_need_emu "the kernels on the CUDA emulator under TSan"
export OMP_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1 exitcode=66"
# The highest-numbered threads first: the other order from emu.sh's run.
export EMU_SCHEDULE=high
for t in test_gpu_ops test_gpu_launch test_gpu_attention; do
	echo "# $t on the emulator (TSan)"
	if "$emu/$t"; then t_ok "$t under TSan, no race"; else t_not_ok "$t under TSan" "status $?"; fi
done
t_done
