#!/bin/sh
# cu2cpp.sh IN OUT: a CUDA source as host C++ for the emulator (cuda_emu.h).
# Two rewrites, each within one line so that line numbers (and gcov's counts)
# stay the source's:
#   k<<<grid, block, smem, stream>>>(args)
#     -> ::emu::launch("k", __FILE__, __LINE__, [&](auto &&...a) { k(a...); }, grid, block, smem, stream)(args)
#   extern __shared__ T x[];  ->  T *x = (T *)emu_dynamic_shared();
# A launch or an extern __shared__ in any other form stops the build.
set -eu
in=$1 out=$2
id='[A-Za-z_][A-Za-z0-9_]*'
tmp=$out.tmp
{
	printf '#line 1 "%s"\n' "$in"
	sed -E \
		-e "s/($id(<[^<>;]*>)?)<<<(.*)>>>\\(/::emu::launch(\"\\1\", __FILE__, __LINE__, [\\&](auto \\&\\&...emu_a) { \\1(emu_a...); }, \\3)(/" \
		-e "s/extern __shared__ ($id( $id)*) ($id)\\[\\];/\\1 *\\3 = (\\1 *)emu_dynamic_shared();/" \
		"$in"
} >"$tmp"
if grep -n -e '<<<' -e '>>>' -e 'extern __shared__' "$tmp" | grep -v '^1:' >"$tmp.left"; then
	sed "s|^|$in: a form the emulator's rewrite does not know: |" "$tmp.left" >&2
	rm -f "$tmp" "$tmp.left"
	exit 1
fi
rm -f "$tmp.left"
mv "$tmp" "$out"
