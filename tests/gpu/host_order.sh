#!/bin/sh
# lib/gpu/gpu.c's gpu_upload, gpu_memset and gpu_download against a fake CUDA
# runtime (tests/gpu/fake_cuda.c) that models the legacy default stream and
# the non-blocking streams the backend and NCCL use: each copy must be ordered
# with every stream (issue 24, item 17).  Needs CUDA's headers, not a GPU.
. tests/lib.sh

inc=${CUDA_HOME:-/usr/local/cuda}/include
if [ ! -f "$inc/cuda_runtime_api.h" ]; then
	t_skip "gpu.c's copies against the fake runtime" "no CUDA headers in $inc"
	t_done
fi
# --gc-sections: gpu.c's functions the test never reaches need no fake
if ${CC:-cc} -std=c17 -Wall -Wextra -Werror -Wno-format-truncation -O1 -D_GNU_SOURCE -DTITAN_CUDA=1 -ffunction-sections \
	-Ilib -Itests/gpu -I"$inc" -o "$TMP/host_order" tests/gpu/host_order.c tests/gpu/fake_cuda.c \
	lib/gpu/gpu.c lib/core/err.c -Wl,--gc-sections -lpthread >"$TMP/cc.log" 2>&1; then
	t_ok "gpu.c builds against the fake CUDA runtime"
else
	t_not_ok "gpu.c builds against the fake CUDA runtime" "$(head -5 "$TMP/cc.log")"
	t_done
fi
t_relay_tap host_order "$TMP/host_order"
t_done
