#!/bin/sh
# The GPU check, run from the repository's root on a fresh GPU machine (CUDA with
# nvcc, PyTorch, cuDNN; no Debian -dev packages, nothing downloadable) with the
# folder scripts/gpu/prepare.sh made (.gpu-deps, or GPU_DEPS=DIR) beside it:
#
#   1. unpack the carried Debian runtime libraries, find CUDA's and cuDNN's
#   2. build what the GPU tests and benchmarks link (make GPU_CHECK=1)
#   3. run the GPU tests (make check-gpu): every kernel against the CPU backend,
#      the CUDA backend's ops table, the model's step against the CPU's; then
#      Flux's text encoders (T5, CLIP) on the CUDA backend against the CPU
#      backend and transformers on tests/textenc's tiny models, a stage of
#      their own (tests/gpu/test_gpu_textenc) for the table; FLUX's
#      autoencoder likewise on tests/fluxae's (tests/gpu/test_gpu_fluxae); the
#      Flux transformer's training step on the CUDA backend against the CPU's
#      on a reduced flux-debug (tests/gpu/test_gpu_flux), another
#   4. titan-train on the GPU, as carried (built here, .gpu-deps/bin): the same
#      job on the CUDA and the CPU backend and on the CUDA backend with every
#      FSDP collective through NCCL in a world of one (TITAN_COMM_ALWAYS=1:
#      the whole train step through NCCL; tests/gpu/train.sh), Flux's trainer
#      (--module flux) on both backends in float32 and bf16
#      (tests/gpu/flux_train.sh, on the fixtures prepare.sh carries), 200 steps of
#      debugmodel on both (scripts/gpu/train_check.sh curve), compile.enable's
#      whole-step CUDA graph against the same steps op by op (train_check.sh
#      graph: the same losses, both step times), and later the 1B
#      flavor at t=8192 for tokens/s and MFU (train_check.sh mfu)
#   5. scripts/gpu/comm_check.sh (NCCL), on the comm tests built by prepare.sh
#      (.gpu-deps/build/tests/comm: the GPU_CHECK build has no comm) and
#      launched by the carried Open MPI's mpirun
#   6. benchmarks: the measured ceilings, cuBLASLt on Llama 3 8B's linears (bf16,
#      and float8 tensorwise / rowwise against it; the 8B-shaped model with Float8),
#      attention (cuDNN and titan's kernels; the families' variants on titan's),
#      the memory-bound kernels, training steps of an 8B-shaped model with 8
#      layers and of the 1B flavor; and PyTorch (torch.compile) on the same shapes
#      in the same run
#   7. a short table, printed last
#
# Every stage has a time limit and the whole stays within CHECK_BUDGET_S
# (default 540 s: a 9-minute device call); a stage that would not fit is
# skipped and the table says so.  Logs and the table go to $OUT (the device
# tool's folder that comes back) or build/gpu-check-out.
#
#   sh scripts/gpu/check.sh [--build-only]
#
# --build-only stops after the tests and the comm stage (which skip without a
# GPU, the comm stage launching 2 ranks instead): what scripts/gpu/selftest.sh
# runs on a machine without one.
set -u
build_only=0
[ "${1:-}" = --build-only ] && build_only=1

t_start=$(date +%s)
root=$(pwd)
deps=${GPU_DEPS:-$root/.gpu-deps}
out=${OUT:-$root/build/gpu-check-out}
budget=${CHECK_BUDGET_S:-540}
jobs=$(nproc 2>/dev/null || echo 4)
build=build/gpu-check
mkdir -p "$out"
log=$out/check.log
results=$out/results.txt
status=$out/stages.txt
: >"$log"
: >"$results"
: >"$status"

elapsed() { echo $(($(date +%s) - t_start)); }
say() { echo "$*" | tee -a "$log"; }

# stage NAME LIMIT_S cmd...: runs cmd with its output in the log (and the
# "result" lines in results.txt) unless fewer than LIMIT_S seconds of the
# budget are left; records "NAME ok|failed (rc)|timed out|skipped SECONDS".
stage() {
	name=$1 limit=$2
	shift 2
	left=$((budget - $(elapsed)))
	if [ "$left" -lt "$limit" ]; then
		echo "$name skipped: ${left}s of the budget left, it may take ${limit}s" >>"$status"
		say "== $name: skipped (${left}s left < ${limit}s)"
		return 1
	fi
	say "== $name ($(elapsed)s)"
	s0=$(date +%s)
	timeout -k 5 "$limit" "$@" >"$out/.stage" 2>&1
	rc=$?
	cat "$out/.stage" >>"$log"
	grep '^result ' "$out/.stage" >>"$results"
	secs=$(($(date +%s) - s0))
	case $rc in
	0) echo "$name ok ${secs}s" >>"$status" ;;
	124 | 137) echo "$name timed-out ${secs}s" >>"$status" ;;
	*) echo "$name failed($rc) ${secs}s" >>"$status" ;;
	esac
	tail -3 "$out/.stage"
	rm -f "$out/.stage"
	return $rc
}

# ---- 1. the machine and its libraries ----

say "GPU check of titan $(git rev-parse --short HEAD 2>/dev/null || echo '?') on $(hostname)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >>"$log" 2>&1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
[ -x "$CUDA_HOME/bin/nvcc" ] || CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /x/x)")")
[ -x "$CUDA_HOME/bin/nvcc" ] || { say "no nvcc found"; exit 1; }
export CUDA_HOME PATH="$CUDA_HOME/bin:$PATH"
cuda_ver=$(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
py=${PYTHON:-python3}
torch_ver=$($py -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)
say "GPU $gpu; CUDA $cuda_ver at $CUDA_HOME; torch $torch_ver"

# The carried runtime libraries, unpacked under build/ (dpkg-deb, or ar + tar),
# with the linker's names for them in $unpacked/lib.
[ -d "$deps/debs" ] || { say "no $deps/debs: run scripts/gpu/prepare.sh and carry it"; exit 1; }
unpacked=$root/build/gpu-deps
rm -rf "$unpacked"
mkdir -p "$unpacked/root" "$unpacked/lib"
for d in "$deps"/debs/*.deb; do
	if command -v dpkg-deb >/dev/null; then
		dpkg-deb -x "$d" "$unpacked/root"
	else
		data=$(ar t "$d" | grep '^data.tar')
		case $data in
		*.xz) unz="xz -dc" ;;
		*.zst) unz="zstd -dc" ;;
		*.gz) unz="gzip -dc" ;;
		*) unz="cat" ;;
		esac
		ar p "$d" "$data" | $unz | tar -x -f - -C "$unpacked/root"
	fi
done
multi=$unpacked/root/usr/lib/x86_64-linux-gnu
ln -sf "$multi/openblas-pthread/libopenblas.so.0" "$unpacked/lib/libopenblas.so"
ln -sf "$multi/libcmocka.so.0" "$unpacked/lib/libcmocka.so"
ln -sf "$multi/libdnnl.so.2" "$unpacked/lib/libdnnl.so"
ln -sf "$multi/libjansson.so.4" "$unpacked/lib/libjansson.so"
command -v make >/dev/null || export PATH="$PATH:$unpacked/root/usr/bin"

# A library's folder: the first of the candidates that holds NAME.
find_lib() {
	name=$1
	shift
	for dir in "$@"; do
		ls "$dir"/$name* >/dev/null 2>&1 && { echo "$dir"; return 0; }
	done
	return 1
}
site=$($py -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]) + "/nvidia")' 2>/dev/null || echo /nonexistent)
cublas_lib=$(find_lib libcublasLt.so "$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$site/cublas/lib") ||
	{ say "no libcublasLt found"; exit 1; }
[ -e "$cublas_lib/libcublasLt.so" ] || ln -sf "$(ls "$cublas_lib"/libcublasLt.so.* | head -1)" "$unpacked/lib/libcublasLt.so"
cudnn_lib=$(find_lib libcudnn.so "$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$site/cudnn/lib" /usr/lib/x86_64-linux-gnu) || cudnn_lib=
cudnn_inc=
for dir in "$CUDA_HOME/include" "$site/cudnn/include" /usr/include "$deps/include/cudnn"; do
	[ -f "$dir/cudnn.h" ] && { cudnn_inc=$dir; break; }
done
if [ -n "$cudnn_lib" ] && [ -n "$cudnn_inc" ]; then
	[ -e "$cudnn_lib/libcudnn.so" ] || ln -sf "$(ls "$cudnn_lib"/libcudnn.so.* | head -1)" "$unpacked/lib/libcudnn.so"
	cudnn_make="CUDNN=1 CUDNN_INC=$cudnn_inc"
	say "cuDNN: library in $cudnn_lib, headers in $cudnn_inc"
else
	cudnn_make="CUDNN=0"
	say "cuDNN: not found (attention runs on titan's kernels)"
fi
nccl_lib=$(find_lib libnccl.so "$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$site/nccl/lib" /usr/lib/x86_64-linux-gnu) || nccl_lib=
export LD_LIBRARY_PATH="$unpacked/lib:$multi:$multi/openblas-pthread:$cublas_lib${cudnn_lib:+:$cudnn_lib}${nccl_lib:+:$nccl_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The carried programs' Open MPI finds its components, help files, orted (a
# singleton's) and mpirun (openmpi-bin's orterun) under the unpacked copy,
# ahead of anything on the machine's PATH.
export OPAL_PREFIX=$unpacked/root/usr
export PATH="$unpacked/root/usr/bin:$PATH"
mpirun_carried=$unpacked/root/usr/bin/orterun
tbin=$deps/bin
train_ok=0
if [ -x "$tbin/titan-train" ]; then
	if "$tbin/titan-train" --version >>"$log" 2>&1; then
		train_ok=1
	else
		say "the carried titan-train does not start here: $(tail -1 "$log")"
	fi
else
	say "no carried titan-train ($tbin): prepare.sh makes it"
fi
# the carried programs, OpenMP on every core (a command prefix for stage)
train="env BIN=$tbin BUILD=$deps/build TEST_GEN=$deps/build/tests/shard/test_gen OMP_NUM_THREADS=$jobs"
export CPPFLAGS="-I$deps/include"
export LDFLAGS="-L$unpacked/lib -L$cublas_lib${cudnn_lib:+ -L$cudnn_lib}"
# (paths without spaces: the make arguments split on them)
mk="make --no-print-directory GPU_CHECK=1 BUILD=$build CUDA_HOME=$CUDA_HOME $cudnn_make CUDNN_LIBS=-lcudnn"

# ---- 2. build, 3. tests, 4. NCCL ----

# shellcheck disable=SC2086
stage build 150 $mk -j"$jobs" gpu-check-build || say "build failed: see $log"
export TITAN_TEST_TIMEOUT=100
# shellcheck disable=SC2086
stage tests 120 $mk check-gpu
tests_line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
# Flux's text encoders on the CUDA backend (issue 28): float32 and bf16 models
stage textenc 30 "$build/tests/gpu/test_gpu_textenc"
# the Flux transformer's training step on the CUDA backend (issue 29)
stage flux 30 "$build/tests/gpu/test_gpu_flux"
# FLUX's autoencoder on the CUDA backend (issue 28): float32 and bf16 models
stage fluxae 30 "$build/tests/gpu/test_gpu_fluxae"
# titan-train: the same job on both backends (a GPU-less machine checks the
# refusal), then 200 steps of debugmodel on both
# shellcheck disable=SC2086
[ "$train_ok" = 1 ] && stage train-equivalence 150 $train sh tests/gpu/train.sh
# titan-train --module flux: flux_debugmodel's steps on both backends, float32
# and bf16 (the carried fixtures: prepare.sh)
# shellcheck disable=SC2086
[ "$train_ok" = 1 ] && stage flux-train 120 $train TITAN_FIXTURES="$deps/fixtures" \
	sh tests/gpu/flux_train.sh
# NCCL: the comm tests as carried (built with the rest by prepare.sh), under
# the carried mpirun
stage comm 90 env BUILD="$deps/build" MPIRUN="$mpirun_carried" sh scripts/gpu/comm_check.sh
if [ "$build_only" = 1 ]; then
	echo "tests: ${tests_line:-did not run}"
	cat "$status"
	! grep -v ' ok ' "$status" | grep -q .
	exit $?
fi
# shellcheck disable=SC2086
[ "$train_ok" = 1 ] && stage train-200-steps 120 $train sh scripts/gpu/train_check.sh curve 200
# compile.enable's whole-step CUDA graph against the same steps op by op
# shellcheck disable=SC2086
[ "$train_ok" = 1 ] && stage train-graph 60 $train sh scripts/gpu/train_check.sh graph 40

# ---- 5. benchmarks, titan beside PyTorch, the most telling first ----

bench=$build/tests/gpu/bench_gpu
tb="$py scripts/gpu/torch_bench.py"
have_torch=0
[ "$torch_ver" != none ] && have_torch=1
if [ -x "$bench" ]; then
	stage bench-ceiling 40 "$bench" ceiling
	copy=$(awk '$2 == "ceiling" && $3 == "copy_GBps" { print $4 }' "$results")
	stage bench-gemm 45 "$bench" gemm
	stage bench-attention 45 "$bench" attention
	# the families' variants (issue 17): window + sinks, MLA heads, chunks
	stage bench-attention-variants 30 "$bench" attention-variants
	stage bench-8B-L8-op 75 "$bench" model 8B 8 1 8192 5 op
	# Float8 (issue 15): the scaled GEMMs against bf16, the model with each recipe
	stage bench-gemm8 45 "$bench" gemm8
	stage bench-8B-L8-op-f8tensorwise 75 "$bench" model 8B 8 1 8192 5 op tensorwise
	stage bench-8B-L8-op-f8rowwise 75 "$bench" model 8B 8 1 8192 5 op rowwise
fi
# shellcheck disable=SC2086
[ "$have_torch" = 1 ] && stage torch-8B-L8 110 $tb model 8B 8 1 8192 5
# shellcheck disable=SC2086
[ "$train_ok" = 1 ] && stage train-1B 120 $train sh scripts/gpu/train_check.sh mfu 1B 8192 8
[ -x "$bench" ] && stage bench-1B-op 75 "$bench" model 1B 0 1 8192 5 op
# shellcheck disable=SC2086
if [ "$have_torch" = 1 ]; then
	stage torch-1B 110 $tb model 1B 0 1 8192 5
	stage torch-gemm 30 $tb gemm
	stage torch-attention 30 $tb attention
fi
if [ -x "$bench" ]; then
	stage bench-kernels 45 "$bench" kernels "${copy:-0}"
	stage bench-8B-L8-none 75 "$bench" model 8B 8 1 8192 5 none
fi

# A cuDNN refusal only warns in titan-train and the benchmarks (attention
# still runs, on titan's float32 reference kernels): on a GPU machine with
# cuDNN it is a failure of the check, said here and in the table.
if [ -n "$cudnn_lib" ] && grep -q "reference kernels, not cuDNN" "$log"; then
	echo "cudnn-attention failed(refused) 0s" >>"$status"
	say "== cuDNN attention was expected and not taken:"
	grep "reference kernels, not cuDNN" "$log" | sort -u | head -5 | tee -a "$log"
fi

# ---- 6. the table ----

# value SECTION NAME: the figure, or "-"
value() {
	awk -v s="$1" -v n="$2" '$2 == s && $3 == n { v = $4 } END { print (v == "" ? "-" : v) }' "$results"
}
row() { # LABEL UNIT TITAN_SECTION TITAN_NAME [TORCH_SECTION TORCH_NAME]
	t=$(value "$3" "$4")
	r=-
	[ $# -ge 6 ] && r=$(value "$5" "$6")
	printf '%-44s %10s %10s  %s\n' "$1" "$t" "$r" "$2"
}
{
	echo
	echo "GPU check: $gpu, CUDA $cuda_ver, torch $torch_ver, $(elapsed)s in all"
	echo "tests: ${tests_line:-did not run}"
	sed 's/^/stage: /' "$status"
	printf '%-44s %10s %10s  %s\n' figure titan torch unit
	row "T5 (tiny) on cuda vs cpu, f32 / bf16" rel textenc t5_f32_cuda_vs_cpu textenc t5_bf16_cuda_vs_cpu
	row "CLIP (tiny) on cuda vs cpu, f32 / bf16" rel textenc clip_f32_cuda_vs_cpu textenc clip_bf16_cuda_vs_cpu
	row "Flux step (reduced) cuda vs cpu, loss / grads" rel flux step_loss_cuda_vs_cpu flux step_grad_cuda_vs_cpu
	row "Flux bf16 step cuda vs cpu, pred / grads" rel flux step_bf16_pred_cuda_vs_cpu flux step_bf16_grad_cuda_vs_cpu
	row "AE moments (tiny) on cuda vs cpu, f32 / bf16" rel fluxae moments_f32_cuda_vs_cpu fluxae moments_bf16_cuda_vs_cpu
	row "AE decoded (tiny) on cuda vs cpu, f32 / bf16" rel fluxae decoded_f32_cuda_vs_cpu fluxae decoded_bf16_cuda_vs_cpu
	row "copy bandwidth (read + write)" GB/s ceiling copy_GBps
	row "bf16 GEMM ceiling (best 8192^3)" TFLOP/s ceiling bf16_gemm_TFLOPs
	row "8B linears, fwd+dgrad+wgrad (t=8192)" TFLOP/s gemm 8B_linears_TFLOPs torch-gemm 8B_linears_TFLOPs
	row "  of the measured ceiling" % gemm 8B_linears_of_ceiling
	row "  w1 fwd (8192x14336x4096)" TFLOP/s gemm w1_fwd_TFLOPs torch-gemm w1_fwd_TFLOPs
	row "  output fwd (8192x128256x4096)" TFLOP/s gemm output_fwd_TFLOPs torch-gemm output_fwd_TFLOPs
	row "attention 8B fwd, cuDNN vs torch SDPA" TFLOP/s attention cudnn_8B_fwd_TFLOPs torch-attention sdpa_8B_fwd_TFLOPs
	row "attention 8B bwd, cuDNN vs torch SDPA" TFLOP/s attention cudnn_8B_bwd_TFLOPs torch-attention sdpa_8B_bwd_TFLOPs
	row "attention 8B fwd, titan's kernels" TFLOP/s attention titan_8B_fwd_TFLOPs
	row "attention 8B bwd, titan's kernels" TFLOP/s attention titan_8B_bwd_TFLOPs
	row "attention 1B fwd, cuDNN vs torch SDPA" TFLOP/s attention cudnn_1B_fwd_TFLOPs torch-attention sdpa_1B_fwd_TFLOPs
	row "GPT-OSS window 128 + sinks fwd / bwd" ms attention-variants gptoss_window128_fwd_ms attention-variants gptoss_window128_bwd_ms
	row "MLA 16B heads (192/128) fwd / bwd" ms attention-variants mla_16B_fwd_ms attention-variants mla_16B_bwd_ms
	row "Llama 4 chunk 2048 fwd / bwd" ms attention-variants llama4_chunk2048_fwd_ms attention-variants llama4_chunk2048_bwd_ms
	row "rmsnorm fwd" GB/s kernels rmsnorm_fwd_GBps
	row "swiglu bwd" GB/s kernels swiglu_bwd_GBps
	row "cross-entropy (128k vocab)" GB/s kernels cross_entropy_GBps
	row "adamw" GB/s kernels adamw_GBps
	row "8B-shaped, 8 layers, t=8192, AC op" tok/s model 8B_L8_t8192_op_tokens_per_s torch-model 8B_L8_t8192_none_tokens_per_s
	row "  MFU (torch: no AC, torch.compile)" % model 8B_L8_t8192_op_MFU torch-model 8B_L8_t8192_none_MFU
	row "  the same as a replayed CUDA graph" tok/s model 8B_L8_t8192_op_graph_tokens_per_s
	row "Float8 GEMM, 8B fwd linears, tensorwise" x gemm8 tensorwise_over_bf16
	row "Float8 GEMM, 8B fwd linears, rowwise" x gemm8 rowwise_over_bf16
	row "  w1 fwd bf16 / fp8 tensorwise" TFLOP/s gemm8 w1_bf16_TFLOPs gemm8 w1_fp8_tensorwise_TFLOPs
	row "8B-shaped, 8 layers, AC op, Float8 tensorwise" tok/s model 8B_L8_t8192_op_f8tensorwise_tokens_per_s
	row "8B-shaped, 8 layers, AC op, Float8 rowwise" tok/s model 8B_L8_t8192_op_f8rowwise_tokens_per_s
	row "8B-shaped, 8 layers, t=8192, no AC" tok/s model 8B_L8_t8192_none_tokens_per_s torch-model 8B_L8_t8192_none_tokens_per_s
	row "  MFU" % model 8B_L8_t8192_none_MFU torch-model 8B_L8_t8192_none_MFU
	row "  peak memory" GiB model 8B_L8_t8192_none_peak_GiB torch-model 8B_L8_t8192_none_peak_GiB
	row "1B, t=8192, AC op (torch: no AC)" tok/s model 1B_L16_t8192_op_tokens_per_s torch-model 1B_L16_t8192_none_tokens_per_s
	row "  MFU" % model 1B_L16_t8192_op_MFU torch-model 1B_L16_t8192_none_MFU
	row "titan-train 1B, t=8192, AC op, compile" tok/s train 1B_t8192_tokens_per_s
	row "  MFU (torchtitan's peak)" % train 1B_t8192_MFU
	row "  memory (the arena's high water)" GiB train 1B_t8192_memory_GiB
	row "titan-train 40 steps, NCCL (world 1) vs cuda" loss train nccl_w1_vs_cuda_max_diff
	row "  NCCL (world 1) vs cpu, largest difference" loss train nccl_w1_vs_cpu_max_diff
	row "  cuda vs cpu, largest difference" loss train cuda_w1_vs_cpu_max_diff
	row "titan-train step graph vs op by op: steps" steps train graph_steps
	row "  largest loss difference (bound 1e-6)" loss train graph_max_diff
	row "  bit for bit (1 yes)" - train graph_bitwise
	row "  step time, graph" ms train graph_step_ms
	row "  step time, op by op (--no-step-graph)" ms train eager_step_ms
	row "  speed-up of the graph" x train graph_speedup
	row "titan-train debugmodel, cuda vs cpu: steps" steps train debug_curve_steps
	row "  largest loss difference at a step" loss train debug_curve_max_diff
	row "  difference of the last 20 steps' means" loss train debug_curve_last_mean_diff
} >"$out/table.txt"
cat "$out/table.txt" >>"$log"
cat "$out/table.txt"
