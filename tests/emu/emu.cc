// emu.cc: the CUDA execution model of cuda_emu.h on the host, and the parts
// of the CUDA runtime that kernels/*.cu call (cudaGetLastError,
// cudaFuncSetAttribute; tests/gpu/fake_cuda.c has the memory and streams).
//
// A launch checks its configuration as the device does (block at most 1024
// threads and 1024 x 1024 x 64, grid at most 2^31-1 x 65535 x 65535, dynamic
// shared memory within 48 KiB or the limit a cudaFuncSetAttribute raised, up
// to 227 KiB), then runs its blocks one at a time, each as blockDim fibers
// scheduled by this file: a fiber runs until it reaches a barrier, a warp
// collective or its end.  EMU_SCHEDULE picks which runnable thread goes next:
// "low" (default) the lowest-numbered, so warp 0 runs as far ahead of the
// others as the barriers allow; "high" the highest; blocks go in reverse
// order too under "high".  Whatever the device leaves undefined is made loud:
// a shuffle from a lane outside the mask returns all bits set (NaN), a
// collective whose lanes disagree on the mask or the operation, a lane named
// in a mask that has exited, or a block whose threads all wait on each other
// (a hang on the device) abort the program with the kernel's name.
//
// Under TSan each thread of a block is a fiber of its own and only
// __syncthreads and __syncwarp order their accesses, so a race between
// threads of a block is reported as between threads.  Blocks are ordered one
// after the other (to TSan too: a block's threads reuse the stacks and the
// shared memory of the one before, and TSan cannot be told to forget their
// accesses), so races between blocks go unseen.
#include "emu_abi.h"
#include "fiber.h"

#include <cuda_runtime_api.h>

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>

#if defined(__SANITIZE_THREAD__) || defined(EMU_TSAN)
#include <sanitizer/tsan_interface.h>
#define TSAN 1
#else
#define TSAN 0
#endif

static const char *const op_names[] = {"__shfl_sync",   "__shfl_up_sync", "__shfl_down_sync",
				       "__shfl_xor_sync", "__ballot_sync",  "__any_sync",
				       "__all_sync",      "__syncwarp"};

static const int MAX_THREADS = 1024;
static const size_t DEFAULT_SMEM = 48 * 1024, MAX_SMEM = 227 * 1024;
// Per thread: the kernels keep a few arrays of registers; sanitizers' frames
// are several times the plain ones.
static const size_t STACK_BYTES = 64 * 1024;

enum state { RUNNABLE, AT_BARRIER, AT_WARP, DONE };

struct ethread {
	fiber f;
	uint3 idx;
	int lane, warp;
	state st;
	// the warp collective it waits in
	int op, arg, width;
	unsigned mask;
	uint64_t value, result;
};

// The warp collectives a warp's lanes wait in: one per mask.
struct group {
	unsigned mask, arrived;
	int op;
};
struct warp {
	unsigned lanes, exited; // of the block's threads; those that have ended
	unsigned syncs;         // __syncwarp collectives completed
	char sync[2];           // TSan: see E.barrier_sync
	int ngroups;
	group groups[32];
};

// Where the emulator stands: one launch, one block at a time.
static struct {
	const emu::config *cfg;
	void (*body)(void *);
	void *ctx;
	uint3 block;
	int nthreads, at_barrier, done;
	ethread *self;
	fiber sched;
	char *stacks;           // MAX_THREADS stacks, made once
	ethread threads[MAX_THREADS];
	warp warps[MAX_THREADS / 32];
	int next; // no runnable thread lies before it (after it, running high first)
	unsigned char *dyn_smem; // this block's dynamic shared memory
	size_t max_dyn_smem;    // raised by cudaFuncSetAttribute
	int high_first;
	cudaError_t last_error;
	unsigned barrier_gen; // barriers completed in this block
	// TSan: the addresses that order blocks, and barriers and __syncwarp (by
	// the parity of the generation: a thread may release the next one before
	// a slower one has acquired this one)
	char block_start, block_end, barrier_sync[2];
} E = {};

// __shared__ variables (cuda_emu.h puts them all in this section).
extern "C" unsigned char __start_emu_shared[] __attribute__((weak));
extern "C" unsigned char __stop_emu_shared[] __attribute__((weak));

[[noreturn]] static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("emu: ", stderr);
	if (E.cfg)
		fprintf(stderr, "kernel %s launched at %s:%d, block (%u,%u,%u): ", E.cfg->kernel,
			E.cfg->file, E.cfg->line, E.block.x, E.block.y, E.block.z);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	abort();
}

// --- what the kernels read ---

extern "C" uint3 emu_thread_idx(void) { return E.self->idx; }
extern "C" uint3 emu_block_idx(void) { return E.block; }
extern "C" dim3 emu_block_dim(void) { return E.cfg->block; }
extern "C" dim3 emu_grid_dim(void) { return E.cfg->grid; }
extern "C" void *emu_dynamic_shared(void) { return E.dyn_smem; }

// --- scheduling ---

static ethread *pick(void);
[[noreturn]] static void deadlock(void);

// The calling thread waits: run the next runnable thread (possibly the
// caller itself, whose wait is already over), straight from fiber to fiber.
static void yield(void)
{
	ethread *t = E.self, *n = pick();
	if (!n)
		deadlock();
	if (n == t)
		return;
	E.self = n;
	fiber_switch(&t->f, &n->f, 0);
}

// Threads lo..hi may have become runnable: where pick() must look again.
static void wake(long lo, long hi)
{
	if (E.high_first ? hi > E.next : lo < E.next)
		E.next = (int)(E.high_first ? hi : lo);
}

static void release_barrier(void)
{
	for (int i = 0; i < E.nthreads; i++)
		if (E.threads[i].st == AT_BARRIER)
			E.threads[i].st = RUNNABLE;
	E.at_barrier = 0;
	E.barrier_gen++;
	wake(0, E.nthreads - 1);
}


extern "C" void emu_syncthreads(void)
{
	ethread *t = E.self;
	unsigned gen = E.barrier_gen;
#if TSAN
	__tsan_release(&E.barrier_sync[gen & 1]);
#endif
	t->st = AT_BARRIER;
	if (++E.at_barrier + E.done == E.nthreads)
		release_barrier();
	yield();
#if TSAN
	__tsan_acquire(&E.barrier_sync[gen & 1]);
#else
	(void)gen;
#endif
}

// The source lane of a shuffle (CUDA's rules for width < 32: a lane reads
// within its group of `width`, or its own value where the source lies past it).
static int shuffle_source(const ethread *t)
{
	int base = t->lane & ~(t->width - 1), end = base + t->width;
	switch (t->op) {
	case EMU_SHFL:
		return base + (t->arg & (t->width - 1));
	case EMU_SHFL_UP:
		return t->lane - t->arg >= base ? t->lane - t->arg : t->lane;
	case EMU_SHFL_DOWN:
		return t->lane + t->arg < end ? t->lane + t->arg : t->lane;
	default: // EMU_SHFL_XOR
		return (t->lane ^ t->arg) < end ? t->lane ^ t->arg : t->lane;
	}
}

// Every lane of the mask has arrived: give each its result.
static void finish_collective(ethread *w, unsigned mask)
{
	unsigned ballot = 0;
	for (int l = 0; l < 32; l++)
		if (mask >> l & 1 && w[l].value)
			ballot |= 1u << l;
	for (int l = 0; l < 32; l++) {
		if (!(mask >> l & 1))
			continue;
		ethread *t = &w[l];
		switch (t->op) {
		case EMU_BALLOT:
			t->result = ballot;
			break;
		case EMU_ANY:
			t->result = ballot != 0;
			break;
		case EMU_ALL:
			t->result = ballot == mask;
			break;
		case EMU_SYNCWARP:
			t->result = 0;
			break;
		default: {
			int src = shuffle_source(t);
			t->result = mask >> src & 1 ? w[src].value : ~(uint64_t)0;
		}
		}
		t->st = RUNNABLE;
	}
	wake(w - E.threads, w - E.threads + 31);
}

// Joins the collective of the lanes that name the same mask; checks what the
// device leaves undefined.
static void join_collective(ethread *t)
{
	warp *wp = &E.warps[t->warp];
	if (!(t->mask >> t->lane & 1))
		die("lane %d calls %s with mask 0x%08x, which leaves it out", t->lane, op_names[t->op],
		    t->mask);
	if (t->op <= EMU_SHFL_XOR && (t->width < 1 || t->width > 32 || (t->width & (t->width - 1))))
		die("%s with width %d (a power of two up to 32)", op_names[t->op], t->width);
	unsigned gone = t->mask & (wp->exited | ~wp->lanes);
	if (gone) {
		int l = __builtin_ctz(gone);
		die("lane %d calls %s with mask 0x%08x, which names lane %d, %s", t->lane,
		    op_names[t->op], t->mask, l, wp->lanes >> l & 1 ? "which has exited" : "not in the block");
	}
	// Lanes may wait in collectives of other, overlapping masks (lanes 0..15
	// already in a whole-warp shuffle while 16..31 finish one of their own);
	// where that can never complete, the scheduler finds the deadlock.
	group *g = nullptr;
	for (int i = 0; i < wp->ngroups && !g; i++)
		if (wp->groups[i].mask == t->mask)
			g = &wp->groups[i];
	if (!g) {
		g = &wp->groups[wp->ngroups++];
		*g = {t->mask, 0, t->op};
	} else if (g->op != t->op) {
		die("lanes %d and %d of mask 0x%08x wait in %s and %s", t->lane, __builtin_ctz(g->arrived),
		    t->mask, op_names[t->op], op_names[g->op]);
	}
	t->st = AT_WARP;
	g->arrived |= 1u << t->lane;
	if (g->arrived != g->mask)
		return;
	finish_collective(&E.threads[t->warp * 32], g->mask);
	if (g->op == EMU_SYNCWARP)
		wp->syncs++;
	*g = wp->groups[--wp->ngroups];
}

extern "C" uint64_t emu_warp_op(int op, unsigned mask, uint64_t value, int arg, int width)
{
	ethread *t = E.self;
	t->op = op;
	t->mask = mask;
	t->value = value;
	t->arg = arg;
	t->width = width;
	warp *wp = &E.warps[t->warp];
	unsigned gen = wp->syncs;
#if TSAN
	if (op == EMU_SYNCWARP)
		__tsan_release(&wp->sync[gen & 1]);
#endif
	join_collective(t);
	yield();
#if TSAN
	if (op == EMU_SYNCWARP)
		__tsan_acquire(&wp->sync[gen & 1]);
#else
	(void)gen;
#endif
	return t->result;
}

static void thread_main(void *arg)
{
	ethread *t = (ethread *)arg;
#if TSAN
	__tsan_acquire(&E.block_start); // what the host and the blocks before wrote
#endif
	E.body(E.ctx);
#if TSAN
	__tsan_release(&E.block_end);
#endif
	t->st = DONE;
	E.done++;
	E.warps[t->warp].exited |= 1u << t->lane;
	if (E.at_barrier > 0 && E.at_barrier + E.done == E.nthreads)
		release_barrier();
	ethread *n = pick();
	if (!n && E.done < E.nthreads)
		deadlock();
	E.self = n;
	fiber_switch(&t->f, n ? &n->f : &E.sched, 1); // the block's last thread ends it
	die("a finished thread was resumed");
}

// The next thread to run: the lowest-numbered runnable one (or highest).
static ethread *pick(void)
{
	if (E.high_first) {
		for (; E.next >= 0; E.next--)
			if (E.threads[E.next].st == RUNNABLE)
				return &E.threads[E.next];
	} else {
		for (; E.next < E.nthreads; E.next++)
			if (E.threads[E.next].st == RUNNABLE)
				return &E.threads[E.next];
	}
	return nullptr;
}

[[noreturn]] static void deadlock(void)
{
	char why[256] = "";
	for (int i = 0; i < E.nthreads; i++) {
		const ethread *t = &E.threads[i];
		if (t->st == AT_WARP) {
			snprintf(why, sizeof why, "thread %d waits in %s (mask 0x%08x) for a lane that never comes",
				 i, op_names[t->op], t->mask);
			break;
		}
	}
	if (!why[0])
		snprintf(why, sizeof why, "%d threads wait at __syncthreads for %d that never come",
			 E.at_barrier, E.nthreads - E.at_barrier - E.done);
	die("deadlock (the device would hang): %s", why);
}

// Volatile stores: the section holds every kernel's variables with ASan's
// red zones between them, which this must write past unchecked.
__attribute__((no_sanitize_address)) static void poison(unsigned char *p, size_t n)
{
	volatile uint64_t *q = (volatile uint64_t *)p;
	for (size_t i = 0; i < n / 8; i++)
		q[i] = ~(uint64_t)0;
	for (size_t i = n / 8 * 8; i < n; i++)
		((volatile unsigned char *)p)[i] = 0xff;
}

static void run_block(void)
{
	size_t shared = (size_t)(__stop_emu_shared - __start_emu_shared);
	poison(__start_emu_shared, shared);
	if (E.cfg->smem)
		memset(E.dyn_smem, 0xff, E.cfg->smem);
#if TSAN
	__tsan_release(&E.block_start);
#endif
	const dim3 b = E.cfg->block;
	E.nthreads = (int)(b.x * b.y * b.z);
	E.at_barrier = E.done = 0;
	E.barrier_gen = 0;
	for (int i = 0; i < E.nthreads; i++) {
		ethread *t = &E.threads[i];
		char *stack = E.stacks + (size_t)i * STACK_BYTES;
		fiber_make(&t->f, stack, STACK_BYTES, thread_main, t);
		t->idx = {(unsigned)i % b.x, (unsigned)i / b.x % b.y, (unsigned)i / (b.x * b.y)};
		t->lane = i % 32;
		t->warp = i / 32;
		t->st = RUNNABLE;
	}
	for (int w = 0; w < (E.nthreads + 31) / 32; w++) {
		int lanes = E.nthreads - 32 * w < 32 ? E.nthreads - 32 * w : 32;
		E.warps[w] = {lanes == 32 ? ~0u : (1u << lanes) - 1, 0, 0, {}, 0, {}};
	}
	E.next = E.high_first ? E.nthreads - 1 : 0;
	E.self = pick();
	fiber_switch(&E.sched, &E.self->f, 0); // back when every thread has ended
#if TSAN
	__tsan_acquire(&E.block_end);
#endif
	E.self = nullptr;
}

// The configuration error the device would report, or cudaSuccess.
static cudaError_t check_config(const emu::config *c)
{
	const dim3 b = c->block, g = c->grid;
	const char *what = nullptr;
	if (!b.x || !b.y || !b.z || b.x > 1024 || b.y > 1024 || b.z > 64 ||
	    (uint64_t)b.x * b.y * b.z > MAX_THREADS)
		what = "block";
	else if (!g.x || !g.y || !g.z || g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535)
		what = "grid";
	if (what) {
		fprintf(stderr, "emu: launch of %s at %s:%d refused: grid (%u,%u,%u), block (%u,%u,%u): a %s the device does not take\n",
			c->kernel, c->file, c->line, g.x, g.y, g.z, b.x, b.y, b.z, what);
		return cudaErrorInvalidConfiguration;
	}
	size_t limit = E.max_dyn_smem > DEFAULT_SMEM ? E.max_dyn_smem : DEFAULT_SMEM;
	if (c->smem > limit) {
		fprintf(stderr, "emu: launch of %s at %s:%d refused: %zu bytes of dynamic shared memory, over the %zu allowed\n",
			c->kernel, c->file, c->line, c->smem, limit);
		return cudaErrorInvalidValue;
	}
	return cudaSuccess;
}

static void setup_once(void)
{
	if (E.stacks)
		return;
	void *p = mmap(nullptr, MAX_THREADS * STACK_BYTES, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		perror("emu: mmap of the threads' stacks");
		abort();
	}
	E.stacks = (char *)p;
	fiber_self(&E.sched);
	const char *s = getenv("EMU_SCHEDULE");
	E.high_first = s && !strcmp(s, "high");
	if (s && strcmp(s, "high") && strcmp(s, "low")) {
		fprintf(stderr, "emu: EMU_SCHEDULE=%s: expected low or high\n", s);
		exit(2);
	}
}

extern "C" void emu_run(const emu::config *c, void (*body)(void *), void *ctx)
{
	if (E.cfg)
		die("launches %s at %s:%d from a kernel (dynamic parallelism): not emulated", c->kernel,
		    c->file, c->line);
	setup_once();
	cudaError_t rc = check_config(c);
	if (rc != cudaSuccess) {
		E.last_error = rc;
		return;
	}
	E.cfg = c;
	E.body = body;
	E.ctx = ctx;
	const dim3 g = c->grid;
	size_t nblocks = (size_t)g.x * g.y * g.z;
	if (c->smem && !(E.dyn_smem = (unsigned char *)malloc(c->smem)))
		die("out of memory for %zu bytes of shared memory", c->smem);
	for (size_t k = 0; k < nblocks; k++) {
		size_t i = E.high_first ? nblocks - 1 - k : k;
		E.block = {(unsigned)(i % g.x), (unsigned)(i / g.x % g.y), (unsigned)(i / ((size_t)g.x * g.y))};
		run_block();
	}
	free(E.dyn_smem);
	E.dyn_smem = nullptr;
	E.cfg = nullptr;
}

// tests/gpu/gpu_test.h's device_only() and tsan_leaves() ask.
extern "C" int titan_gpu_emulated(void) { return TSAN ? 2 : 1; }

// --- the runtime's part that belongs to launches ---

extern "C" cudaError_t CUDARTAPI cudaGetLastError(void)
{
	cudaError_t rc = E.last_error;
	E.last_error = cudaSuccess;
	return rc;
}

extern "C" cudaError_t CUDARTAPI cudaPeekAtLastError(void) { return E.last_error; }

extern "C" cudaError_t CUDARTAPI cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr,
						      int value)
{
	if (!func || attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
		return cudaErrorInvalidValue;
	if (value < 0 || (size_t)value > MAX_SMEM)
		return cudaErrorInvalidValue;
	// Not per kernel: a launch cannot name its kernel to the emulator (see
	// cuda_emu.h), so the largest limit any kernel was given applies.
	if ((size_t)value > E.max_dyn_smem)
		E.max_dyn_smem = (size_t)value;
	return cudaSuccess;
}
