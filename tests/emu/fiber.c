/* fiber.c: see fiber.h. */
#include "fiber.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__) || defined(EMU_ASAN)
#include <sanitizer/asan_interface.h>
#endif
#if defined(__SANITIZE_THREAD__) || defined(EMU_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

/* The fiber a switch starts, read by fiber_start on its first run. */
static _Thread_local fiber *starting;
#if defined(__SANITIZE_ADDRESS__) || defined(EMU_ASAN)
/* The stack of the thread's own fiber, which ASan must be told when a switch
 * returns to it (new fibers are first entered from there). */
static _Thread_local const void *self_stack;
static _Thread_local size_t self_stack_size;
#endif

static void fiber_start(void)
{
	fiber *f = starting;
#if defined(__SANITIZE_ADDRESS__) || defined(EMU_ASAN)
	__sanitizer_finish_switch_fiber(NULL, &self_stack, &self_stack_size);
#endif
	f->fn(f->arg);
	fputs("fiber: a fiber's function returned\n", stderr);
	abort();
}

#if defined(__x86_64__)
/* fiber_jump(save, sp): push the registers the System V ABI has a callee keep
 * (and the SSE and x87 control words), store the stack pointer in *save, load
 * sp and pop the same from there. */
void fiber_jump(void **save, void *sp);
__asm__(".text\n"
	".globl fiber_jump\n"
	".type fiber_jump,@function\n"
	"fiber_jump:\n"
	"\tpushq %rbp\n"
	"\tpushq %rbx\n"
	"\tpushq %r12\n"
	"\tpushq %r13\n"
	"\tpushq %r14\n"
	"\tpushq %r15\n"
	"\tsubq $8, %rsp\n"
	"\tstmxcsr (%rsp)\n"
	"\tfnstcw 4(%rsp)\n"
	"\tmovq %rsp, (%rdi)\n"
	"\tmovq %rsi, %rsp\n"
	"\tldmxcsr (%rsp)\n"
	"\tfldcw 4(%rsp)\n"
	"\taddq $8, %rsp\n"
	"\tpopq %r15\n"
	"\tpopq %r14\n"
	"\tpopq %r13\n"
	"\tpopq %r12\n"
	"\tpopq %rbx\n"
	"\tpopq %rbp\n"
	"\tret\n"
	".size fiber_jump, .-fiber_jump\n");

/* The first frame fiber_jump pops on a new stack: the control words, six
 * zeroed registers, then fiber_start as the return address, entered with the
 * stack aligned as after a call. */
static void *first_frame(char *stack, size_t size)
{
	uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
	uint64_t *sp = (uint64_t *)top;
	*--sp = 0;                          /* fiber_start's return address: none */
	*--sp = (uint64_t)(uintptr_t)fiber_start;
	for (int i = 0; i < 6; i++)
		*--sp = 0;
	*--sp = 0x1f80 | (uint64_t)0x037f << 32; /* MXCSR, x87 control word */
	return sp;
}
#endif

void fiber_self(fiber *f)
{
	memset(f, 0, sizeof *f);
#if defined(__SANITIZE_THREAD__) || defined(EMU_TSAN)
	f->tsan = __tsan_get_current_fiber();
#endif
}

void fiber_make(fiber *f, char *stack, size_t size, void (*fn)(void *), void *arg)
{
	void *tsan = f->tsan;
	memset(f, 0, sizeof *f);
	f->stack = stack;
	f->stack_size = size;
	f->fn = fn;
	f->arg = arg;
#if defined(__x86_64__)
	f->sp = first_frame(stack, size);
#else
	if (getcontext(&f->uc) != 0) {
		perror("fiber: getcontext");
		abort();
	}
	f->uc.uc_stack.ss_sp = stack;
	f->uc.uc_stack.ss_size = size;
	f->uc.uc_link = NULL;
	makecontext(&f->uc, fiber_start, 0);
#endif
#if defined(__SANITIZE_THREAD__) || defined(EMU_TSAN)
	f->tsan = tsan ? tsan : __tsan_create_fiber(0);
#else
	(void)tsan;
#endif
}

void fiber_switch(fiber *from, fiber *to, int from_ends)
{
	starting = to;
#if defined(__SANITIZE_ADDRESS__) || defined(EMU_ASAN)
	__sanitizer_start_switch_fiber(from_ends ? NULL : &from->asan_fake_stack,
				       to->stack ? to->stack : self_stack,
				       to->stack ? to->stack_size : self_stack_size);
#else
	(void)from_ends;
#endif
#if defined(__SANITIZE_THREAD__) || defined(EMU_TSAN)
	__tsan_switch_to_fiber(to->tsan, __tsan_switch_to_fiber_no_sync);
#endif
#if defined(__x86_64__)
	fiber_jump(&from->sp, to->sp);
#else
	if (swapcontext(&from->uc, &to->uc) != 0) {
		perror("fiber: swapcontext");
		abort();
	}
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(EMU_ASAN)
	__sanitizer_finish_switch_fiber(from->asan_fake_stack, NULL, NULL);
#endif
}
