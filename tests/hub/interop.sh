#!/bin/sh
# The cache is shared with huggingface_hub both ways: what titan-hf-fetch puts in
# a cache dir loads with hf_hub_download(local_files_only=True), and what
# snapshot_download puts there titan-hf-fetch serves offline and does not fetch
# again.  Skipped (TAP SKIP) when $PYTHON has no huggingface_hub.
. tests/lib.sh
PY=${PYTHON:-python3}
if ! "$PY" -c 'import huggingface_hub' 2>/dev/null; then
	for t in titan_cache_loads_in_huggingface_hub titan_dataset_cache_loads_in_huggingface_hub \
		huggingface_hub_fetches_from_the_fake_hub huggingface_hub_cache_serves_titan_offline \
		titan_online_reuses_huggingface_hub_blobs; do
		t_skip "$t" "no huggingface_hub in $PY (set PYTHON to a venv with it)"
	done
	t_done
fi
echo "# huggingface_hub $("$PY" -c 'import huggingface_hub; print(huggingface_hub.__version__)')"
SEED=11
echo "# content seed $SEED"
. tests/hub/fakehub.inc
R=$TMP/root
fakehub_make_repos "$R" "$SEED" || { t_not_ok "make the fake repositories"; t_done; }
fakehub_start "$R" --page-size 4
export HF_ENDPOINT=$HUB HF_HOME=$TMP/hfhome HF_HUB_DISABLE_XET=1
unset HF_TOKEN HUGGING_FACE_HUB_TOKEN HF_TOKEN_PATH HF_HUB_OFFLINE HF_HUB_CACHE
F="timeout 60 $BIN/titan-hf-fetch -q --retry-wait 0.05"
M=$R/models/org/tiny
FILES="config.json tokenizer.json model-00001-of-00002.safetensors original/tokenizer.model"

$F org/tiny --cache-dir "$TMP/a" >/dev/null 2>"$TMP/err.txt"
# shellcheck disable=SC2086
HF_HUB_OFFLINE=1 timeout 120 "$PY" scripts/hub_interop.py load --cache "$TMP/a" --repo org/tiny \
	--ref "$M" $FILES >"$TMP/py.txt" 2>&1
rc=$?
if [ $rc -eq 0 ]; then t_ok "titan_cache_loads_in_huggingface_hub"; else
	t_not_ok "titan_cache_loads_in_huggingface_hub" "$(tail -5 "$TMP/py.txt")"; fi
$F org/c4 --dataset --include 'en/*validation*' --cache-dir "$TMP/a" >/dev/null 2>>"$TMP/err.txt"
HF_HUB_OFFLINE=1 timeout 120 "$PY" scripts/hub_interop.py load --cache "$TMP/a" --repo org/c4 \
	--dataset --ref "$R/datasets/org/c4" en/c4-validation.00000-of-00008.json.gz >"$TMP/py.txt" 2>&1
rc=$?
if [ $rc -eq 0 ]; then t_ok "titan_dataset_cache_loads_in_huggingface_hub"; else
	t_not_ok "titan_dataset_cache_loads_in_huggingface_hub" "$(tail -5 "$TMP/py.txt")"; fi

timeout 120 "$PY" scripts/hub_interop.py fetch --cache "$TMP/b" --repo org/tiny >"$TMP/py.txt" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
	t_not_ok "huggingface_hub_fetches_from_the_fake_hub" "$(tail -5 "$TMP/py.txt")"
	t_done
fi
t_ok "huggingface_hub_fetches_from_the_fake_hub"
HF_HUB_OFFLINE=1 $F org/tiny --cache-dir "$TMP/b" >"$TMP/paths.txt" 2>"$TMP/err.txt"
bad=""
for f in $FILES; do
	p=$(grep "/$f\$" "$TMP/paths.txt")
	cmp -s "$p" "$M/$f" || bad="$bad $f"
done
if [ -z "$bad" ] && [ "$(wc -l <"$TMP/paths.txt")" -eq 9 ]; then
	t_ok "huggingface_hub_cache_serves_titan_offline"; else
	t_not_ok "huggingface_hub_cache_serves_titan_offline" "bad:$bad $(cat "$TMP/err.txt")"; fi
curl -s -X POST --data '{}' "$HUB/_reset" >/dev/null
$F org/tiny --cache-dir "$TMP/b" --json >"$TMP/out.json" 2>"$TMP/err.txt"
cdn=$(curl -s "$HUB/_stats" | jq '[.requests[] | select(.server == "cdn" or .method == "GET" and (.path | contains("/resolve/")))] | length')
if [ "$(jq '[.files[].cached] | all' "$TMP/out.json")" = true ] && [ "$cdn" -eq 0 ]; then
	t_ok "titan_online_reuses_huggingface_hub_blobs"; else
	t_not_ok "titan_online_reuses_huggingface_hub_blobs" "cdn=$cdn $(cat "$TMP/err.txt")"; fi
t_done
