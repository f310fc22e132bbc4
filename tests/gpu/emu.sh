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
t_need_emu "the kernels on the CUDA emulator"

rm -f "$emu"/kernels/*.gcda
# The emulator's own promises first (launch limits, collectives, poison).
echo "# test_emu: the emulator"
if "$emu/test_emu"; then t_ok "the emulator's own test"; else t_not_ok "the emulator's own test"; fi
# The references are small; OpenMP's spinning threads would only take the core.
export OMP_NUM_THREADS=1
for t in test_gpu_ops test_gpu_launch test_gpu_attention; do
	echo "# $t on the emulator (ASan + UBSan)"
	# its cmocka lines are counted by tests/run.sh
	"$emu/$t" >"$TMP/$t.out" 2>&1
	rc=$?
	cat "$TMP/$t.out"
	if [ "$rc" -eq 0 ]; then t_ok "$t on the emulator"; else t_not_ok "$t on the emulator" "status $rc"; fi
done

# Each output's worst error against the CPU's float64 op over every case
# ("  rmsnorm y    bf16 rel err 1.2e-03 (bound ...)" lines; the output's
# name ends before a word that starts with a digit, a shape).
echo "# worst relative error per output and type, emulated kernels vs the CPU:"
cat "$TMP"/test_gpu_*.out |
	awk '/ (f32|bf16) +rel err /{for (i = 1; i < NF; i++) if ($i == "rel" && $(i + 1) == "err") break;
		k = $1; for (j = 2; j < i - 1 && $j !~ /^[0-9]/; j++) k = k " " $j; k = k " (" $(i - 1) ")";
		if (!(k in w) || $(i + 2) + 0 > w[k]) w[k] = $(i + 2) + 0}
		END {for (k in w) printf "#   %-52s %.2e\n", k, w[k]}' | sort

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
