#!/bin/sh
# The cc12m test shard torchtitan's Flux debug model trains on
# (../shared/fixtures/torchtitan_assets/cc12m_test/cc12m-train-0000.tar):
# every sample read through lib/wds, its caption and its (3, 256, 256) tensor
# equal to what datasets and torchtitan's _process_cc12m_image make of it
# (tests/image/golden/cc12m.tsv, scripts/flux_pixels_golden.py --cc12m).
. tests/lib.sh
REL=torchtitan_assets/cc12m_test/cc12m-train-0000.tar
t_need_fixture "$REL"
"$BUILD/tests/image/test_wds" cc12m "$(fx "$REL")" tests/image/golden/cc12m.tsv >"$TMP/out" 2>&1
rc=$?
t_grep "the shard's 32 samples are read" '^# 32 samples$' "$TMP/out"
if [ "$rc" = 0 ] && ! grep -q DIFFERS "$TMP/out"; then
	t_ok "captions and pixels equal torchtitan's on every sample"
else
	t_not_ok "captions and pixels equal torchtitan's on every sample" "$(grep -v '^ok' "$TMP/out" | head -5)"
fi
t_done
