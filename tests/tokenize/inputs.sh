#!/bin/sh
# titan-tokenize inputs: compression and containers detected from content,
# truncated and malformed input, --skip-bad, stdin, empty input, -j.
. tests/lib.sh
t_need_fixture corpus/en.jsonl
t_need_fixture corpus/en.jsonl.gz
t_need_fixture tokenizers/cl100k_base/cl100k_base.tiktoken
TK=$(fx tokenizers/cl100k_base/cl100k_base.tiktoken) # in the repository, loads fast
T="$BIN/titan-tokenize"

head -n 300 "$(fx corpus/en.jsonl)" >"$TMP/a.jsonl"
"$T" -q -t "$TK" --ids "$TMP/a.jsonl" >"$TMP/plain.ids" 2>"$TMP/err"
[ -s "$TMP/plain.ids" ] && [ "$(wc -l <"$TMP/plain.ids")" -eq 300 ] &&
	t_ok "plain JSONL gives one line of ids per document" ||
	t_not_ok "plain JSONL gives one line of ids per document" "$(cat "$TMP/err")"

# Every compressor, under a name that says nothing about it.
for c in gzip zstd xz bzip2 lz4; do
	"$c" -c <"$TMP/a.jsonl" >"$TMP/in.$c.data"
	"$T" -q -t "$TK" --ids "$TMP/in.$c.data" >"$TMP/$c.ids" 2>"$TMP/err"
	t_same "$c input is detected from its content" "$TMP/plain.ids" "$TMP/$c.ids"
done

# Containers: tar and zip holding plain and compressed members.
mkdir -p "$TMP/d"
head -n 100 "$TMP/a.jsonl" >"$TMP/d/part1.jsonl"
sed -n '101,200p' "$TMP/a.jsonl" | gzip -c >"$TMP/d/part2.jsonl.gz"
sed -n '201,300p' "$TMP/a.jsonl" | zstd -q -c >"$TMP/d/part3.bin"
(cd "$TMP/d" && tar cf "$TMP/all.tar" part1.jsonl part2.jsonl.gz part3.bin)
"$T" -q -t "$TK" --ids "$TMP/all.tar" >"$TMP/tar.ids" 2>"$TMP/err"
t_same "tar of plain, gzip and zstd members reads every member in order" "$TMP/plain.ids" "$TMP/tar.ids"
gzip -c <"$TMP/all.tar" >"$TMP/all.tgz.data"
"$T" -q -t "$TK" --ids "$TMP/all.tgz.data" >"$TMP/tgz.ids" 2>"$TMP/err"
t_same "gzip-compressed tar is read" "$TMP/plain.ids" "$TMP/tgz.ids"
(cd "$TMP/d" && zip -q "$TMP/all.zip" part1.jsonl part2.jsonl.gz part3.bin)
"$T" -q -t "$TK" --ids "$TMP/all.zip" >"$TMP/zip.ids" 2>"$TMP/err"
t_same "zip of plain and compressed members is read" "$TMP/plain.ids" "$TMP/zip.ids"
"$T" -q -t "$TK" --ids - <"$TMP/all.zip" >"$TMP/zipin.ids" 2>"$TMP/err"
t_same "zip read from stdin (streaming) is read" "$TMP/plain.ids" "$TMP/zipin.ids"
gzip -c <"$TMP/a.jsonl" | "$T" -q -t "$TK" --ids >"$TMP/stdin.ids" 2>"$TMP/err"
t_same "gzip on stdin, no file operand" "$TMP/plain.ids" "$TMP/stdin.ids"

# Truncated compressed input is an error, never a short output.
size=$(wc -c <"$(fx corpus/en.jsonl.gz)")
head -c $((size / 2)) "$(fx corpus/en.jsonl.gz)" >"$TMP/trunc.gz"
t_fails "truncated gzip exits 1" 1 "$T" -q -t "$TK" "$TMP/trunc.gz"
t_grep "truncated gzip is reported as truncated" "trunc.gz: .*[Tt]runcated" "$TMP/.err"
for c in zstd xz bzip2 lz4; do
	s=$(wc -c <"$TMP/in.$c.data")
	head -c $((s - 7)) "$TMP/in.$c.data" >"$TMP/trunc.$c"
	t_fails "truncated $c exits 1" 1 "$T" -q -t "$TK" --ids "$TMP/trunc.$c"
done

# Malformed lines: file:line, or counted with --skip-bad.
printf '{"text":"one"}\n\n{"text":"two","url":"x"}\n{"text":"three\n{"text":"four"}\n{"url":"no text"}\n' \
	>"$TMP/bad.jsonl"
t_fails "malformed line exits 1" 1 "$T" -q -t "$TK" --ids "$TMP/bad.jsonl"
t_grep "malformed line is reported as file:line: reason" \
	"^titan-tokenize: .*bad.jsonl:4: unterminated string" "$TMP/.err"
t_run "--skip-bad goes on past malformed lines" "$T" -t "$TK" --ids --skip-bad "$TMP/bad.jsonl"
t_grep "--skip-bad reports how many it skipped" "skipped 2 malformed lines" "$TMP/.err"
[ "$(wc -l <"$TMP/.out")" -eq 3 ] && t_ok "--skip-bad keeps the good documents" ||
	t_not_ok "--skip-bad keeps the good documents" "$(cat "$TMP/.out")"
printf '{"text":"a"}\n{"text":"\377"}\n' >"$TMP/badutf8.jsonl"
t_fails "raw invalid UTF-8 in a line exits 1" 1 "$T" -q -t "$TK" "$TMP/badutf8.jsonl"
t_grep "invalid UTF-8 names file:line" "badutf8.jsonl:2: invalid UTF-8" "$TMP/.err"

printf '{"text":"fine"}\n{"text":}\n' >"$TMP/d/bad.jsonl"
(cd "$TMP/d" && tar cf "$TMP/bad.tar" part1.jsonl bad.jsonl)
t_fails "malformed line inside a tar member exits 1" 1 "$T" -q -t "$TK" "$TMP/bad.tar"
t_grep "the error names archive:member:line" "bad.tar:bad.jsonl:2: expected a value" "$TMP/.err"

# Empty input: no documents, a valid empty stream.
: >"$TMP/empty"
t_run "empty input is zero documents" "$T" -t "$TK" "$TMP/empty"
t_grep "empty input summary says 0 documents" "tokenized 0 documents" "$TMP/.err"

# The output does not depend on the number of threads (English and
# Cyrillic/Latin text, many batches).
t_need_fixture corpus/multi.jsonl
{ head -n 4000 "$(fx corpus/en.jsonl)"; head -n 4000 "$(fx corpus/multi.jsonl)"; } |
	gzip -c >"$TMP/mix.gz"
"$T" -q -t "$TK" -j 1 "$TMP/mix.gz" >"$TMP/j1.tts" 2>"$TMP/err"
"$T" -t "$TK" -j 4 "$TMP/mix.gz" >"$TMP/j4.tts" 2>"$TMP/err4"
[ -s "$TMP/j1.tts" ] && t_same "-j 1 and -j 4 give byte-identical streams" "$TMP/j1.tts" "$TMP/j4.tts" ||
	t_not_ok "-j 1 and -j 4 give byte-identical streams" "empty output: $(cat "$TMP/err")"
t_grep "summary line on stderr" \
	"tokenized 8000 documents, [0-9]* tokens, [0-9.]* MB in [0-9.]* s ([0-9.]* MB/s)" "$TMP/err4"

# Bad usage.
t_fails "missing --tokenizer is a usage error" 2 "$T" "$TMP/a.jsonl"
t_fails "unknown --format is a usage error" 2 "$T" -t "$TK" --format xml "$TMP/a.jsonl"
t_fails "a missing input file exits 1" 1 "$T" -t "$TK" "$TMP/nonexistent"
t_done
