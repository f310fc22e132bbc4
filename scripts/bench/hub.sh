#!/bin/sh
# titan-hf-fetch -j 4 vs huggingface_hub.snapshot_download(max_workers=4): 4 x 256 MB
# from the fake Hub on loopback; wall s, MB/s, peak RSS and their ratios.
# PYTHON must have huggingface_hub (e.g. PYTHON=venv/bin/python); HUB_BENCH_MB and
# HUB_BENCH_FILES change the size.  Needs about 2 GB free in $TMPDIR (removed after).
set -u
PY=${PYTHON:-python3}
if ! "$PY" -c 'import huggingface_hub' 2>/dev/null; then
	echo "hub: skipped: no huggingface_hub in $PY (set PYTHON to a venv with it)"
	exit 0
fi
[ -x bin/titan-hf-fetch ] || { echo "hub: build first (make)" >&2; exit 1; }
exec "$PY" scripts/hub_bench.py --files "${HUB_BENCH_FILES:-4}" --mb "${HUB_BENCH_MB:-256}" --jobs 4
