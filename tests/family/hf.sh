#!/bin/sh
# titan-ckpt-convert --model NAME: each family's Hugging Face import and export
# against what transformers' save_pretrained wrote (tests/family/golden/<case>/hf,
# scripts/family_golden.py), round trips bit-exact both ways.  With $PYTHON
# holding transformers, transformers also loads titan's export and computes the
# golden logits.
. tests/lib.sh
C="$BIN/titan-ckpt-convert"
PY="${PYTHON:-python3}"

# case model flavor heads kv_heads
for spec in "qwen3 qwen3 debugmodel 4 2" "qwen3_moe qwen3 debugmodel_moe 4 2" \
	"deepseek_v3_hf deepseek_v3 671B 4 4" "gpt_oss gpt_oss debugmodel 4 2" \
	"llama4_irope llama4 debugmodel_irope 4 2"; do
	set -- $spec
	G=tests/family/golden/$1
	opts="--model $2 --flavor $3 --n-heads $4 --n-kv-heads $5"
	t_run "$1: from-hf reads transformers' folder" "$C" from-hf "$G/hf" "$TMP/$1.dcp" $opts
	t_run "$1: to-hf writes it back" "$C" to-hf "$TMP/$1.dcp" "$TMP/$1.hf" $opts
	t_run "$1: HF -> titan -> HF gives transformers' tensors exactly, no more, no fewer" \
		"$C" diff "$TMP/$1.hf/model.safetensors" "$G/hf/model.safetensors"
	"$C" from-hf "$TMP/$1.hf" "$TMP/$1.dcp2" $opts >/dev/null 2>&1
	t_run "$1: titan -> HF -> titan is bit-exact" "$C" diff "$TMP/$1.dcp" "$TMP/$1.dcp2"
	"$C" to-hf "$TMP/$1.dcp2" "$TMP/$1.hf2" $opts >/dev/null 2>&1
	t_same "$1: a second export is the same file" "$TMP/$1.hf/model.safetensors" \
		"$TMP/$1.hf2/model.safetensors"
	if "$PY" -c 'import transformers, safetensors' >/dev/null 2>&1; then
		t_run "$1: transformers loads titan's export and computes the golden logits" "$PY" -c '
import sys, torch, transformers
from safetensors.torch import load_file
m = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float64)
if hasattr(m, "set_experts_implementation") and (m.config.model_type.endswith("moe") or
                                                  getattr(m.config, "n_routed_experts", 0) or
                                                  getattr(m.config, "num_local_experts", 0)) \
        and m.config.model_type != "llama4_text":  # its experts are one batched matmul
    m.set_experts_implementation("eager")  # grouped_mm has no float64
ref = load_file(sys.argv[2])
got = m(input_ids=ref["ids"].long()).logits
err = ((got - ref["logits"].double()).abs().max() / ref["logits"].abs().max()).item()
print("rel err", err)
assert err < 1e-5, err
' "$TMP/$1.hf" "$G/ref.safetensors"
	else
		t_skip "$1: transformers loads titan's export and computes the golden logits" \
			"no transformers in \$PYTHON ($PY)"
	fi
done
t_grep "qwen3: config.json says Qwen3ForCausalLM" '"Qwen3ForCausalLM"' "$TMP/qwen3.hf/config.json"
t_grep "qwen3: config.json keeps head_dim apart from hidden_size / heads" '"head_dim": 16' \
	"$TMP/qwen3.hf/config.json"
t_grep "qwen3: config.json ties the embeddings as the flavor does" '"tie_word_embeddings": true' \
	"$TMP/qwen3.hf/config.json"

t_grep "qwen3_moe: config.json says Qwen3MoeForCausalLM" '"Qwen3MoeForCausalLM"' \
	"$TMP/qwen3_moe.hf/config.json"
t_grep "qwen3_moe: config.json has the experts" '"num_experts": 64' "$TMP/qwen3_moe.hf/config.json"
"$BIN/titan-ckpt-convert" info "$TMP/qwen3_moe.dcp" >"$TMP/moe.info"
t_grep "qwen3_moe: from-hf stacks the experts as torchtitan's GroupedExperts" \
	'^layers.1.moe.experts.w2 .*(64, 32, 8)' "$TMP/moe.info"

t_grep "deepseek_v3_hf: config.json says DeepseekV3ForCausalLM" '"DeepseekV3ForCausalLM"' \
	"$TMP/deepseek_v3_hf.hf/config.json"
t_grep "deepseek_v3_hf: config.json has MLA's dims from the checkpoint" '"kv_lora_rank": 24' \
	"$TMP/deepseek_v3_hf.hf/config.json"
t_grep "deepseek_v3_hf: config.json counts the dense layers" '"first_k_dense_replace": 1' \
	"$TMP/deepseek_v3_hf.hf/config.json"
"$BIN/titan-ckpt-convert" info "$TMP/deepseek_v3_hf.dcp" >"$TMP/ds.info"
t_grep "deepseek_v3_hf: e_score_correction_bias is torchtitan's expert_bias" \
	'^layers.2.moe.expert_bias ' "$TMP/ds.info"

t_grep "gpt_oss: config.json says GptOssForCausalLM" '"GptOssForCausalLM"' \
	"$TMP/gpt_oss.hf/config.json"
t_grep "gpt_oss: config.json alternates sliding and full layers from layer 0" \
	'"sliding_attention",' "$TMP/gpt_oss.hf/config.json"
"$BIN/titan-ckpt-convert" info "$TMP/gpt_oss.dcp" >"$TMP/oss.info"
t_grep "gpt_oss: from-hf transposes the fused experts to torchtitan's (experts, out, in)" \
	'^layers.0.moe.experts.mlp1_weight .*(8, 32, 32)' "$TMP/oss.info"
t_grep "gpt_oss: ... and mlp2 likewise" '^layers.0.moe.experts.mlp2_weight .*(8, 32, 16)' \
	"$TMP/oss.info"

t_grep "llama4_irope: config.json says Llama4ForCausalLM" '"Llama4ForCausalLM"' \
	"$TMP/llama4_irope.hf/config.json"
"$BIN/titan-ckpt-convert" info "$TMP/llama4_irope.dcp" >"$TMP/l4.info"
t_grep "llama4_irope: from-hf splits the fused gate_up_proj into w1 ..." \
	'^layers.1.moe.experts.w1 .*(4, 16, 32)' "$TMP/l4.info"
t_grep "llama4_irope: ... and w3" '^layers.1.moe.experts.w3 .*(4, 16, 32)' "$TMP/l4.info"
t_grep "llama4_irope: dense layers keep Llama's feed_forward" \
	'^layers.0.feed_forward.w1.weight .*(48, 32)' "$TMP/l4.info"

t_fails "an unknown --model is a usage error" 2 "$C" to-hf "$TMP/qwen3.dcp" "$TMP/x" \
	--model gpt2 --flavor debugmodel
t_grep "the refusal names the family" "no model family 'gpt2'" "$TMP/.err"
t_fails "a flavor of another family is a usage error" 2 "$C" to-hf "$TMP/qwen3.dcp" "$TMP/x" \
	--model qwen3 --flavor 405B
t_done
