#!/bin/sh
# The emulator catches broken kernels: copies of real kernels, each with one
# deliberate bug, built and run as tests/gpu/emu.sh and emu_tsan.sh run the
# real ones; every one must fail (and say why).
#   nosync    kernels/float8.cu's transposed cast without its __syncthreads:
#             threads read tile entries others have not written yet
#   nosync    the same under TSan: reported as a data race
#   causal    lib/gpu/att_mask.h's causal mask one key too wide
#   shfl      kernels/attention.cu shuffling with a half-warp mask
#   warpsync  kernels/t5_attention.cu without its __syncwarp: lanes score
#             with query elements other lanes have not staged yet (and
#             under TSan, a data race)
. tests/lib.sh

t_need_emu "broken kernels fail on the emulator"
mk() { make -s --no-print-directory -C "$ROOT" "emu-print-$1"; }
kflags=$(mk EMU_KFLAGS) ldlibs=$(mk EMU_LDLIBS) libtitan=$(mk LIBTITAN)
case $libtitan in /*) ;; *) libtitan=$ROOT/$libtitan ;; esac
cxx=$(mk CXX) cc=$(mk CC) ldflags=$(mk LDFLAGS)
export OMP_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1 exitcode=66"
cd "$ROOT" || exit 1
# The rewritten sources the mutants start from (make keeps them, but a build
# folder cleaned by hand may have lost them while the objects stayed).
src=$(mk EMU_DIR)/src
# shellcheck disable=SC2046
make -s --no-print-directory $(for f in kernels/attention.cu $(mk EMU_CUH); do echo "$src/$f"; done)

# mutant NAME BUILD(asan|tsan) FILE SED TEST EXPECT: FILE with SED (sed -E) applied,
# built into TEST in place of the real one; TEST's first failure must match
# the extended regular expression EXPECT.
mutant() {
	name=$1 kind=$2 file=$3 expr=$4 test=$5 expect=$6
	m=$TMP/$name.$kind
	mkdir -p "$m/inc/gpu"
	kernel=$file incl=""
	case $file in
	kernels/*) sed -E -e "$expr" "$file" >"$m/src.cu" && sh tests/emu/cu2cpp "$m/src.cu" "$m/k.cu" ;;
	*) # a header: the real (rewritten) kernel compiled against the broken copy
		sed -E -e "$expr" "$file" >"$m/inc/gpu/$(basename "$file")"
		kernel=kernels/attention.cu incl="-I$m/inc"
		cp "$src/$kernel" "$m/k.cu" ;;
	esac
	if cmp -s "$file" "$m/src.cu" 2>/dev/null || cmp -s "$file" "$m/inc/gpu/$(basename "$file")" 2>/dev/null; then
		t_not_ok "mutant $name: the change '$expr' applies to $file"
		return
	fi
	san=$(mk "EMU_SAN_$kind") cov=$(mk "EMU_COV_$kind")
	# The broken kernel itself: TSan must see its accesses; under ASan the
	# emulator's checks and the results find the bug, so it builds plain
	# (twice as fast) and links with the rest of the ASan build.
	ksan=$san
	[ "$kind" = asan ] && ksan=""
	objs=$(mk "EMU_OBJ_$kind" | tr ' ' '\n' | grep -v "/kernels/$(basename "$kernel" .cu)\\.o$")
	# shellcheck disable=SC2086 # the flags are lists
	if ! $cxx $incl $kflags $ksan -x c++ -c "$m/k.cu" -o "$m/k.o" 2>"$m/cc.log" ||
		! $cc $ldflags $san $cov -o "$m/test" "$BUILD/tests/gpu/$test.o" "$m/k.o" $objs "$libtitan" \
			-Wl,--gc-sections $ldlibs 2>>"$m/cc.log"; then
		t_not_ok "mutant $name ($kind) builds" "$(head -3 "$m/cc.log")"
		return
	fi
	# the first sign of failure ends the run (the test dies on the closed pipe)
	# (gcov's counts go to $m, not beside the objects tests/gpu/emu.sh counts)
	first=$(GCOV_PREFIX=$m/gcov "$m/test" 2>&1 | grep -m1 -E '^\[  (ERROR|FAILED) |ThreadSanitizer: data race|^emu: |AddressSanitizer')
	if echo "$first" | grep -qE "$expect"; then
		t_ok "mutant $name ($kind) fails: $(echo "$first" | cut -c1-220)"
	else
		t_not_ok "mutant $name ($kind) fails as expected ($expect)" "first sign: ${first:-none, it passed}"
	fi
}

sync='/__shared__ uint8_t tile/,/q\[j \* rows \+ i\]/ s/__syncthreads\(\);/(void)0;/'
mutant nosync asan kernels/float8.cu "$sync" test_gpu_launch '\[  ERROR   \]'
mutant nosync tsan kernels/float8.cu "$sync" test_gpu_launch 'ThreadSanitizer: data race'
mutant causal asan lib/gpu/att_mask.h 's/hi = p \+ 1;/hi = p + 2;/' test_gpu_attention '\[  ERROR   \]'
mutant shfl asan kernels/attention.cu '/^\t{3}float pj = __shfl_sync/ s/__shfl_sync\(0xffffffffu/__shfl_sync(0x0000ffffu/' \
	test_gpu_attention \
	'^emu: .*mask 0x0000ffff, which leaves it out'
warpsync='s/^\t__syncwarp\(\);/\t(void)0;/'
mutant warpsync asan kernels/t5_attention.cu "$warpsync" test_gpu_ops '\[  ERROR   \]'
mutant warpsync tsan kernels/t5_attention.cu "$warpsync" test_gpu_ops 'ThreadSanitizer: data race'
t_done
