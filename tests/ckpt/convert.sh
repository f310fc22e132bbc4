#!/bin/sh
# titan-ckpt-convert against checkpoints made by PyTorch, safetensors and
# transformers (tests/ckpt/golden, scripts/ckpt_golden.py), and round trips.
. tests/lib.sh
C="$BIN/titan-ckpt-convert"
G=tests/ckpt/golden

# Every tensor both sides hold is equal and at least $3 were compared.
same_tensors() { # name A B min_count
	"$C" diff "$2" "$3" >"$TMP/diff.out" 2>"$TMP/diff.err"
	bad=$(grep -c -e ' differs ' -e 'shape-differs' -e 'kind-differs' -e 'value-differs' "$TMP/diff.out")
	ok=$(grep -c ' ok ' "$TMP/diff.out")
	if [ "$bad" -eq 0 ] && [ "$ok" -ge "$4" ]; then
		t_ok "$1"
	else
		t_not_ok "$1" "$bad differ, $ok equal (wanted >= $4): $(grep -v ' ok ' "$TMP/diff.out" | head -3) $(cat "$TMP/diff.err")"
	fi
}

for d in torch_new torch_new_2rank torch_old; do
	t_run "verify accepts the DCP folder torch wrote ($d)" "$C" verify "$G/$d"
done
same_tensors "torch 2.15 single-rank DCP reads exactly (every tensor vs safetensors' copy)" \
	"$G/torch_new" "$G/reference.safetensors" 84
same_tensors "torch 2.15 two-rank DTensor DCP reads exactly" "$G/torch_new_2rank" "$G/reference.safetensors" 21
same_tensors "torch 2.3 DCP (no version field, 5-field TensorProperties) reads exactly" \
	"$G/torch_old" "$G/reference.safetensors" 21
t_run "DCP folder and format_utils' single file hold the same tensors and values" \
	"$C" diff "$G/torch_new" "$G/single.pt"

"$C" info --json "$G/torch_new_2rank" >"$TMP/info.json"
t_grep "info --json lists both ranks' chunks" '"file": "__1_0.distcp"' "$TMP/info.json"
"$C" info "$G/torch_old" >"$TMP/info.txt"
t_grep "info reports the old layout's missing version" 'version none' "$TMP/info.txt"

# Resharding: any saved chunking to any other, exactly.
"$C" reshard "$G/torch_new" "$TMP/r3" --chunks 3 >/dev/null 2>&1
t_run "reshard into 3 ranks verifies" "$C" verify "$TMP/r3"
t_run "reshard into 3 ranks keeps every value" "$C" diff "$G/torch_new" "$TMP/r3"
[ -f "$TMP/r3/__2_0.distcp" ] && t_ok "reshard writes one file per rank" || t_not_ok "reshard writes one file per rank"
"$C" reshard "$G/torch_new_2rank" "$TMP/r1" --chunks 1 >/dev/null 2>&1
same_tensors "2-rank torch checkpoint reshards to 1 rank exactly" "$TMP/r1" "$G/reference.safetensors" 21
"$C" reshard "$G/torch_new" "$TMP/rd1" --chunks 4 --dim 1 >/dev/null 2>&1
t_run "reshard along dim 1 keeps every value" "$C" diff "$G/torch_new" "$TMP/rd1"

# Round trips, bit-exact: titan DCP -> single -> DCP.
"$C" single-to-dcp "$G/single.pt" "$TMP/a" >/dev/null 2>&1
"$C" dcp-to-single "$TMP/a" "$TMP/a.pt" >/dev/null 2>&1
"$C" single-to-dcp "$TMP/a.pt" "$TMP/b" >/dev/null 2>&1
t_same "titan DCP -> single -> DCP: data file bit-exact" "$TMP/a/__0_0.distcp" "$TMP/b/__0_0.distcp"
t_same "titan DCP -> single -> DCP: .metadata bit-exact" "$TMP/a/.metadata" "$TMP/b/.metadata"
t_run "torch.save file from format_utils converts to DCP with every value" "$C" diff "$G/single.pt" "$TMP/a"

# HF export and import against transformers' own save.
"$C" to-hf "$G/torch_new" "$TMP/hf" --flavor debugmodel --n-heads 4 --n-kv-heads 2 >/dev/null 2>&1
t_run "to-hf equals transformers' model.safetensors exactly (RoPE permutation included)" \
	"$C" diff "$TMP/hf/model.safetensors" "$G/hf/model.safetensors"
t_grep "to-hf writes a LlamaForCausalLM config" '"num_key_value_heads": 2' "$TMP/hf/config.json"
"$C" from-hf "$G/hf" "$TMP/fromhf" --flavor debugmodel --n-heads 4 --n-kv-heads 2 >/dev/null 2>&1
same_tensors "from-hf gives torchtitan's weights exactly" "$TMP/fromhf" "$G/torch_new" 21
"$C" to-hf "$TMP/fromhf" "$TMP/hf2" --flavor debugmodel --n-heads 4 --n-kv-heads 2 >/dev/null 2>&1
"$C" from-hf "$TMP/hf2" "$TMP/fromhf2" --flavor debugmodel --n-heads 4 --n-kv-heads 2 >/dev/null 2>&1
"$C" to-hf "$TMP/fromhf2" "$TMP/hf3" --flavor debugmodel --n-heads 4 --n-kv-heads 2 >/dev/null 2>&1
t_same "HF -> titan -> HF is bit-exact" "$TMP/hf2/model.safetensors" "$TMP/hf3/model.safetensors"
t_run "HF -> titan -> HF keeps every tensor" "$C" diff "$TMP/hf2/model.safetensors" "$G/hf/model.safetensors"
"$C" to-hf "$G/torch_new" "$TMP/hfs" --flavor debugmodel --n-heads 4 --n-kv-heads 2 --max-shard-size 40K >/dev/null 2>&1
t_grep "to-hf shards with an index" '"weight_map"' "$TMP/hfs/model.safetensors.index.json"
t_run "sharded HF export reads back whole" "$C" diff "$TMP/hfs" "$G/hf/model.safetensors"

# An HF model without lm_head.weight is tied only when it says so.
"$C" to-hf "$G/torch_new" "$TMP/tied" --flavor 1B --n-heads 4 --n-kv-heads 2 >/dev/null 2>&1
t_grep "a tied flavor's export says tie_word_embeddings" '"tie_word_embeddings": true' "$TMP/tied/config.json"
t_run "from-hf of a tied model (config.json says so) takes the embedding as output" \
	"$C" from-hf "$TMP/tied" "$TMP/tied-dcp" --flavor debugmodel --n-heads 4 --n-kv-heads 2
sed 's/"tie_word_embeddings": true/"tie_word_embeddings": false/' "$TMP/tied/config.json" >"$TMP/cfg"
mv "$TMP/cfg" "$TMP/tied/config.json"
t_fails "from-hf refuses a model without lm_head.weight whose config.json does not tie it" 1 \
	"$C" from-hf "$TMP/tied" "$TMP/untied-dcp" --flavor debugmodel --n-heads 4 --n-kv-heads 2
t_grep "the refusal names lm_head.weight" 'no lm_head.weight, and the model does not tie it' "$TMP/.err"
if [ -e "$TMP/untied-dcp" ]; then t_not_ok "nothing is written when refused" "$(ls "$TMP/untied-dcp")"; else t_ok "nothing is written when refused"; fi
rm "$TMP/tied/config.json"
t_fails "without config.json, an untied flavor refuses it too" 1 \
	"$C" from-hf "$TMP/tied" "$TMP/untied-dcp" --flavor debugmodel --n-heads 4 --n-kv-heads 2
t_run "without config.json, a tied flavor ties it" \
	"$C" from-hf "$TMP/tied" "$TMP/tied-dcp2" --flavor 1B --n-heads 4 --n-kv-heads 2

# Model-only export in bfloat16, rounded as torch rounds.
"$C" dcp-to-single "$G/torch_new" "$TMP/m.safetensors" --model-only --export-dtype bfloat16 2>/dev/null
t_run "model-only bfloat16 export equals torch's .to(bfloat16)" \
	"$C" diff "$TMP/m.safetensors" "$G/reference_bf16.safetensors"

# Damage is found and named.
cp -r "$G/torch_new" "$TMP/bad"
dd if=/dev/zero of="$TMP/bad/__0_0.distcp" bs=1 count=16 seek=70000 conv=notrunc 2>/dev/null
t_fails "verify finds a corrupted chunk" 1 "$C" verify "$TMP/bad"
t_grep "the message names the file" '__0_0.distcp' "$TMP/.err"
cp -r "$G/torch_new" "$TMP/short"
truncate -s 100000 "$TMP/short/__0_0.distcp"
t_fails "verify finds a truncated data file" 1 "$C" verify "$TMP/short"
mkdir -p "$TMP/evil"
printf '\200\002cos\nsystem\n(S"echo pwned"\ntR.' >"$TMP/evil/.metadata"
t_fails "a .metadata naming os.system is refused" 1 "$C" info "$TMP/evil"
t_grep "the refusal names the global" 'os.system is not allowed' "$TMP/.err"
t_fails "a folder without .metadata is not a checkpoint" 1 "$C" verify "$TMP"
t_fails "unknown command is a usage error" 2 "$C" frobnicate x

# The benchmark's save/load path, small: 4 rank files, async, data checked.
t_run "bench saves and loads back the same values (4 ranks)" "$C" bench "$TMP/bench" --size 3M --chunks 4
t_run "bench async save loads back the same values" "$C" bench "$TMP/bench2" --size 3M --async

t_done
