/* fiber.h: cooperative threads of control on stacks of their own, switched
 * explicitly (the CUDA emulator's threads of a block, tests/emu/emu.cc).  One
 * OS thread runs them all; a switch is a few instructions on x86-64
 * (glibc's swapcontext elsewhere, which also saves the signal mask).  Under
 * ASan and TSan every switch is announced to the sanitizer, so that each fiber
 * is a thread of its own to TSan: no switch orders memory accesses, only the
 * emulator's explicit release/acquire pairs do. */
#ifndef TITAN_EMU_FIBER_H
#define TITAN_EMU_FIBER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

typedef struct fiber {
	void *sp; /* the saved stack pointer (x86-64) */
#if !defined(__x86_64__)
	ucontext_t uc;
#endif
	char *stack; /* NULL for the fiber of the thread that created the others */
	size_t stack_size;
	void (*fn)(void *);
	void *arg;
	void *tsan; /* TSan's context of this fiber, where built with TSan */
	void *asan_fake_stack;
} fiber;

/* The calling thread's own fiber, to switch back to. */
void fiber_self(fiber *f);
/* A fiber that will run fn(arg) on stack[0, size) when first switched to; fn
 * must never return (it switches away for the last time instead).  Making a
 * fiber again in the same struct keeps its TSan context: to TSan it is the
 * same thread, which is what lets its stack be reused without a report. */
void fiber_make(fiber *f, char *stack, size_t size, void (*fn)(void *), void *arg);
/* Stop running `from` (the caller) and run `to`; returns when something
 * switches back to `from`.  `from_ends`: the caller never runs again (its
 * stack may be reused at once). */
void fiber_switch(fiber *from, fiber *to, int from_ends);

#ifdef __cplusplus
}
#endif

#endif
