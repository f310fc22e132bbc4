#!/bin/sh
# Every CPU op on aarch64 against the same op on this x86-64 machine, bit for
# bit (make check-arm64; scripts/arm64/check.sh).  test_backend_isa's workload
# (33 op outputs a type, odd sizes, float32 and bf16) runs on both and writes
# a CRC32C an output (TITAN_ISA_DIGESTS).  Every op that is titan's own
# arithmetic must match: the same C, no contraction, fixed reduction orders.
# The ones that multiply through OpenBLAS's sgemm (matmul, attention's QK^T
# and PV blocks and their gradients) may not: OpenBLAS picks its kernel per
# processor, each summing a dot product in its own order; tests/arm64/
# pipeline.sh bounds what that does to training.  Then the SVE build is run
# at three vector lengths (128, 256, 512 bits) against the NEON build.
. tests/lib.sh

native=$ROOT/build/tests/backend/test_backend_isa
arm=$BUILD/tests/backend/test_backend_isa
SYSROOT=$BUILD/sysroot/root
if [ ! -x "$native" ]; then
	t_not_ok "the host's test_backend_isa is built" "no $native (make check-arm64 builds it)"
	t_done
fi
TITAN_ISA_DIGESTS=$TMP/x86.txt "$native" >"$TMP/x86.log" 2>&1 ||
	t_not_ok "test_backend_isa on x86-64" "$(tail -5 "$TMP/x86.log")"
TITAN_ISA_DIGESTS=$TMP/arm.txt qemu-aarch64 -L "$SYSROOT" "$arm" >"$TMP/arm.log" 2>&1 ||
	t_not_ok "test_backend_isa on aarch64" "$(tail -5 "$TMP/arm.log")"
if [ "$(wc -l <"$TMP/x86.txt")" -ne "$(wc -l <"$TMP/arm.txt")" ]; then
	t_not_ok "the same op outputs on both" "$(wc -l <"$TMP/x86.txt") vs $(wc -l <"$TMP/arm.txt")"
	t_done
fi
paste -d ' ' "$TMP/x86.txt" "$TMP/arm.txt" >"$TMP/both.txt"
# type name crc bytes | type name crc bytes
own=$(awk '$2 !~ /^(matmul|attention)/' "$TMP/both.txt" | wc -l)
awk '$2 !~ /^(matmul|attention)/ && ($3 != $7 || $4 != $8) { print $1, $2 }' "$TMP/both.txt" >"$TMP/differ"
if [ -s "$TMP/differ" ]; then
	t_not_ok "titan's own ops give x86-64's bits on aarch64" "differ: $(tr '\n' ',' <"$TMP/differ")"
else
	t_ok "titan's own ops give x86-64's bits on aarch64 ($own op outputs, float32 and bf16)"
fi
blas=$(awk '$2 ~ /^(matmul|attention)/' "$TMP/both.txt" | wc -l)
same=$(awk '$2 ~ /^(matmul|attention)/ && $3 == $7' "$TMP/both.txt" | wc -l)
echo "# through OpenBLAS's sgemm: $same of $blas outputs identical (the rest summed in another order)"

for vl in 16 32 64; do
	QEMU_CPU="max,sve-default-vector-length=$vl" qemu-aarch64 -L "$SYSROOT" "$arm" >"$TMP/vl.log" 2>&1
	rc=$?
	line=$(grep -c 'build vs baseline.*33 of 33' "$TMP/vl.log")
	if [ "$rc" -eq 0 ] && [ "$line" -eq 2 ]; then
		t_ok "the SVE build gives the NEON build's bits at $((vl * 8))-bit vectors"
	else
		t_not_ok "the SVE build gives the NEON build's bits at $((vl * 8))-bit vectors" \
			"$(grep -e 'differs' -e 'build vs' -e FAILED "$TMP/vl.log" | head -5)"
	fi
done
t_done
