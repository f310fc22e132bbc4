#!/bin/sh
# make demo: the whole titan pipeline on real text, on the CPU, in a few minutes.
#
#   corpus     fortunes (Debian's fortune cookies) and the Jargon File (info),
#              both installed by `make deps`
#   tokenizer  titan-tokenize train: a 2048-token ByteLevel BPE
#   tokens     titan-tokenize -> token stream -> titan-shard (2% to validation)
#   training   titan-train --config configs/demo.toml (debugmodel, 250 steps)
#   export     titan-ckpt-convert: the last checkpoint as safetensors and as a
#              Hugging Face folder
#   report     where everything is, and the loss curve (terminal and PNG)
#
# DEMO_DIR (default build/demo) holds everything; it is started afresh.
# DEMO_STEPS overrides training.steps.  Fails when the loss did not fall by
# at least 2 nats.
set -eu
D=${DEMO_DIR:-build/demo}
B=${BIN:-bin}
start=$(date +%s)

say() { printf '\n== %s\n' "$*" >&2; }
elapsed() { echo $(($(date +%s) - start)); }

missing=""
for t in tokenize shard train ckpt-convert; do
	[ -x "$B/titan-$t" ] || missing="$missing titan-$t"
done
if [ -n "$missing" ]; then
	echo "demo: not built:$missing (run make)" >&2
	exit 1
fi

rm -rf "$D"
mkdir -p "$D"

say "1/7 corpus: fortunes and the Jargon File"
FORTUNES=/usr/share/games/fortunes
JARGON=/usr/share/info/jargon.info.gz
: >"$D/corpus.txt"
if [ -d "$FORTUNES" ]; then
	# Fortunes are separated by lines holding "%"; blank lines separate the
	# documents for titan-tokenize --split blank.  The ASCII-art files are left out.
	for f in "$FORTUNES"/*; do
		case "$f" in *.dat | *.u8 | */art | */ascii-art) continue ;; esac
		[ -f "$f" ] || continue
		sed 's/^%$//' "$f" | tr -d '\010\r' >>"$D/corpus.txt"
		echo >>"$D/corpus.txt"
	done
fi
if [ -f "$JARGON" ]; then
	gzip -dc "$JARGON" | tr -d '\037\010\r' >>"$D/corpus.txt"
fi
bytes=$(wc -c <"$D/corpus.txt")
if [ "$bytes" -lt 1000000 ]; then
	echo "demo: only $bytes bytes of text: install the Debian packages fortunes and jargon (make deps)" >&2
	exit 1
fi
echo "$bytes bytes of text in $D/corpus.txt" >&2

say "2/7 tokenizer: titan-tokenize train --vocab-size 2048"
"$B/titan-tokenize" train --vocab-size 2048 --format text --split blank --add-eos \
	-o "$D/tokenizer" "$D/corpus.txt"

say "3/7 tokens: titan-tokenize | titan-shard"
"$B/titan-tokenize" -q -t "$D/tokenizer" --format text --split blank --bos --eos "$D/corpus.txt" |
	"$B/titan-shard" -q --out "$D/data" --val-fraction 0.02
"$B/titan-shard" info "$D/data" >&2

say "4/7 training: titan-train --config configs/demo.toml (CPU)"
steps=${DEMO_STEPS:-}
"$B/titan-train" --config configs/demo.toml --job.dump_folder "$D/run" \
	--training.dataset_path "$D/data" ${steps:+--training.steps "$steps"}
last=$(ls -d "$D"/run/checkpoint/step-* | sed 's/.*step-//' | sort -n | tail -1)
ckpt="$D/run/checkpoint/step-$last"

say "5/7 export: titan-ckpt-convert"
"$B/titan-ckpt-convert" verify "$ckpt"
"$B/titan-ckpt-convert" dcp-to-single "$ckpt" "$D/model.safetensors" --model-only
"$B/titan-ckpt-convert" to-hf "$ckpt" "$D/hf" --flavor debugmodel
cp "$D/tokenizer/tokenizer.json" "$D/hf/" 2>/dev/null || true

say "6/7 loss curve"
"$B/titan-train" --plot-loss "$D/run/metrics.jsonl" --png "$D/loss.png"

say "7/7 done in $(elapsed) s"
first=$(grep '"loss"' "$D/run/metrics.jsonl" | head -1 | sed 's/.*"loss":\([^,]*\),.*/\1/' |
	awk '{ printf "%.4f", $1 }')
# The end of the run: the mean of the last 10 steps (one batch is noisy).
end=$(grep '"loss"' "$D/run/metrics.jsonl" | tail -10 |
	sed 's/.*"loss":\([^,]*\),.*/\1/' | awk '{ s += $1; n++ } END { printf "%.4f", s / n }')
drop=$(awk -v a="$first" -v b="$end" 'BEGIN { printf "%.2f", a - b }')
val=$(grep '"validation_loss"' "$D/run/metrics.jsonl" | tail -1 |
	sed 's/.*"validation_loss":\([^,]*\),.*/\1/' | awk '{ printf "%.4f", $1 }')
cat <<EOF
corpus            $D/corpus.txt ($bytes bytes)
tokenizer         $D/tokenizer/tokenizer.json
token shards      $D/data (titan-shard info $D/data)
training log      $D/run/metrics.jsonl
tensorboard       $D/run/tb (tensorboard --logdir $D/run/tb)
checkpoint        $ckpt (PyTorch DCP)
safetensors       $D/model.safetensors
hugging face      $D/hf
loss curve        $D/loss.png
loss              $first at step 1 -> $end (mean of the last 10 steps): fell by $drop nats
validation loss   ${val:-none}
time              $(elapsed) s
EOF
if awk -v d="$drop" 'BEGIN { exit !(d < 2) }'; then
	echo "demo: the loss fell by only $drop nats (expected at least 2)" >&2
	exit 1
fi
