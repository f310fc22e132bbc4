#!/bin/sh
# GPU benchmarks (tests/gpu/bench_gpu.c) beside PyTorch's on the same shapes, when
# this machine has a GPU; one line saying why not otherwise.  The whole GPU
# check of a fresh GPU machine (build, tests, these figures, a table) is
# scripts/gpu/check.sh, which runs the same programs.
#
# Environment: PYTHON (with torch, for its side; default python3).
set -eu
PYTHON=${PYTHON:-python3}
BUILD=${BUILD:-build}
bench=$BUILD/tests/gpu/bench_gpu
make -s "$bench" >&2
if ! "$bench" ceiling | tee /dev/stderr | grep -q '^result'; then
	exit 0 # bench_gpu said why it skipped
fi
"$bench" gemm
"$bench" attention
"$bench" kernels
"$bench" model 8B 8 1 8192 5 op
"$bench" model 1B 0 1 8192 5 op
if "$PYTHON" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
	for what in gemm attention "model 8B 8 1 8192 5" "model 1B 0 1 8192 5"; do
		# shellcheck disable=SC2086
		"$PYTHON" scripts/gpu/torch_bench.py $what
	done
else
	echo "bench gpu: $PYTHON has no torch with CUDA: PyTorch's side skipped"
fi
