#!/bin/sh
# lib/comm/nccl.c against a fake NCCL and the fake CUDA runtime
# (tests/comm/nccl_host.c, tests/gpu/fake_cuda.c): the barrier's float is
# written before it is all-reduced, and nccl_free takes the in-flight list
# under the mutex the watchdog walks it with (issue 24, item 20).  Needs CUDA's
# and NCCL's headers, not a GPU.
. tests/lib.sh

inc=${CUDA_HOME:-/usr/local/cuda}/include
if [ ! -f "$inc/cuda_runtime_api.h" ] || [ ! -f "$inc/nccl.h" ]; then
	t_skip "nccl.c against the fake NCCL" "no CUDA or NCCL headers in $inc"
	t_done
fi
if ${CC:-cc} -std=c17 -Wall -Wextra -Werror -Wno-format-truncation -O1 -D_GNU_SOURCE -DTITAN_CUDA=1 \
	-Ilib -Itests/gpu -I"$inc" -o "$TMP/nccl_host" tests/comm/nccl_host.c tests/gpu/fake_cuda.c \
	lib/comm/nccl.c lib/core/err.c -Wl,--wrap=pthread_mutex_lock -lpthread >"$TMP/cc.log" 2>&1; then
	t_ok "nccl.c builds against the fake NCCL"
else
	t_not_ok "nccl.c builds against the fake NCCL" "$(head -5 "$TMP/cc.log")"
	t_done
fi
t_relay_tap nccl_host "$TMP/nccl_host"
t_done
