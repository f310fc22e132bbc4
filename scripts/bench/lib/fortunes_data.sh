# Sourced by the benchmarks that train debugmodel (train.sh, startup.sh,
# ckpt_train.sh): fortunes_data BIN DIR puts Debian's fortunes through a
# byte-level tokenizer trained on them (vocab 2048, the debugmodel's) into
# the titan-shard folder DIR/data (DIR/corpus.txt, DIR/tok beside it).
fortunes_data() {
	fortunes=/usr/share/games/fortunes
	if [ ! -d "$fortunes" ]; then
		echo "bench: needs the fortunes package (make deps)" >&2
		exit 1
	fi
	for f in "$fortunes"/*; do
		case "$f" in *.dat | *.u8) continue ;; esac
		[ -f "$f" ] && sed 's/^%$//' "$f"
	done >"$2/corpus.txt"
	"$1/titan-tokenize" train -q --vocab-size 2048 --format text --split blank -o "$2/tok" \
		"$2/corpus.txt"
	"$1/titan-tokenize" -q -t "$2/tok" --format text --split blank --eos "$2/corpus.txt" |
		"$1/titan-shard" -q --out "$2/data" --val-fraction 0.01
}
