#!/bin/sh
# The Flux autoencoder at FLUX.1's real shape (ch 128, ch_mult (1, 2, 4, 4),
# num_res_blocks 2, z_channels 16: 84M parameters) on one 256 x 256 image, on
# the CPU: random weights of ae.safetensors' names and shapes in a temporary
# folder (scripts/fluxae_real_torch.py make), then torchtitan 0.3.0's
# AutoEncoder (fluxae_real_torch.py run) and titan's lib/fluxae
# (tests/fluxae/bench_fluxae) on the same weights and inputs: each side's
# seconds to encode and to decode, the resident memory after loading and the
# peak its forward passes added, titan's max |err| / max |ref| against
# torch's moments, sampled latents and decoded pixels of the same dtype, and
# for bfloat16 each side's against torch's float32 (run float32 first).  Too big for a golden,
# so not part of make check.
#
# Environment: BENCH_FLUXAE_DTYPES (default "float32"; "float32 bfloat16" adds
# the bf16 models), PYTHON (with torch), TT030 (the folder holding
# torchtitan 0.3.0's package); without them the script says so and stops.
set -eu
BUILD=${BUILD:-build}
PY=${PYTHON:-python3}
TT030=${TT030:-}
DTYPES=${BENCH_FLUXAE_DTYPES:-float32}
make -s "$BUILD/tests/fluxae/bench_fluxae" >&2
export PYTHONPATH="$TT030${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PY" -c 'from torchtitan.models.flux.model.autoencoder import AutoEncoder' 2>/dev/null; then
	echo "fluxae_real: not available: $PY cannot import torchtitan 0.3.0 (set PYTHON, TT030)"
	exit 0
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/fluxae_real.XXXXXX")
trap 'rm -rf "$dir"' EXIT INT TERM
"$PY" scripts/fluxae_real_torch.py make "$dir"
get() { # key line
	printf '%s\n' "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"
}
printf '%-9s %-6s %8s %8s %8s %9s  %-26s %s\n' dtype side encode_s decode_s rss_MiB fwd_MiB \
	"vs torch (moments,z,pixels)" "vs torch float32"
for dt in $DTYPES; do
	for side in torch titan; do
		if [ "$side" = torch ]; then
			line=$("$PY" scripts/fluxae_real_torch.py run "$dir" "$dt")
		else
			line=$("$BUILD/tests/fluxae/bench_fluxae" "$dir" "$dt")
		fi
		printf '%-9s %-6s %8s %8s %8s %9s  %-26s %s\n' "$dt" "$side" \
			"$(get encode_s "$line")" "$(get decode_s "$line")" "$(get rss_mib "$line")" \
			"$(get peak_added_mib "$line")" "$(get rel "$line")" "$(get f32_rel "$line")"
	done
done
