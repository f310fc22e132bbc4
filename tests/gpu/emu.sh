#!/bin/sh
# Every CUDA kernel executed without a GPU: the GPU tests that call the
# kernels' launchers (test_gpu_ops, test_gpu_launch, test_gpu_attention), each
# against the CPU backend's float64 ops, linked with kernels/*.cu built as host
# C++ for the emulator of tests/emu/ under ASan + UBSan (out-of-bounds and
# misaligned vector accesses) and gcov; then the share of each kernel file's
# lines they executed, which must stay at 90 % or more.  make check builds it
# where CUDA's headers are (EMU=1); under SAN=1 it has run already.
. tests/lib.sh

emu=$ROOT/build/emu/asan
if [ "${SAN:-0}" = 1 ]; then
	t_skip "the kernels on the CUDA emulator" "make check runs them, under ASan"
	t_done
fi
if [ ! -x "$emu/test_gpu_ops" ]; then
	why="not built: no CUDA headers (CUDA_HOME); make emu"
	if [ "${CI:-}" = true ]; then t_not_ok "the kernels on the CUDA emulator" "$why"; else
		t_skip "the kernels on the CUDA emulator" "$why"; fi
	t_done
fi

rm -f "$emu"/kernels/*.gcda
# The references are small; OpenMP's spinning threads would only take the core.
export OMP_NUM_THREADS=1
for t in test_gpu_ops test_gpu_launch test_gpu_attention; do
	echo "# $t on the emulator (ASan + UBSan)"
	# its cmocka lines are counted by tests/run.sh
	if "$emu/$t"; then t_ok "$t on the emulator"; else t_not_ok "$t on the emulator" "status $?"; fi
done

# gcov: one "File 'kernels/x.cu'" / "Lines executed:P% of N" pair per file.
(cd "$ROOT" && gcov -n -o "$emu/kernels" "$emu"/kernels/*.gcda 2>/dev/null) |
	awk '/^File .kernels\//{f=$2; gsub(/\047/, "", f); getline; sub(/Lines executed:/, ""); print f, $1, $3}' |
	sort -u >"$TMP/cov"
for k in kernels/*.cu; do
	line=$(grep "^$k " "$TMP/cov")
	pct=$(echo "$line" | awk '{sub(/%/, "", $2); print $2}')
	echo "# coverage: $k ${pct:-0}% of $(echo "$line" | awk '{print $3}') lines"
	if awk -v p="${pct:-0}" 'BEGIN { exit !(p >= 90) }'; then
		t_ok "$k: ${pct}% of its lines ran on the emulator"
	else
		t_not_ok "$k: ${pct:-0}% of its lines ran on the emulator (90 % wanted)"
	fi
done
t_done
