#!/bin/sh
# titan-tokenize through the compiled-tokenizer cache: concurrent runs on an
# empty cache all give the stream a cacheless run gives and leave one sound
# file, which the next run maps; a damaged file is ignored and rewritten; a
# cache that cannot be written, or none, changes nothing but speed.
. tests/lib.sh
t_need_fixture corpus/en.jsonl tokenizers/qwen3/tokenizer.json
T="$BIN/titan-tokenize"
TK=$(fx tokenizers/qwen3)
head -n 300 "$(fx corpus/en.jsonl)" >"$TMP/a.jsonl"
"$T" -q --no-cache -t "$TK" "$TMP/a.jsonl" >"$TMP/want.tts" 2>"$TMP/err"
[ -s "$TMP/want.tts" ] || t_not_ok "a run without the cache" "$(cat "$TMP/err")"

C=$TMP/cache
for i in 1 2 3 4 5 6; do
	"$T" --cache "$C" -t "$TK" "$TMP/a.jsonl" >"$TMP/par$i.tts" 2>"$TMP/par$i.err" &
done
wait
ok=1
for i in 1 2 3 4 5 6; do cmp -s "$TMP/want.tts" "$TMP/par$i.tts" || ok=0; done
[ $ok = 1 ] && t_ok "six concurrent runs on an empty cache give the cacheless stream" ||
	t_not_ok "six concurrent runs on an empty cache give the cacheless stream" "$(cat "$TMP"/par*.err)"
n=$(ls "$C" | grep -c '\.ttok$')
left=$(ls "$C" | grep -vc '\.ttok$')
[ "$n" = 1 ] && [ "$left" = 0 ] && t_ok "they leave one compiled file and no temporary one" ||
	t_not_ok "they leave one compiled file and no temporary one" "$(ls -la "$C")"
"$T" --cache "$C" -t "$TK" "$TMP/a.jsonl" >"$TMP/warm.tts" 2>"$TMP/warm.err"
t_same "a run from the compiled file gives the same stream" "$TMP/want.tts" "$TMP/warm.tts"
t_grep "the run says it mapped the compiled file" "tokenizer: .*compiled, from $C/" "$TMP/warm.err"

f=$(ls "$C"/*.ttok)
# What a killed writer leaves: swept once it is an hour old, not before.
: >"$f.tmp.999999.AAAAAA"
: >"$f.tmp.999998.BBBBBB"
touch -d '2 hours ago' "$f.tmp.999999.AAAAAA"
size=$(wc -c <"$f")
head -c $((size / 2)) "$f" >"$TMP/half" && cat "$TMP/half" >"$f"
"$T" --cache "$C" -t "$TK" "$TMP/a.jsonl" >"$TMP/torn.tts" 2>"$TMP/torn.err"
t_same "a torn compiled file is ignored: same stream" "$TMP/want.tts" "$TMP/torn.tts"
t_grep "the torn file is named and rewritten" "ignored: .*compiled into" "$TMP/torn.err"
[ "$(wc -c <"$f")" = "$size" ] && t_ok "the rewritten file is whole again" ||
	t_not_ok "the rewritten file is whole again" "$(wc -c <"$f") bytes, want $size"
[ ! -e "$f.tmp.999999.AAAAAA" ] && [ -e "$f.tmp.999998.BBBBBB" ] &&
	t_ok "a write sweeps a killed writer's hour-old temporary file, not a fresh one" ||
	t_not_ok "a write sweeps a killed writer's hour-old temporary file, not a fresh one" "$(ls -la "$C")"
rm -f "$f.tmp.999998.BBBBBB"

: >"$TMP/notadir"
"$T" --cache "$TMP/notadir/c" -t "$TK" "$TMP/a.jsonl" >"$TMP/ro.tts" 2>"$TMP/ro.err"
t_same "a cache folder that cannot be made changes nothing but speed" "$TMP/want.tts" "$TMP/ro.tts"
t_grep "and says why the cache was not written" "cache not written" "$TMP/ro.err"
TITAN_TOK_CACHE=off "$T" -t "$TK" "$TMP/a.jsonl" >"$TMP/off.tts" 2>"$TMP/off.err"
t_same "TITAN_TOK_CACHE=off: no cache, same stream" "$TMP/want.tts" "$TMP/off.tts"
XDG_CACHE_HOME=$TMP/xdg TITAN_TOK_CACHE= "$T" -q -t "$TK" "$TMP/a.jsonl" >/dev/null 2>&1
unset TITAN_TOK_CACHE
XDG_CACHE_HOME=$TMP/xdg "$T" -q -t "$TK" "$TMP/a.jsonl" >/dev/null 2>&1
ls "$TMP/xdg/titan/tokenizers/"*.ttok >/dev/null 2>&1 && t_ok "the default folder is \$XDG_CACHE_HOME/titan/tokenizers" ||
	t_not_ok "the default folder is \$XDG_CACHE_HOME/titan/tokenizers" "$(ls -R "$TMP/xdg" 2>&1)"
t_done
