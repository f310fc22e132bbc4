// emu_abi.h: what the kernels' side of the CUDA emulator (cuda_emu.h, inline
// in every kernel file) and its runtime (emu.cc) share: a launch's
// configuration and the warp collectives' codes.
#ifndef TITAN_EMU_ABI_H
#define TITAN_EMU_ABI_H

#include <cstddef>
#include <cuda_runtime_api.h>
#include <vector_types.h>

namespace emu {
struct config {
	const char *kernel; // as the launch names it
	const char *file;
	int line;
	dim3 grid, block;
	size_t smem;
	cudaStream_t stream;
};
} // namespace emu

// emu_warp_op's operations.
enum { EMU_SHFL, EMU_SHFL_UP, EMU_SHFL_DOWN, EMU_SHFL_XOR, EMU_BALLOT, EMU_ANY, EMU_ALL,
       EMU_SYNCWARP };

#endif
