#!/bin/sh
# titan-tokenize --pad-to: Flux's encoder inputs from the CLIP and T5-path
# tokenizers (ids checked against torchtitan's FluxTokenizer in
# tests/tok/flux/, made by scripts/tok_flux_reference.py), and its refusals.
. tests/lib.sh
t_need_fixture tokenizers/clip_vit_l14/tokenizer.json \
	tokenizers/sentencepiece_unigram/tokenizer.json
T="$BIN/titan-tokenize"

# The reference's ids under the mask, then the pad id to the length.
padded() { awk -v L="$2" -v P="$3" '!/^#/ { s = $0; for (i = NF; i < L; i++) s = s (s == "" ? "" : " ") P; print s }' "$1"; }

padded tests/tok/flux/clip.ref 77 49407 >"$TMP/clip.want"
"$T" -q -t "$(fx tokenizers/clip_vit_l14)" --ids --pad-to 77 tests/tok/flux/captions.jsonl \
	>"$TMP/clip.out" 2>"$TMP/err"
t_same "CLIP --pad-to 77 gives torchtitan's ids on the captions" "$TMP/clip.want" "$TMP/clip.out"

padded tests/tok/flux/t5_unigram.ref 256 0 >"$TMP/t5.want"
"$T" -q -t "$(fx tokenizers/sentencepiece_unigram/tokenizer.json)" --ids --pad-to 256 \
	tests/tok/flux/captions.jsonl >"$TMP/t5.out" 2>"$TMP/err"
t_same "T5 path (ALBERT's Unigram) --pad-to 256 gives torchtitan's ids" "$TMP/t5.want" "$TMP/t5.out"

echo '{"text":"x"}' >"$TMP/x.jsonl"
t_fails "--pad-to with --bos is a usage error" 2 "$T" -t "$(fx tokenizers/clip_vit_l14)" --ids \
	--pad-to 8 --bos "$TMP/x.jsonl"
t_fails "--pad-to shorter than the special tokens is refused" 1 "$T" -q \
	-t "$(fx tokenizers/clip_vit_l14)" --ids --pad-to 1 "$TMP/x.jsonl"
t_grep "... saying why" "special tokens" "$TMP/.err"
t_done
