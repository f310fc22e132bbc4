#!/bin/sh
# titan-encode's throughput on the CPU beside the same work in torchtitan
# 0.3.0's Python path (scripts/bench/encode_torch.py: FluxDataset, collate,
# preprocess_data with FluxEmbedder), in one run: images/s from the first
# sample to the last record, models loaded before, batches of BENCH_BATCH, on
# one thread and on all cores (titan -j and OMP_NUM_THREADS, torch's
# set_num_threads).  The data is the cc12m test shard (32 samples), repeated.
# The encoders are the tests' deterministic random weights
# (test_fluxin mkmodels), loaded by both sides from the same folders:
#
#   tiny   T5 and CLIP 8 wide, 2 layers, their real vocabularies: the cost is
#          the images and the tokenizers
#   real   CLIP ViT-L/14's text model at its real shape; T5-XXL's shape
#          (d_model 4096, 64 heads, d_ff 10240) with BENCH_T5_LAYERS of its 24
#          layers (default 2: float32 T5-XXL is 19 GB and would take minutes a
#          sample here), BENCH_REAL samples (default 8); without, then with
#          the FLUX.1 autoencoder at its real shape (84M random weights,
#          scripts/fluxae_real_torch.py make): titan keeps its moments,
#          torchtitan's preprocess_data samples latents from them
#
# The tiny rows have no autoencoder.  Tokenizers: CLIP ViT-L/14's, and the T5
# path on ALBERT's Unigram model (the tests' fixtures; make fixtures).
#
# Environment: BIN, BUILD, PYTHON (with torch, transformers, datasets and
# torchtitan 0.3.0 on PYTHONPATH), BENCH_BATCH (8), BENCH_REPEAT (tiny: the
# shard this many times, default 4), BENCH_T5_LAYERS, BENCH_REAL, BENCH_SKIP_REAL=1,
# BENCH_THREADS (default "1 <cores>").
# Peak memory is each process's maximum resident set (GNU time, Debian's time).
# Figures on a shared machine are noisy: the load average is printed.
set -eu
BIN=${BIN:-bin}
BUILD=${BUILD:-build}
PY=${PYTHON:-python3}
B=${BENCH_BATCH:-8}
REP=${BENCH_REPEAT:-4}
LAYERS=${BENCH_T5_LAYERS:-2}
REAL=${BENCH_REAL:-8}
THREADS=${BENCH_THREADS:-1 $(nproc)}
FIX=${TITAN_FIXTURES:-../shared/fixtures}
TAR=$FIX/torchtitan_assets/cc12m_test/cc12m-train-0000.tar
fx() { if [ -e "$FIX/$1" ]; then echo "$FIX/$1"; else echo "$BUILD/fixtures/$1"; fi; }
T5TOK=$(dirname "$(fx tokenizers/sentencepiece_unigram/tokenizer.json)")
CLIPTOK=$(dirname "$(fx tokenizers/clip_vit_l14/tokenizer.json)")
for f in "$TAR" "$T5TOK/tokenizer.json" "$CLIPTOK/tokenizer.json"; do
	[ -e "$f" ] || { echo "encode bench: $f missing (make fixtures)" >&2; exit 1; }
done
W=$(mktemp -d "${TMPDIR:-/tmp}/titan-encode-bench.XXXXXX")
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/data"
i=0
while [ "$i" -lt "$REP" ]; do cp "$TAR" "$W/data/cc12m-train-000$i.tar"; i=$((i + 1)); done
if "$PY" -c 'import torchtitan.models.flux.flux_datasets' 2>/dev/null; then torch=1; else
	torch=0; echo "torchtitan: not importable by $PY (set PYTHON and PYTHONPATH)"; fi

# row NAME MODELS LIMIT THREADS [AE]: titan-encode, then torchtitan, on the same data
row() {
	name=$1 m=$2 lim=$3 th=$4 ae=${5:-}
	OMP_NUM_THREADS=$th /usr/bin/time -o "$W/rss" -f %M "$BIN/titan-encode" -j "$th" --t5 "$m/t5" --clip "$m/clip" \
		--t5-tokenizer "$T5TOK" --clip-tokenizer "$CLIPTOK" --batch "$B" \
		${lim:+--limit "$lim"} ${ae:+--autoencoder "$ae"} "$W"/data/*.tar \
		2>"$W/err" >/dev/null || { cat "$W/err" >&2; exit 1; }
	# images/s, samples, seconds, then each step's seconds
	t=$(sed -n 's/.*throughput: //p' "$W/err" | sed 's/T5//' | tr -cs '0-9.' ' ')
	echo "$name titan $t $(tail -1 "$W/rss")" >>"$W/rows"
	if [ "$torch" = 1 ]; then
		OMP_NUM_THREADS=$th /usr/bin/time -o "$W/rss" -f %M "$PY" scripts/bench/encode_torch.py --threads "$th" \
			--data "$W/data" --t5 "$m/t5" --clip "$m/clip" --t5-tokenizer "$T5TOK" \
			--clip-tokenizer "$CLIPTOK" --batch "$B" ${lim:+--limit "$lim"} \
			${ae:+--ae "$ae"} 2>"$W/perr" | tail -1 >"$W/p" || { tail -5 "$W/perr" >&2; exit 1; }
		echo "$name torchtitan $(awk '{ print $6, $2, $4 }' "$W/p") $(tail -1 "$W/rss")" >>"$W/rows"
	fi
}

: >"$W/rows"
"$BUILD/tests/encode/test_fluxin" mkmodels "$W/tiny"
for th in $THREADS; do row "tiny,${th}t" "$W/tiny" "" "$th"; done
rm -rf "$W/tiny"
if [ "${BENCH_SKIP_REAL:-0}" != 1 ]; then
	"$BUILD/tests/encode/test_fluxin" mkmodels "$W/real" real "$LAYERS"
	for th in $THREADS; do row "real,${th}t" "$W/real" "$REAL" "$th"; done
	if [ "$torch" = 1 ] && "$PY" scripts/fluxae_real_torch.py make "$W/ae" >/dev/null 2>&1; then
		for th in $THREADS; do
			row "real+AE,${th}t" "$W/real" "$REAL" "$th" "$W/ae/ae.safetensors"
		done
	else
		echo "real+AE: not run: scripts/fluxae_real_torch.py make (torch) failed"
	fi
fi

echo "titan-encode vs torchtitan 0.3.0 (FluxDataset + FluxEmbedder [+ AutoEncoder], float32)," \
	"batch $B, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "tiny: T5 and CLIP 8 wide, 2 layers; real: CLIP ViT-L/14 text, T5-XXL shape with" \
	"$LAYERS of 24 layers; +AE: FLUX.1's autoencoder"
awk '
{ key = $1; impl = $2; ips[key, impl] = $3; n[key, impl] = $4; s[key, impl] = $5
  rss[key, impl] = $NF / 1024
  if (impl == "titan")
    detail[key] = sprintf("images+tokens %.2f s, T5 %.2f s, CLIP %.2f s, AE %.2f s", $6, $7, $8, $9)
  if (!(key in seen)) { seen[key] = 1; order[++k] = key } }
END {
  printf "%-18s %8s %12s %14s %8s %10s %10s   %s\n", "encoders,threads", "samples", \
    "titan img/s", "torch img/s", "speedup", "titan MiB", "torch MiB", "titan time split"
  for (i = 1; i <= k; i++) { key = order[i]; t = ips[key, "titan"]; p = ips[key, "torchtitan"]
    printf "%-18s %8s %12.2f %14s %8s %10.0f %10s   %s\n", key, n[key, "titan"], t, \
      p == "" ? "-" : sprintf("%.2f", p), p == "" || p == 0 ? "-" : sprintf("%.2fx", t / p), \
      rss[key, "titan"], p == "" ? "-" : sprintf("%.0f", rss[key, "torchtitan"]), \
      detail[key] } }' "$W/rows"
