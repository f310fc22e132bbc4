// The CUDA emulator itself (tests/emu/): what it promises in cuda_emu.h and
// emu.cc, each against the value the device gives.  Launch limits: refused
// with the device's error and nothing run.  Warp collectives: every shuffle
// kind at widths 32, 16 and 4, votes, a source outside the mask.  Blocks of
// two and three dimensions.  Shared memory poisoned before each block, static
// and dynamic.  Atomics across blocks.  What the device leaves undefined or
// hangs on ends the program with a message naming the kernel, and a
// misaligned vector access stops it under UBSan (death tests in a child).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
extern "C" { // (cmocka.h has no C++ guards)
#include <cmocka.h>
}

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>

__global__ void fill_kernel(int *out, int v)
{
	out[(blockIdx.x * blockDim.x + threadIdx.x)] = v;
}

static int launch_error(dim3 grid, dim3 block, size_t smem)
{
	static int sink[1 << 16];
	fill_kernel<<<grid, block, smem>>>(sink, 1);
	return (int)cudaGetLastError();
}

static void launches_over_the_device_limits_are_refused(void **state)
{
	(void)state;
	assert_int_equal(launch_error(1, 1024, 0), cudaSuccess);
	assert_int_equal(launch_error(1, 1025, 0), cudaErrorInvalidConfiguration);
	assert_int_equal(launch_error(1, dim3(32, 1, 65), 0), cudaErrorInvalidConfiguration);
	assert_int_equal(launch_error(1, dim3(64, 32), 0), cudaErrorInvalidConfiguration);
	assert_int_equal(launch_error(0, 32, 0), cudaErrorInvalidConfiguration);
	assert_int_equal(launch_error(dim3(1, 65536), 32, 0), cudaErrorInvalidConfiguration);
	assert_int_equal(launch_error(1, 0, 0), cudaErrorInvalidConfiguration);
	// the error is reported once, then cleared, as cudaGetLastError does
	assert_int_equal(cudaGetLastError(), cudaSuccess);
	// dynamic shared memory: 48 KiB unless raised, never past 227 KiB
	assert_int_equal(launch_error(1, 32, 48 * 1024), cudaSuccess);
	assert_int_equal(launch_error(1, 32, 48 * 1024 + 4), cudaErrorInvalidValue);
	assert_int_equal(cudaFuncSetAttribute(fill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
					      228 * 1024),
			 cudaErrorInvalidValue);
	assert_int_equal(cudaFuncSetAttribute(fill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
					      100 * 1024),
			 cudaSuccess);
	assert_int_equal(launch_error(1, 32, 100 * 1024), cudaSuccess);
	assert_int_equal(launch_error(1, 32, 100 * 1024 + 4), cudaErrorInvalidValue);
	// a refused launch runs nothing
	int out[64] = {0};
	fill_kernel<<<1, 2048>>>(out, 7);
	assert_int_equal(cudaGetLastError(), cudaErrorInvalidConfiguration);
	for (int i = 0; i < 64; i++)
		assert_int_equal(out[i], 0);
}

// Every lane of one warp records what each collective gave it.
__global__ void collectives_kernel(int *out, int width)
{
	int lane = threadIdx.x, *o = out + 8 * lane;
	o[0] = __shfl_sync(0xffffffffu, 100 + lane, 3, width);
	o[1] = __shfl_up_sync(0xffffffffu, 100 + lane, 2, width);
	o[2] = __shfl_down_sync(0xffffffffu, 100 + lane, 5, width);
	o[3] = __shfl_xor_sync(0xffffffffu, 100 + lane, 6, width);
	o[4] = (int)__ballot_sync(0xffffffffu, lane % 3 == 0);
	o[5] = __any_sync(0xffffffffu, lane == 17) + 2 * __all_sync(0xffffffffu, lane < 32) +
	       4 * __all_sync(0xffffffffu, lane < 31);
	// lanes 0..15 alone, reading lane 20, outside their mask: undefined
	if (lane < 16)
		o[6] = __shfl_sync(0x0000ffffu, 100 + lane, 20);
	else
		o[6] = __shfl_sync(0xffff0000u, 100 + lane, lane - 16 + 16); // itself
	o[7] = (int)__shfl_sync(0xffffffffu, 1.5f * lane, 31 - lane);
}

static void warp_collectives_follow_the_device(void **state)
{
	(void)state;
	const int widths[] = {32, 16, 4};
	for (int wi = 0; wi < 3; wi++) {
		int w = widths[wi], out[32 * 8];
		memset(out, 0, sizeof out);
		collectives_kernel<<<1, 32>>>(out, w);
		assert_int_equal(cudaGetLastError(), cudaSuccess);
		for (int l = 0; l < 32; l++) {
			const int *o = out + 8 * l;
			int base = l / w * w;
			assert_int_equal(o[0], 100 + base + 3 % w);
			assert_int_equal(o[1], 100 + (l - 2 >= base ? l - 2 : l));
			assert_int_equal(o[2], 100 + (l + 5 < base + w ? l + 5 : l));
			assert_int_equal(o[3], 100 + ((l ^ 6) < base + w ? l ^ 6 : l));
			assert_int_equal((unsigned)o[4], 0x49249249u);
			assert_int_equal(o[5], 1 + 2);
			assert_int_equal(o[6], l < 16 ? -1 : 100 + l); // all bits set: the emulator's "undefined"
			assert_int_equal(o[7], (int)(1.5f * (31 - l)));
		}
		print_message("  width %d: shuffles, votes and a source outside the mask as specified\n", w);
	}
}

// Blocks of (8, 4, 2) threads sum their linear ids through shared memory.
__global__ void block3d_kernel(int *out)
{
	__shared__ int part[64];
	int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
	part[t] = t + 1000 * (blockIdx.x + gridDim.x * blockIdx.y);
	__syncthreads();
	if (t == 0) {
		int s = 0;
		for (int i = 0; i < 64; i++)
			s += part[i];
		out[blockIdx.x + gridDim.x * blockIdx.y] = s;
	}
}

static void blocks_of_three_dimensions_meet_at_the_barrier(void **state)
{
	(void)state;
	int out[6] = {0};
	block3d_kernel<<<dim3(3, 2), dim3(8, 4, 2)>>>(out);
	assert_int_equal(cudaGetLastError(), cudaSuccess);
	for (int b = 0; b < 6; b++)
		assert_int_equal(out[b], 64 * 63 / 2 + 64 * 1000 * b);
}

// Each block reads its shared memory before writing it: the poison, not the
// previous block's values.
__global__ void fresh_shared_kernel(unsigned *out, int n)
{
	__shared__ unsigned stat[32];
	extern __shared__ unsigned dyn[];
	unsigned seen = stat[threadIdx.x] & dyn[threadIdx.x % n];
	__syncthreads();
	stat[threadIdx.x] = 0;
	dyn[threadIdx.x % n] = 0;
	out[blockIdx.x * 32 + threadIdx.x] = seen;
}

static void shared_memory_is_poisoned_before_each_block(void **state)
{
	(void)state;
	unsigned out[4 * 32];
	fresh_shared_kernel<<<4, 32, 5 * sizeof(unsigned)>>>(out, 5);
	assert_int_equal(cudaGetLastError(), cudaSuccess);
	for (int i = 0; i < 4 * 32; i++)
		assert_int_equal(out[i], 0xffffffffu);
}

__global__ void atomics_kernel(int *max, unsigned *count, float *sum)
{
	int id = blockIdx.x * blockDim.x + threadIdx.x;
	atomicMax(max, (id * 37) % 1001);
	atomicAdd(count, 1u);
	atomicAdd(sum, 0.5f);
}

static void atomics_fold_every_thread(void **state)
{
	(void)state;
	int max = -1;
	unsigned count = 0;
	float sum = 0;
	atomics_kernel<<<7, 96>>>(&max, &count, &sum);
	assert_int_equal(cudaGetLastError(), cudaSuccess);
	int want = 0;
	for (int id = 0; id < 7 * 96; id++)
		want = (id * 37) % 1001 > want ? (id * 37) % 1001 : want;
	assert_int_equal(max, want);
	assert_int_equal(count, 7 * 96);
	assert_true(sum == 0.5f * 7 * 96);
}

// --- what the device leaves undefined or hangs on ---

__global__ void mask_leaves_caller_out_kernel(int *out)
{
	out[threadIdx.x] = __shfl_sync(0x0000ffffu, (int)threadIdx.x, 0);
}

__global__ void lane_exited_kernel(int *out)
{
	if (threadIdx.x == 5)
		return;
	out[threadIdx.x] = __shfl_sync(0xffffffffu, (int)threadIdx.x, 0);
}

__global__ void barrier_against_shuffle_kernel(int *out)
{
	if (threadIdx.x == 0)
		__syncthreads();
	else
		out[threadIdx.x] = __shfl_sync(0xffffffffu, (int)threadIdx.x, 0);
}

__global__ void different_collectives_kernel(int *out)
{
	if (threadIdx.x < 8)
		out[threadIdx.x] = __shfl_sync(0xffffffffu, (int)threadIdx.x, 0);
	else
		out[threadIdx.x] = (int)__ballot_sync(0xffffffffu, 1);
}

// A 16-byte vector load from an address 4 bytes off: the device faults
// (misaligned address); UBSan stops the emulated kernel.
__global__ void misaligned_vector_kernel(int *out)
{
	static float buf[16] __attribute__((aligned(16)));
	float4 v = reinterpret_cast<const float4 *>(buf + 1)[0];
	out[threadIdx.x] = (int)v.x;
}

// Runs k in a child; the child must end abnormally with `want` in its message.
static void expect_death(void (*k)(int *), const char *want)
{
	int fd[2];
	assert_int_equal(pipe(fd), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(fd[1], 2);
		close(fd[0]);
		static int out[32];
		k<<<1, 32>>>(out);
		_exit(0);
	}
	close(fd[1]);
	char msg[1024] = "";
	size_t got = 0;
	ssize_t r;
	while (got < sizeof msg - 1 && (r = read(fd[0], msg + got, sizeof msg - 1 - got)) > 0)
		got += (size_t)r;
	msg[got] = 0;
	close(fd[0]);
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	print_message("  %s", msg[0] ? msg : "(no message)\n");
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		fail_msg("the launch did not fail");
	if (!strstr(msg, want))
		fail_msg("its message lacks \"%s\"", want);
}

static void undefined_collectives_and_hangs_abort(void **state)
{
	(void)state;
	expect_death(mask_leaves_caller_out_kernel, "leaves it out");
	expect_death(lane_exited_kernel, "which has exited");
	expect_death(barrier_against_shuffle_kernel, "deadlock");
	expect_death(different_collectives_kernel, "wait in __ballot_sync and __shfl_sync");
	expect_death(misaligned_vector_kernel, "misaligned address");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(launches_over_the_device_limits_are_refused),
		cmocka_unit_test(warp_collectives_follow_the_device),
		cmocka_unit_test(blocks_of_three_dimensions_meet_at_the_barrier),
		cmocka_unit_test(shared_memory_is_poisoned_before_each_block),
		cmocka_unit_test(atomics_fold_every_thread),
		cmocka_unit_test(undefined_collectives_and_hangs_abort),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
