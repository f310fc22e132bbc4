#!/bin/sh
# The CUDA side of the build: with nvcc, kernels/ compile to sm_90a machine code
# plus compute_90 PTX (for later GPUs to JIT); CUDA=0 builds and reports no GPU.
. tests/lib.sh

# u16/u32 little-endian at byte offset $2 of file $1
u16() { od -A n -t u2 -j "$2" -N 2 "$1" | tr -d ' '; }
u32() { od -A n -t u4 -j "$2" -N 4 "$1" | tr -d ' '; }

# "elf 90" / "ptx 90" for each entry of the object's fatbin (header: magic 0xBA55ED50,
# version, header size, total size; each entry: kind 1 PTX / 2 ELF, its header
# size, payload size, and the SM number at byte 28).
fatbin_entries() {
	objcopy -O binary --only-section=.nv_fatbin "$1" "$TMP/fb" || return 1
	[ "$(u32 "$TMP/fb" 0)" = 3126193488 ] || { echo "no fatbin magic"; return 1; }
	hdr=$(u16 "$TMP/fb" 6)
	end=$((hdr + $(u32 "$TMP/fb" 8)))
	off=$hdr
	while [ "$off" -lt "$end" ]; do
		kind=$(u16 "$TMP/fb" "$off")
		case "$kind" in 1) k=ptx ;; 2) k=elf ;; *) k="kind$kind" ;; esac
		echo "$k $(u32 "$TMP/fb" $((off + 28)))"
		off=$((off + $(u32 "$TMP/fb" $((off + 4))) + $(u32 "$TMP/fb" $((off + 8)))))
	done
}

root=$ROOT
if [ "${CUDA:-0}" = 1 ]; then
	obj=$BUILD/kernels/vecadd.o
	if [ -f "$obj" ]; then
		fatbin_entries "$obj" >"$TMP/entries" 2>&1
		t_grep "vecadd.o holds sm_90 machine code" '^elf 90$' "$TMP/entries"
		t_grep "vecadd.o holds compute_90 PTX" '^ptx 90$' "$TMP/entries"
		strings "$obj" >"$TMP/strings"
		t_grep "the machine code is for sm_90a (wgmma, TMA)" 'sm_90a' "$TMP/strings"
	else
		t_not_ok "vecadd.o built" "missing $obj"
	fi
	# The GPU module without CUDA (a whole CUDA=0 build is what CI does where
	# nvcc is absent): nothing of nvcc, and the GPU test says why it skips.
	unset MAKEFLAGS MFLAGS MAKELEVEL
	nb=$TMP/nocuda
	objs="$nb/lib/gpu/gpu.o $nb/lib/core/err.o $nb/tests/gpu/test_gpu.o"
	if make -C "$root" -j2 CUDA=0 SAN=0 BUILD="$nb" BIN="$nb/bin" $objs >"$TMP/make.log" 2>&1 &&
		cc -o "$nb/test_gpu" $objs -lcmocka >>"$TMP/make.log" 2>&1; then
		t_ok "make CUDA=0 builds the GPU module and its test"
		if grep -q -e nvcc -e TITAN_CUDA "$TMP/make.log"; then
			t_not_ok "CUDA=0 uses neither nvcc nor TITAN_CUDA" "$(grep -m2 -e nvcc -e TITAN_CUDA "$TMP/make.log")"
		else
			t_ok "CUDA=0 uses neither nvcc nor TITAN_CUDA"
		fi
		"$nb/test_gpu" >"$TMP/gpu.log" 2>&1
		t_grep "without CUDA the GPU tests skip, saying why" 'SKIP GPU test: built without CUDA' "$TMP/gpu.log"
	else
		t_not_ok "make CUDA=0 builds the GPU module and its test" "$(tail -5 "$TMP/make.log")"
	fi
else
	t_skip "CUDA objects" "no nvcc (CUDA=0)"
fi
t_done
