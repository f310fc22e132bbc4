#!/bin/sh
# The random draws of torchtitan 0.3.0's Flux loader over the cc12m test shard
# (../shared/fixtures/torchtitan_assets/cc12m_test/cc12m-train-0000.tar), made by titan
# from the shard itself: each image's size decoded by lib/image, the crop
# offset and prompt dropouts by image_cc12m_draw on core/torch_rng, against
# 0.3.0's FluxDataLoader (tests/image/golden/flux_draws.txt,
# scripts/flux_draws_golden.py): two seeds, the shard read one and a half
# times, one run with a CPU step's draws between batches.
. tests/lib.sh
REL=torchtitan_assets/cc12m_test/cc12m-train-0000.tar
t_need_fixture "$REL"
"$BUILD/tests/image/test_flux_draws" "$(fx "$REL")" tests/image/golden/flux_draws.txt >"$TMP/out" 2>&1
rc=$?
t_grep "both runs' 88 samples are drawn" '^# 2 runs, 88 samples' "$TMP/out"
if [ "$rc" = 0 ] && ! grep -q DIFFERS "$TMP/out"; then
	t_ok "keys, sizes, crop offsets and dropouts equal torchtitan's on every sample"
else
	t_not_ok "keys, sizes, crop offsets and dropouts equal torchtitan's on every sample" "$(grep -v '^#' "$TMP/out" | head -5)"
fi
t_done
