#!/bin/sh
# titan-hf-fetch against a fake Hub on 127.0.0.1 (tests/hub/fakehub.py): the
# protocol, the cache layout, auth and errors, and injected faults that must end
# in a correct file or a clear error, never a corrupt file under the final name.
. tests/lib.sh
PY=${PYTHON:-python3}
SEED=5
echo "# content seed $SEED"

# ---- repositories and the server (tests/hub/fakehub.inc) ----
. tests/hub/fakehub.inc
R=$TMP/root
fakehub_make_repos "$R" "$SEED" || { t_not_ok "make the fake repositories"; t_done; }
TOKEN=hf_titanTEST_s3cr3t_7a9b
fakehub_start "$R" --page-size 3 --token "$TOKEN"
export HF_ENDPOINT=$HUB HF_HOME=$TMP/hfhome
unset HF_TOKEN HUGGING_FACE_HUB_TOKEN HF_TOKEN_PATH HF_HUB_OFFLINE HF_HUB_CACHE
F="timeout 60 $BIN/titan-hf-fetch -q --retry-wait 0.05"
M=$R/models/org/tiny
D=$R/datasets/org/c4

ctl() { curl -s -X POST --data "$2" "$HUB/_$1" >/dev/null; }
stats() { curl -s "$HUB/_stats" >"$TMP/stats.json"; }
# count of logged requests matching a jq filter
nreq() { stats; jq "[.requests[] | select($1)] | length" "$TMP/stats.json"; }
same_tree() { # name, folder fetched, list of paths
	name=$1 got=$2; shift 2
	bad=""
	for p in "$@"; do cmp -s "$M/$p" "$got/$p" || bad="$bad $p"; done
	if [ -z "$bad" ]; then t_ok "$name"; else t_not_ok "$name" "differ:$bad"; fi
}
ALL="README.md config.json generation_config.json model-00001-of-00002.safetensors
model-00002-of-00002.safetensors model.safetensors.index.json original/tokenizer.model
tokenizer.json tokenizer_config.json"

# ---- usage ----
t_run "help_exits_0" "$BIN/titan-hf-fetch" --help
t_fails "no_repo_is_usage_error" 2 "$BIN/titan-hf-fetch"
t_fails "bad_repo_id_is_usage_error" 2 "$BIN/titan-hf-fetch" '../etc'
t_fails "unknown_asset_group_is_usage_error" 2 "$BIN/titan-hf-fetch" org/tiny --assets weights

# ---- listing ----
$F org/tiny --list >"$TMP/list.txt" 2>"$TMP/err.txt"
n=$(wc -l <"$TMP/list.txt")
if [ "$n" -eq 9 ]; then t_ok "listing_follows_link_pagination"; else
	t_not_ok "listing_follows_link_pagination" "$n files: $(cat "$TMP/list.txt" "$TMP/err.txt")"; fi
$F org/tiny --list --json >"$TMP/list.json"
COMMIT=$(jq -r .commit "$TMP/list.json")
tree_calls=$(nreq '.path | contains("/tree/")')
if [ "$tree_calls" -ge 4 ]; then t_ok "tree_listing_takes_several_pages"; else
	t_not_ok "tree_listing_takes_several_pages" "$tree_calls tree requests"; fi
t_grep "list_json_has_lfs_sha256" '"lfs_sha256": "[0-9a-f]\{64\}"' "$TMP/list.json"

# ---- asset groups and destinations ----
mkdir -p "$TMP/wd"
(cd "$TMP/wd" && $F org/tiny --assets tokenizer,config >"$TMP/out.txt" 2>"$TMP/err.txt")
got=$(cd "$TMP/wd/assets/hf/tiny" && find . -path ./.cache -prune -o -type f -print | sort | tr '\n' ' ')
want="./config.json ./generation_config.json ./tokenizer.json ./tokenizer_config.json "
if [ "$got" = "$want" ]; then t_ok "asset_groups_fetch_into_assets_hf_name"; else
	t_not_ok "asset_groups_fetch_into_assets_hf_name" "got: $got $(cat "$TMP/err.txt")"; fi
$F org/tiny --local-dir "$TMP/dir" >"$TMP/out.txt" 2>"$TMP/err.txt"
# shellcheck disable=SC2086
same_tree "local_dir_files_equal_the_repo" "$TMP/dir" $ALL
t_grep "stdout_lists_the_local_paths" "$TMP/dir/original/tokenizer.model" "$TMP/out.txt"
ctl reset '{}'
$F org/tiny --local-dir "$TMP/dir" --json >"$TMP/out.json" 2>"$TMP/err.txt"
cdn=$(nreq '.server == "cdn"')
all_cached=$(jq '[.files[] | .cached] | all' "$TMP/out.json")
if [ "$cdn" -eq 0 ] && [ "$all_cached" = true ]; then t_ok "second_run_into_local_dir_downloads_nothing"; else
	t_not_ok "second_run_into_local_dir_downloads_nothing" "cdn=$cdn cached=$all_cached"; fi
$F org/tiny --include 'nothing*' --local-dir "$TMP/none" 2>"$TMP/err.txt"
rc=$?
if [ $rc -eq 1 ] && grep -q "no file matches" "$TMP/err.txt"; then t_ok "no_match_is_a_clear_error"; else
	t_not_ok "no_match_is_a_clear_error" "rc=$rc $(cat "$TMP/err.txt")"; fi

# ---- cache layout ----
C=$TMP/cache
S=$C/models--org--tiny
$F org/tiny --cache-dir "$C" >"$TMP/out.txt" 2>"$TMP/err.txt"
t_run "fetch_into_cache_dir" test -s "$S/refs/main"
if [ "$(cat "$S/refs/main")" = "$COMMIT" ] && [ "$(wc -c <"$S/refs/main")" -eq 40 ]; then
	t_ok "refs_main_holds_the_commit_without_newline"; else
	t_not_ok "refs_main_holds_the_commit_without_newline" "$(od -c "$S/refs/main" | head -2)"; fi
sha=$(sha256sum "$M/model-00001-of-00002.safetensors" | cut -d' ' -f1)
lnk=$(readlink "$S/snapshots/$COMMIT/model-00001-of-00002.safetensors")
lnk2=$(readlink "$S/snapshots/$COMMIT/original/tokenizer.model")
sha2=$(sha256sum "$M/original/tokenizer.model" | cut -d' ' -f1)
if [ "$lnk" = "../../blobs/$sha" ] && [ "$lnk2" = "../../../blobs/$sha2" ]; then
	t_ok "snapshot_symlinks_are_relative_to_blobs_named_by_sha256"; else
	t_not_ok "snapshot_symlinks_are_relative_to_blobs_named_by_sha256" "$lnk | $lnk2"; fi
oid=$(jq -r '.files[] | select(.path == "config.json") | .oid' "$TMP/list.json")
t_run "small_files_are_blobs_named_by_git_oid" test -f "$S/blobs/$oid"
# shellcheck disable=SC2086
same_tree "cache_snapshot_equals_the_repo" "$S/snapshots/$COMMIT" $ALL
if ls "$S/blobs" | grep -q incomplete; then t_not_ok "no_incomplete_left_in_cache"; else t_ok "no_incomplete_left_in_cache"; fi

HF_HUB_OFFLINE=1 $F org/tiny --cache-dir "$C" --include '*.json' >"$TMP/out.txt" 2>"$TMP/err.txt"
rc=$?
n=$(wc -l <"$TMP/out.txt")
if [ $rc -eq 0 ] && [ "$n" -eq 5 ]; then t_ok "offline_serves_from_the_cache"; else
	t_not_ok "offline_serves_from_the_cache" "rc=$rc n=$n $(cat "$TMP/err.txt")"; fi
HF_HUB_OFFLINE=1 $F org/tiny --cache-dir "$TMP/empty" 2>"$TMP/err.txt"
rc=$?
if [ $rc -eq 1 ] && grep -q "not in the cache" "$TMP/err.txt"; then t_ok "offline_without_cache_says_so"; else
	t_not_ok "offline_without_cache_says_so" "rc=$rc $(cat "$TMP/err.txt")"; fi

HF_HUB_OFFLINE=1 $F org/tiny --cache-dir "$C" --include 'model-0000*' --stdout >"$TMP/off.bin" 2>"$TMP/err.txt"
cat "$M/model-00001-of-00002.safetensors" "$M/model-00002-of-00002.safetensors" >"$TMP/want.bin"
t_same "offline_stdout_streams_from_the_cache" "$TMP/want.bin" "$TMP/off.bin"
$F org/tiny --revision "$COMMIT" --include config.json --cache-dir "$TMP/byc" >/dev/null 2>"$TMP/err.txt"
if [ -L "$TMP/byc/models--org--tiny/snapshots/$COMMIT/config.json" ] && [ ! -e "$TMP/byc/models--org--tiny/refs" ]; then
	t_ok "commit_revision_writes_no_ref"; else t_not_ok "commit_revision_writes_no_ref" "$(ls -R "$TMP/byc" | head)"; fi
$F org/c4 --dataset --include 'en/*validation*' --cache-dir "$TMP/dc" >/dev/null 2>"$TMP/err.txt"
t_run "dataset_cache_folder_is_datasets_org_name" test -s "$TMP/dc/datasets--org--c4/refs/main"

# ---- auth ----
ctl reset '{}'
HF_TOKEN=$TOKEN $F org/private --cache-dir "$TMP/pc" >"$TMP/out.txt" 2>"$TMP/err.txt"
rc=$?
stats
leaks=$(jq '.auth_leaks | length' "$TMP/stats.json")
authed=$(jq '[.requests[] | select(.server == "hub" and .auth)] | length' "$TMP/stats.json")
cdn=$(jq '[.requests[] | select(.server == "cdn")] | length' "$TMP/stats.json")
if [ $rc -eq 0 ] && [ "$leaks" -eq 0 ] && [ "$authed" -gt 0 ] && [ "$cdn" -gt 0 ]; then
	t_ok "token_goes_to_the_hub_never_to_the_cdn"; else
	t_not_ok "token_goes_to_the_hub_never_to_the_cdn" "rc=$rc leaks=$leaks authed=$authed cdn=$cdn $(cat "$TMP/err.txt")"; fi
mkdir -p "$HF_HOME"
printf '%s\n' "$TOKEN" >"$HF_HOME/token"
$F org/gated --local-dir "$TMP/g1" >"$TMP/out2.txt" 2>"$TMP/err2.txt"
rc=$?
rm -f "$HF_HOME/token"
if [ $rc -eq 0 ]; then t_ok "token_read_from_hf_home_token"; else t_not_ok "token_read_from_hf_home_token" "$(cat "$TMP/err2.txt")"; fi
timeout 60 "$BIN/titan-hf-fetch" -q org/private --token "$TOKEN" --local-dir "$TMP/p2" \
	>"$TMP/out3.txt" 2>"$TMP/err3.txt"
t_grep "token_on_command_line_is_warned_against" "prefer HF_TOKEN" "$TMP/err3.txt"
$F org/gated --local-dir "$TMP/g" 2>"$TMP/err.txt"
rc=$?
if [ $rc -eq 1 ] && grep -q "gated.*accept its licence.*pass a token" "$TMP/err.txt"; then
	t_ok "gated_repo_without_token_says_accept_licence_and_pass_token"; else
	t_not_ok "gated_repo_without_token_says_accept_licence_and_pass_token" "rc=$rc $(cat "$TMP/err.txt")"; fi
HF_TOKEN=hf_wrong $F org/gated --local-dir "$TMP/g" 2>"$TMP/err4.txt"
t_grep "gated_repo_with_unapproved_token_says_403" "HTTP 403" "$TMP/err4.txt"
$F org/private --local-dir "$TMP/p" 2>"$TMP/err5.txt"
t_grep "private_repo_without_token_is_not_found_with_a_hint" "not found.*needs a token" "$TMP/err5.txt"
$F org/nope --local-dir "$TMP/p" 2>"$TMP/err6.txt"
t_grep "missing_repo_is_repo_not_found" "model org/nope not found" "$TMP/err6.txt"
$F org/tiny --revision v9 --local-dir "$TMP/p" 2>"$TMP/err7.txt"
t_grep "missing_revision_is_revision_not_found" "revision not found" "$TMP/err7.txt"
if grep -rl -a -e "$TOKEN" "$TMP" --exclude-dir=root 2>/dev/null | grep -v "/hfhome/" | grep -q .; then
	t_not_ok "token_never_printed_or_written" "$(grep -rl -a -e "$TOKEN" "$TMP" | head -3)"; else
	t_ok "token_never_printed_or_written"; fi
t_fails "a_listing_that_loops_back_is_refused" 1 $F org/loop --list
t_grep "the_refusal_says_the_listing_repeats" 'listed twice (a server that repeats its pages?)' "$TMP/.err"
$F org/evil --local-dir "$TMP/evil" 2>"$TMP/err.txt"
rc=$?
if [ $rc -eq 1 ] && grep -q "unsafe remote path" "$TMP/err.txt" && [ ! -e "$TMP/outside" ]; then
	t_ok "remote_path_with_dotdot_is_refused"; else
	t_not_ok "remote_path_with_dotdot_is_refused" "rc=$rc $(cat "$TMP/err.txt")"; fi

# ---- faults: each ends in a correct file or a clear error ----
BIG=model-00001-of-00002.safetensors
fault_case() { # name, fault json..., then fetch into a fresh cache and compare
	name=$1; shift
	ctl reset '{}'
	for f in "$@"; do ctl fault "$f"; done
	rm -rf "$TMP/fc"
	$F org/tiny --include "$BIG" --cache-dir "$TMP/fc" >"$TMP/out.txt" 2>"$TMP/err.txt"
	rc=$?
	if [ $rc -eq 0 ] && cmp -s "$M/$BIG" "$TMP/fc/models--org--tiny/snapshots/$COMMIT/$BIG"; then
		t_ok "$name"; else t_not_ok "$name" "rc=$rc $(tail -3 "$TMP/err.txt")"; fi
}
fault_case "cut_mid_body_resumes_to_a_correct_file" \
	"{\"path\": \"$BIG\", \"kind\": \"cut\", \"at\": 250000, \"times\": 2}"
n=$(nreq '.server == "cdn" and .range == "bytes=250000-"')
if [ "$n" -ge 1 ]; then t_ok "resume_asks_for_the_missing_range"; else t_not_ok "resume_asks_for_the_missing_range" "$(jq -c '.requests[] | select(.server=="cdn")' "$TMP/stats.json")"; fi
fault_case "503_then_success" "{\"path\": \"$BIG\", \"kind\": \"status\", \"status\": 503, \"times\": 2}"
start=$(date +%s)
fault_case "429_with_retry_after_is_honoured" \
	"{\"path\": \"$BIG\", \"kind\": \"status\", \"status\": 429, \"retry_after\": 2, \"times\": 1}"
el=$(( $(date +%s) - start ))
if [ "$el" -ge 1 ]; then t_ok "retry_after_waits"; else t_not_ok "retry_after_waits" "took ${el}s"; fi
fault_case "429_with_ratelimit_header_is_honoured" \
	"{\"path\": \"$BIG\", \"kind\": \"status\", \"status\": 429, \"ratelimit\": \"\\\"api\\\";r=0;t=1\", \"times\": 1}"
fault_case "server_ignoring_range_restarts_from_zero" \
	"{\"path\": \"$BIG\", \"kind\": \"cut\", \"at\": 300000, \"times\": 1}" \
	"{\"path\": \"$BIG\", \"kind\": \"norange\", \"skip\": 1, \"times\": 1}"
served=$(nreq '.method == "SERVE" and .code == 200 and (.faults | index("norange"))')
if [ "$served" -eq 1 ]; then t_ok "ignored_range_was_answered_whole"; else t_not_ok "ignored_range_was_answered_whole" "served=$served"; fi
fault_case "wrong_range_restarts_from_zero" \
	"{\"path\": \"$BIG\", \"kind\": \"cut\", \"at\": 100000, \"times\": 1}" \
	"{\"path\": \"$BIG\", \"kind\": \"badrange\", \"skip\": 1, \"times\": 1}"
t_grep "wrong_range_is_reported" "resumed at the wrong byte" "$TMP/err.txt"
fault_case "api_503_is_retried" "{\"path\": \"@revision\", \"kind\": \"status\", \"status\": 503, \"times\": 2}" \
	"{\"path\": \"@tree\", \"kind\": \"status\", \"status\": 502, \"times\": 1}"
fault_case "expired_cdn_address_is_asked_for_again" \
	"{\"path\": \"$BIG\", \"kind\": \"cut\", \"at\": 150000, \"times\": 1}" \
	"{\"path\": \"$BIG\", \"kind\": \"status\", \"status\": 403, \"skip\": 1, \"times\": 1}"
n=$(nreq '.method == "HEAD" and (.path | endswith("'"$BIG"'"))')
r=$(nreq '.server == "cdn" and .range == "bytes=150000-"')
if [ "$n" -eq 2 ] && [ "$r" -ge 1 ]; then t_ok "fresh_cdn_address_resumes_the_partial_file"; else
	t_not_ok "fresh_cdn_address_resumes_the_partial_file" "heads=$n ranged=$r"; fi
fault_case "bad_bytes_after_resume_are_fetched_again_whole" \
	"{\"path\": \"$BIG\", \"kind\": \"cut\", \"at\": 200000, \"times\": 1}" \
	"{\"path\": \"$BIG\", \"kind\": \"badsha\", \"offset\": 10, \"skip\": 1, \"times\": 1}"
t_grep "bad_bytes_after_resume_are_reported" "after a resume; fetching it again" "$TMP/err.txt"

ctl reset '{}'
ctl fault "{\"path\": \"$BIG\", \"kind\": \"badsha\", \"times\": 100}"
rm -rf "$TMP/fc"
$F org/tiny --include "$BIG" --cache-dir "$TMP/fc" 2>"$TMP/err.txt"
rc=$?
left=$(find "$TMP/fc" -type f -name '*' ! -path '*/refs/*' | wc -l)
if [ $rc -eq 1 ] && grep -q "sha256 mismatch" "$TMP/err.txt" && [ "$left" -eq 0 ] &&
	[ ! -e "$TMP/fc/models--org--tiny/snapshots/$COMMIT/$BIG" ]; then
	t_ok "wrong_sha256_is_an_error_and_leaves_no_file"; else
	t_not_ok "wrong_sha256_is_an_error_and_leaves_no_file" "rc=$rc left=$left $(cat "$TMP/err.txt")"; fi
ctl reset '{}'
ctl fault '{"path": "config.json", "kind": "badsha", "offset": 3, "times": 100}'
$F org/tiny --include config.json --local-dir "$TMP/cfg" 2>"$TMP/err.txt"
rc=$?
if [ $rc -eq 1 ] && grep -q "git sha1 mismatch" "$TMP/err.txt" && [ ! -e "$TMP/cfg/config.json" ]; then
	t_ok "wrong_git_blob_hash_is_an_error"; else t_not_ok "wrong_git_blob_hash_is_an_error" "rc=$rc $(cat "$TMP/err.txt")"; fi

ctl reset '{}'
ctl fault "{\"path\": \"$BIG\", \"kind\": \"status\", \"status\": 503, \"times\": 100}"
rm -rf "$TMP/fc"
$F org/tiny --include "$BIG" --cache-dir "$TMP/fc" --retries 2 2>"$TMP/err.txt"
rc=$?
if [ $rc -eq 1 ] && grep -q "gave up after 3 attempts" "$TMP/err.txt" &&
	[ ! -e "$TMP/fc/models--org--tiny/snapshots/$COMMIT/$BIG" ]; then
	t_ok "endless_503_gives_up_with_a_clear_error"; else
	t_not_ok "endless_503_gives_up_with_a_clear_error" "rc=$rc $(cat "$TMP/err.txt")"; fi

ctl reset '{}'
ctl fault "{\"path\": \"$BIG\", \"kind\": \"cut\", \"at\": 300000, \"times\": 100}"
ctl fault "{\"path\": \"$BIG\", \"kind\": \"norange\", \"times\": 100}"
rm -rf "$TMP/fc"
$F org/tiny --include "$BIG" --cache-dir "$TMP/fc" --retries 3 2>"$TMP/err.txt"
rc=$?
if [ $rc -eq 1 ] && grep -q "gave up after 4 attempts" "$TMP/err.txt" &&
	[ ! -e "$TMP/fc/models--org--tiny/blobs/$sha" ]; then
	t_ok "cuts_that_never_progress_give_up"; else
	t_not_ok "cuts_that_never_progress_give_up" "rc=$rc $(tail -3 "$TMP/err.txt")"; fi

# a killed run leaves NAME.incomplete; the next one asks only for the rest
ctl reset '{}'
rm -rf "$TMP/fc"
mkdir -p "$TMP/fc/models--org--tiny/blobs"
head -c 123456 "$M/$BIG" >"$TMP/fc/models--org--tiny/blobs/$sha.incomplete"
$F org/tiny --include "$BIG" --cache-dir "$TMP/fc" >/dev/null 2>"$TMP/err.txt"
n=$(nreq '.server == "cdn" and .range == "bytes=123456-"')
if [ "$n" -eq 1 ] && cmp -s "$M/$BIG" "$TMP/fc/models--org--tiny/blobs/$sha"; then
	t_ok "incomplete_file_from_a_killed_run_is_resumed"; else
	t_not_ok "incomplete_file_from_a_killed_run_is_resumed" "n=$n $(cat "$TMP/err.txt")"; fi

# ---- streaming ----
cat "$D"/en/c4-train.0000[0-2]-of-01024.json.gz >"$TMP/want.gz"
ctl reset '{}'
$F org/c4 --dataset --include 'en/c4-train.*' --stdout >"$TMP/got.gz" 2>"$TMP/err.txt"
t_same "stdout_streams_the_files_in_order" "$TMP/want.gz" "$TMP/got.gz"
ctl reset '{}'
ctl fault '{"path": "en/c4-train.00001-of-01024.json.gz", "kind": "cut", "at": 5000, "times": 1}'
ctl fault '{"path": "en/c4-train.00002-of-01024.json.gz", "kind": "cut", "at": 7000, "times": 1}'
ctl fault '{"path": "en/c4-train.00002-of-01024.json.gz", "kind": "norange", "skip": 1, "times": 1}'
$F org/c4 --dataset --include 'en/c4-train.*' --stdout >"$TMP/got.gz" 2>"$TMP/err.txt"
t_same "stdout_stream_continues_at_the_right_byte_after_cuts" "$TMP/want.gz" "$TMP/got.gz"
n=$(nreq '.method == "SERVE" and .code == 200 and (.faults | index("norange"))')
r=$(nreq '.method == "SERVE" and .code == 206')
if [ "$n" -eq 1 ] && [ "$r" -eq 1 ]; then t_ok "stream_met_a_resume_and_an_ignored_range"; else
	t_not_ok "stream_met_a_resume_and_an_ignored_range" "200-after-range=$n 206=$r"; fi
ctl reset '{}'
ctl fault '{"path": "en/c4-train.00001-of-01024.json.gz", "kind": "badsha", "times": 100}'
$F org/c4 --dataset --include 'en/c4-train.*' --stdout >"$TMP/got.gz" 2>"$TMP/err.txt"
rc=$?
if [ $rc -eq 1 ] && grep -q "sha256 mismatch.*discard the output" "$TMP/err.txt"; then
	t_ok "stdout_stream_with_bad_bytes_fails"; else t_not_ok "stdout_stream_with_bad_bytes_fails" "rc=$rc $(cat "$TMP/err.txt")"; fi
ctl reset '{}'
if [ -w /dev/full ]; then
	$F org/c4 --dataset --include 'en/c4-train.*' --stdout >/dev/full 2>"$TMP/err.txt"
	rc=$?
	if [ $rc -eq 1 ] && grep -q "disk full" "$TMP/err.txt"; then t_ok "disk_full_is_a_clear_error"; else
		t_not_ok "disk_full_is_a_clear_error" "rc=$rc $(cat "$TMP/err.txt")"; fi
else
	t_skip "disk_full_is_a_clear_error" "no /dev/full"
fi

# ---- parallel ----
ctl reset '{}'
rm -rf "$TMP/par"
$F org/tiny -j 8 --local-dir "$TMP/par" >/dev/null 2>"$TMP/err.txt"
# shellcheck disable=SC2086
same_tree "parallel_fetch_of_every_file_is_correct" "$TMP/par" $ALL

t_done
