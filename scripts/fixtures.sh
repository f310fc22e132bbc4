#!/bin/sh
# The test fixtures a clone of the repository lacks, made in build/fixtures/
# (tests look for a fixture in $TITAN_FIXTURES, default ../shared/fixtures,
# then here).
#
#   fixtures.sh local   what needs no network: the tokenizers kept in the
#                       repository (tests/tok/fixtures/, zstd) unpacked and
#                       checked, and the corpora built from Debian packages
#                       (scripts/fixtures_corpus.py; `make deps` installs them).
#                       `make check` runs this; it is quick when done.
#   fixtures.sh         the same, then the gated Llama 3 files from the Hugging
#                       Face Hub with $BIN/titan-hf-fetch (`make fixtures`):
#                       HF_TOKEN must hold a token of an account that accepted
#                       the Meta Llama 3 Community License.  The token is passed
#                       in the environment and never printed.
set -eu
OUT=build/fixtures
SRC=tests/tok/fixtures/tokenizers
B=${BIN:-bin}
# The Llama 3 files the references were made with: Meta-Llama-3-8B-Instruct at a
# fixed revision (its tokenizer.json is Llama 3.1's too), and Meta's tiktoken file.
LLAMA_REPO=meta-llama/Meta-Llama-3-8B-Instruct
LLAMA_REV=8afb486c1db24fe5011ec46dfbe5b5dccdb575c2
LLAMA_SUMS="e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7  llama3_1/tokenizer.json
da0e3a7cce6e4d787e85eb1c24d548420e0d7fe2c7a214e192795c46e40d75bb  llama3_1/tokenizer_config.json
82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55  llama3_tiktoken/tokenizer.model"

say() { echo "fixtures: $*" >&2; }

# Is $2 the file whose SHA-256 is $1?
sum_ok() { [ -f "$2" ] && [ "$(sha256sum <"$2" | cut -d' ' -f1)" = "$1" ]; }

# The committed tokenizers, unpacked where missing or changed.
unpack() {
	while read -r sum rel; do
		dst=$OUT/tokenizers/$rel
		sum_ok "$sum" "$dst" && continue
		mkdir -p "$(dirname "$dst")"
		zstd -q -d -f "$SRC/$rel.zst" -o "$dst.tmp"
		if ! sum_ok "$sum" "$dst.tmp"; then
			rm -f "$dst.tmp"
			say "$SRC/$rel.zst does not unpack to the file SHA256SUMS names"
			exit 1
		fi
		mv -f "$dst.tmp" "$dst"
		cp "$SRC/$(dirname "$rel")/LICENSE" "$(dirname "$dst")/LICENSE"
		say "unpacked $dst"
	done <"$SRC/SHA256SUMS"
}

# The corpora, rebuilt when the packages they come from changed version.
corpus() {
	want=$(python3 scripts/fixtures_corpus.py --sources 2>/dev/null) || {
		say "corpora not built: $(python3 scripts/fixtures_corpus.py --sources 2>&1 >/dev/null)"
		return 0
	}
	if [ -f "$OUT/corpus/SOURCES" ] && [ "$(cat "$OUT/corpus/SOURCES")" = "$want" ]; then
		return 0
	fi
	rm -rf "$OUT/corpus.tmp"
	python3 scripts/fixtures_corpus.py "$OUT/corpus.tmp"
	rm -rf "$OUT/corpus"
	mv "$OUT/corpus.tmp" "$OUT/corpus"
}

# The gated Llama 3 files, checked against the sums above.
llama() {
	missing=0
	echo "$LLAMA_SUMS" | while read -r sum rel; do sum_ok "$sum" "$OUT/tokenizers/$rel" || exit 1; done ||
		missing=1
	[ "$missing" = 0 ] && return 0
	if [ -z "${HF_TOKEN:-}" ]; then
		say "Llama 3 tokenizers not fetched: they are gated; accept the licence at"
		say "https://huggingface.co/$LLAMA_REPO and run: HF_TOKEN=<your token> make fixtures"
		return 0
	fi
	[ -x "$B/titan-hf-fetch" ] || { say "$B/titan-hf-fetch is not built (make)"; exit 1; }
	tmp=$OUT/.llama
	rm -rf "$tmp"
	"$B/titan-hf-fetch" -q --revision "$LLAMA_REV" --local-dir "$tmp" \
		--include tokenizer.json --include tokenizer_config.json \
		--include original/tokenizer.model "$LLAMA_REPO"
	mkdir -p "$OUT/tokenizers/llama3_1" "$OUT/tokenizers/llama3_tiktoken"
	mv -f "$tmp/tokenizer.json" "$tmp/tokenizer_config.json" "$OUT/tokenizers/llama3_1/"
	mv -f "$tmp/original/tokenizer.model" "$OUT/tokenizers/llama3_tiktoken/"
	rm -rf "$tmp"
	echo "$LLAMA_SUMS" | while read -r sum rel; do
		sum_ok "$sum" "$OUT/tokenizers/$rel" || {
			say "$OUT/tokenizers/$rel: not the file the references were made with"
			exit 1
		}
	done
	say "fetched the Llama 3 tokenizers from $LLAMA_REPO"
}

case "${1:-all}" in
local) unpack; corpus ;;
all) unpack; corpus; llama ;;
*) echo "usage: fixtures.sh [local]" >&2; exit 2 ;;
esac
