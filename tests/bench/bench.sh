#!/bin/sh
# titan-bench: every subcommand that exists runs at tiny sizes, its --json
# parses with jq and holds its figures; the header states the CPU dispatch and
# the ceilings follow TITAN_CPU_ISA, no GEMM reading above its element type's;
# what cannot run here says why; the
# step and comm run under mpirun; --profile writes a trace and a
# memory snapshot that jq (and, with $PYTHON's torch, PyTorch's memory viewer)
# read.  Timings are not checked (performance is for make bench).
. tests/lib.sh
B="$BIN/titan-bench"
PY="${PYTHON:-python3}"
Q="--seconds 0.01 --threads 1"

# The most a row may read of its ceiling.  Under the sanitizers (SAN=1) the
# ceiling's chains are instrumented and run far below the hardware's rate,
# while OpenBLAS's GEMMs are not: there the bound is only that the figure is
# there.
PCT_MAX=100
[ "${SAN:-0}" = 1 ] && PCT_MAX=1e9

json_ok() { # name file jq-expression that must be true
	if jq -e "$3" "$2" >/dev/null 2>"$TMP/.jq"; then
		t_ok "$1"
	else
		t_not_ok "$1" "jq '$3' on $2: $(cat "$TMP/.jq") $(head -c 400 "$2")"
	fi
}

t_run "gemm --json on two given shapes" "$B" gemm --json $Q --shapes 16,16,16:32,64,48
cp "$TMP/.out" "$TMP/gemm.json"
json_ok "gemm: a float32 row per shape with TFLOP/s and percent of the ceiling" "$TMP/gemm.json" \
	'.bench == "gemm" and .ceiling.tflops > 0 and ([.rows[] | select(.dtype == "fp32")] | length) == 2
	 and (.ceiling_bf16 != null) as $b
	 | all(.rows[]; .tflops > 0 and .ms > 0 and .m * .n * .k > 0 and (.path | length) > 0
	       and (.pct_ceiling > 0 or (.dtype == "bf16" and ($b | not))))'
json_ok "gemm: the header names the level in force, the kernels, the bf16 path and OpenBLAS's" \
	"$TMP/gemm.json" '.cpu_level as $l | (.cpu | startswith($l + " ") or startswith($l + ","))
	 and (.cpu | test(", kernels [a-z0-9-]+, bf16 GEMMs .*, OpenBLAS "))'
json_ok "gemm: the bf16 ceiling is the dot products' at avx512_bf16, else the float32 one (none at amx)" \
	"$TMP/gemm.json" 'if .cpu_level == "amx" then .ceiling_bf16 == null
	 elif .cpu_level == "avx512_bf16" then .ceiling_bf16.isa == "avx512_bf16" and .ceiling_bf16.tflops > 0
	 else .ceiling_bf16.tflops == .ceiling.tflops end'
json_ok "gemm: every element type asked for is measured or listed as not available, with why" \
	"$TMP/gemm.json" \
	'([.rows[].dtype] + [.unavailable[].what] | unique) as $s
	 | all(("fp32", "bf16", "fp8-tensorwise", "fp8-rowwise"); . as $d | $s | index($d) != null)
	 and all(.unavailable[]; (.why | length) > 10)'
json_ok "gemm: the machine's load is in the report" "$TMP/gemm.json" '(.load | length) > 4'

t_run "gemm on a model's shapes (debugmodel, M = 8)" "$B" gemm --json $Q --shapes debugmodel \
	--tokens 8 --dtype fp32
json_ok "gemm debugmodel: its 4 distinct linears (wq=wk=wv=wo, w1=w3, w2, output)" "$TMP/.out" \
	'[.rows[] | [.n, .k]] == [[256, 256], [768, 256], [256, 768], [2048, 256]]
	 and .rows[0].shape == "wq,wk,wv,wo" and all(.rows[]; .m == 8)'

t_run "gemm prints an aligned table" "$B" gemm $Q --shapes 8,8,8 --dtype fp32
t_grep "gemm table: header and ceiling" '^shape .* TFLOP/s .* % ceiling$' "$TMP/.out"
t_grep "gemm table: the CUDA bench says why it cannot run" '^not available: cuda: ' "$TMP/.out"
t_grep "gemm table: the dispatch line after the header" \
	'^cpu: [a-z0-9_]*[ ,].*kernels .*, bf16 GEMMs .*, OpenBLAS ' "$TMP/.out"
t_grep "gemm table: the float32 ceiling" '^ceiling float32: [0-9.]* TFLOP/s (' "$TMP/.out"

# The ceilings follow TITAN_CPU_ISA: forced to avx2 (what an AVX2-only CPU
# runs: bf16 through the portable path) and to the baseline (OpenBLAS's kernel,
# which TITAN_CPU_ISA does not govern, still runs its own width), every GEMM
# stays under the ceiling of its element type.  128^3 on one thread comes near
# the peak, so a ceiling too low shows.
G="gemm --json $Q --shapes 128,128,128 --dtype fp32,bf16,fp8-rowwise"
if env TITAN_CPU_ISA=avx2 "$B" --help >/dev/null 2>&1; then
	t_run "gemm under TITAN_CPU_ISA=avx2" env TITAN_CPU_ISA=avx2 "$B" $G
	json_ok "avx2: the header says so, and the bf16 row runs the portable path" "$TMP/.out" \
		'.cpu_level == "avx2" and (.cpu | startswith("avx2"))
		 and ([.rows[] | select(.dtype == "bf16" and .path == "portable")] | length) == 1'
	json_ok "avx2: the bf16 ceiling is the float32 one, every row at most 100 % of its own" \
		"$TMP/.out" '.ceiling_bf16.tflops == .ceiling.tflops and .ceiling.isa != "baseline"
		 and (.rows | length) == 3 and all(.rows[]; .pct_ceiling > 0 and .pct_ceiling <= '"$PCT_MAX"')'
	t_run "gemm table under TITAN_CPU_ISA=avx2" env TITAN_CPU_ISA=avx2 "$B" gemm $Q \
		--shapes 8,8,8 --dtype bf16
	t_grep "avx2 table: the dispatch line names the level" '^cpu: avx2[ ,]' "$TMP/.out"
	t_grep "avx2 table: the bf16 ceiling is printed" '^ceiling bf16: [0-9.]* TFLOP/s (' "$TMP/.out"
	t_grep "avx2 table: a bf16 row, its path named" '^8x8x8 .* bf16 *portable ' "$TMP/.out"
else
	t_skip "gemm under TITAN_CPU_ISA=avx2" "this processor has no AVX2"
fi
# A oneDNN limited below what titan's level sends it (its own
# ONEDNN_MAX_CPU_ISA, or a build without bf16 kernels) refuses the bf16
# matmul: the portable path takes over, saying why, and the row still runs.
t_run "gemm with oneDNN limited to AVX2 (ONEDNN_MAX_CPU_ISA)" env ONEDNN_MAX_CPU_ISA=AVX2 "$B" \
	gemm --json $Q --shapes 32,32,32 --dtype bf16
json_ok "a refusing oneDNN: the bf16 row runs the portable path" "$TMP/.out" \
	'(.rows | length) == 1 and (.rows[0].path | startswith("portable"))
	 and (.cpu_level != "avx512_bf16" or (.rows[0].path | contains("oneDNN refused")))'
# A level forced below the processor's limits oneDNN when the backend starts,
# before its first GEMM of either type: a float32 row (oneDNN's sgemm) ahead
# of the bf16 one used to fix oneDNN's default ceiling, and a forced avx512
# then ran avx512_core_bf16 kernels, which no AVX-512-only processor has.  A
# ceiling the user gave oneDNN stands at a forced level too.
if env TITAN_CPU_ISA=avx512 "$B" --help >/dev/null 2>&1; then
	t_run "gemm float32 then bf16 under TITAN_CPU_ISA=avx512" env TITAN_CPU_ISA=avx512 "$B" \
		gemm --json $Q --shapes 64,64,64 --dtype fp32,bf16
	json_ok "avx512: the bf16 row after a float32 one runs no bf16 or AMX kernel" "$TMP/.out" \
		'.cpu_level == "avx512" and ([.rows[] | select(.dtype == "bf16")] | length) == 1
		 and all(.rows[] | select(.dtype == "bf16"); .path | test("bf16|amx") | not)'
	t_run "gemm under TITAN_CPU_ISA=avx512 with ONEDNN_MAX_CPU_ISA=AVX2" env TITAN_CPU_ISA=avx512 \
		ONEDNN_MAX_CPU_ISA=AVX2 "$B" gemm --json $Q --shapes 32,32,32 --dtype bf16
	json_ok "avx512: oneDNN keeps the user's ceiling and refuses; the portable path runs" \
		"$TMP/.out" '.cpu_level == "avx512" and (.rows | length) == 1
		 and (.rows[0].path | startswith("portable (oneDNN refused"))'
else
	t_skip "gemm under TITAN_CPU_ISA=avx512" "this processor has no AVX-512"
fi
t_run "gemm under TITAN_CPU_ISA=baseline" env TITAN_CPU_ISA=baseline "$B" $G
json_ok "baseline: every row at most 100 % of its ceiling (OpenBLAS's width counts)" "$TMP/.out" \
	'.cpu_level == "baseline" and (.rows | length) == 3
	 and all(.rows[]; .pct_ceiling > 0 and .pct_ceiling <= '"$PCT_MAX"')'
t_fails "an unknown TITAN_CPU_ISA is refused as bad usage" 2 env TITAN_CPU_ISA=bogus "$B" gemm \
	$Q --shapes 8,8,8
if [ "$(wc -l <"$TMP/.err")" -eq 1 ] && grep -q '^titan-bench: TITAN_CPU_ISA=bogus: expected ' \
	"$TMP/.err" && [ ! -s "$TMP/.out" ]; then
	t_ok "the refusal is one line naming the value and the levels, nothing on stdout"
else
	t_not_ok "the refusal is one line naming the value and the levels, nothing on stdout" \
		"$(cat "$TMP/.err" "$TMP/.out")"
fi

t_run "attention --json on a tiny GQA shape" "$B" attention --json $Q --attention-shape 1,32,4,2,16
json_ok "attention: forward and backward rows in float32 with TFLOP/s" "$TMP/.out" \
	'[.rows[] | select(.dtype == "fp32") | .pass] == ["forward", "backward"]
	 and all(.rows[]; .tflops > 0 and .shape == "1x32 h4/2 hd16")'
# 2 rows of 32 positions: causal 2 x 32 x 33 / 2 pairs; 3 documents of 10, 10
# and 12 positions: 2 x (55 + 55 + 78)
t_run "attention --docs 3: block-causal rows beside the causal ones" "$B" attention --json $Q \
	--attention-shape 2,32,4,2,16 --docs 3 --dtype fp32
json_ok "attention --docs: each mask's rows count its unmasked pairs" "$TMP/.out" \
	'[.rows[] | [.mask, .pass, .pairs]] == [["causal", "forward", 1056], ["causal", "backward", 1056],
	 ["docs 3", "forward", 376], ["docs 3", "backward", 376]] and all(.rows[]; .tflops > 0)'

t_run "io --json on 2 MiB of synthetic shards and checkpoint" "$B" io --json --threads 1 \
	--size 2M --seq 64 --batch 2 --dir "$TMP"
json_ok "io: loader cold and warm, checkpoint save and load, each against the raw disk" \
	"$TMP/.out" \
	'[.rows[] | .what + "/" + .cache] == ["loader epoch/cold", "loader epoch/warm",
	   "checkpoint save (DCP, fsync)/-", "checkpoint load (DCP)/cold"]
	 and all(.rows[]; .mb_s > 0 and .raw_mb_s > 0 and .ratio > 0)'
if ls "$TMP"/titan-bench-io.* >/dev/null 2>&1; then
	t_not_ok "io removes its work folder" "$(ls -d "$TMP"/titan-bench-io.*)"
else
	t_ok "io removes its work folder"
fi

t_need_fixture tokenizers/llama3_1/tokenizer.json
t_need_fixture corpus/en.jsonl
head -n 40 "$FIXTURES/corpus/en.jsonl" >"$TMP/docs.jsonl"
t_run "tokenize --json without a reference" "$B" tokenize --json $Q \
	--tokenizer "$FIXTURES/tokenizers/llama3_1" --input "$TMP/docs.jsonl"
json_ok "tokenize: titan's row, and the reference listed as not available" "$TMP/.out" \
	'.rows[0].encoder == "titan" and .rows[0].tokens > 1000 and .rows[0].mb_s > 0
	 and ([.unavailable[].what] | index("reference")) != null'
if "$PY" -c 'import tokenizers' 2>/dev/null; then
	t_run "tokenize --python: HF tokenizers on the same documents" "$B" tokenize --json $Q \
		--tokenizer "$FIXTURES/tokenizers/llama3_1" --input "$TMP/docs.jsonl" --python "$PY"
	json_ok "tokenize: the reference's ids are titan's, token for token" "$TMP/.out" \
		'([.rows[] | select(.encoder == "hf-tokenizers") | .same_ids] | unique) == ["yes"]
		 and .rows[0].x_ref > 0'
else
	t_skip "tokenize --python: HF tokenizers on the same documents" "no tokenizers in $PY"
fi
t_fails "tokenize --python with a missing interpreter is reported, not fatal" 0 "$B" tokenize \
	$Q --tokenizer "$FIXTURES/tokenizers/llama3_1" --input "$TMP/docs.jsonl" \
	--python "$TMP/no-such-python"
t_grep "tokenize: the missing reference says why" '^not available: reference: ' "$TMP/.out"

t_run "step --json: debugmodel, batch 2 x 64" "$B" step --json $Q --model debugmodel --batch 2 \
	--seq 64 --steps 2
json_ok "step: the phases in ms and as shares of the step, TFLOP/s against the ceiling" \
	"$TMP/.out" '[.rows[].phase] == ["step", "forward", "backward", "optimizer", "communication"]
	 and .rows[0].pct_step == 100 and .rows[0].tflops > 0
	 and (.rows[0].pct_ceiling > 0 or (.rows[0].dtype == "bf16" and .ceiling_bf16 == null))
	 and all(.rows[] | select(.pct_ceiling); .pct_ceiling <= '"$PCT_MAX"') and (.cpu | length) > 10
	 and all(.rows[]; .ms >= 0) and .tokens_per_s > 0 and .peak_gib > 0 and .ranks == 1
	 and ([.unavailable[].what] | index("data")) != null'
cat >"$TMP/f8.toml" <<EOT
[model]
flavor = "debugmodel"
converters = ["quantize.linear.float8"]
[training]
local_batch_size = 2
seq_len = 64
[quantize.linear.float8]
enable_fsdp_float8_all_gather = true
precompute_float8_dynamic_scale_for_fsdp = true
EOT
t_run "step under mpirun -np 2: FSDP 2, Float8 with the float8 all-gather" $MPIRUN -np 2 \
	"$B" step --json $Q --config "$TMP/f8.toml" --steps 2
json_ok "step FSDP 2: 2 ranks, time blocked in communication" "$TMP/.out" \
	'.ranks == 2 and (.rows[] | select(.phase == "communication") | .ms) > 0'
t_fails "step with an unknown flavor fails" 1 "$B" step $Q --model no-such-flavor
t_grep "step names the flavor" 'no-such-flavor' "$TMP/.err"
sed 's/^enable_fsdp/recipe_name = "rowwise"\nenable_fsdp/' "$TMP/f8.toml" >"$TMP/bad.toml"
t_fails "step with a job titan-train refuses fails" 1 "$B" step $Q --config "$TMP/bad.toml"
t_grep "step says why, as titan-train does" 'torchtitan asserts the same' "$TMP/.err"
t_run "comm under mpirun -np 2: titan against MPI" $MPIRUN -np 2 "$B" comm --json $Q --size 1M
json_ok "comm: each collective at each size, titan's and MPI's time and bus bandwidth" \
	"$TMP/.out" '([.rows[].op] | unique) == ["all_gather", "all_reduce", "reduce_scatter"]
	 and ([.rows[].bytes] | unique) == [8192, 32768, 131072, 524288]
	 and all(.rows[]; .titan_us > 0 and .mpi_us > 0 and .titan_busbw > 0 and .ratio > 0)'
t_run "comm in one process" "$B" comm $Q
t_grep "comm alone says it needs ranks" '^not available: collectives: one rank' "$TMP/.out"
t_fails "an unknown subcommand is bad usage" 2 "$B" frobnicate
t_fails "an unknown element type is bad usage" 2 "$B" gemm --dtype fp16
t_fails "a malformed shape is bad usage" 2 "$B" gemm --shapes 1,2
t_fails "a malformed attention shape is bad usage" 2 "$B" attention --attention-shape 1,2,3,2,4
t_fails "more documents than positions is bad usage" 2 "$B" attention --attention-shape 1,8,2,1,4 \
	--docs 9
t_fails "tokenize without --tokenizer is bad usage" 2 "$B" tokenize --input "$TMP/docs.jsonl"
t_run "--help" "$B" --help
t_grep "--help names the subcommands" 'titan-bench tokenize' "$TMP/.out"
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -eq 0 ]; then
	t_fails "gemm --device cuda without a GPU fails saying why" 1 "$B" gemm --device cuda
	t_grep "the GPU bench says it is not available" 'not available' "$TMP/.err"
else
	t_skip "gemm --device cuda without a GPU fails saying why" "this machine has a GPU"
fi

t_run "--profile writes a trace of the run" "$B" gemm $Q --shapes 16,16,16 --dtype fp32 \
	--profile "$TMP/prof"
T="$TMP/prof/iteration_1/rank0_trace.json"
json_ok "--profile: trace-event JSON with the GEMMs and their shapes" "$T" \
	'(.traceEvents | length) > 3 and all(.traceEvents[]; has("ph") and has("pid") and has("tid"))
	 and any(.traceEvents[]; .ph == "X" and .name == "matmul" and .args.m == 16 and .args.dtype == "fp32")
	 and any(.traceEvents[]; .ph == "C" and .name == "memory")'
S="$TMP/prof/iteration_1/rank0_memory_snapshot.pickle"
if [ -s "$S" ]; then t_ok "--profile: a memory snapshot"; else t_not_ok "--profile: a memory snapshot"; fi
if "$PY" -c 'import torch' 2>/dev/null; then
	t_run "PyTorch's memory viewer reads the snapshot" "$PY" -c '
import pickle, sys
import torch.cuda._memory_viz as mv
d = pickle.load(open(sys.argv[1], "rb"))
assert any(e["action"] == "alloc" for e in d["device_traces"][0])
mv.segsum(d); mv.trace(d); mv.trace_plot(d)' "$S"
else
	t_skip "PyTorch's memory viewer reads the snapshot" "no torch in $PY"
fi
t_done
