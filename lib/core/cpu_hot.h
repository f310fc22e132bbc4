/* cpu_hot.h: a function built once per instruction-set level, each call
 * going to the build core/cpu_isa chose (CPU_HOT), for the hot loops of the
 * CPU backend and of core's own (init_fill's draws). */
#ifndef TITAN_CPU_HOT_H
#define TITAN_CPU_HOT_H

#include "core/cpu_isa.h"

/* A hot loop is built three times on x86-64, for x86-64-v4 (AVX-512),
 * x86-64-v3 (AVX2 + FMA) and the baseline, and twice on aarch64, for SVE and
 * the baseline (NEON); each call goes to the build core/cpu_isa chose (its
 * level, or TITAN_CPU_ISA's), so that tests can run every build on one
 * machine.  Under -std=c17 GCC contracts no multiply-add
 * and the reductions keep fixed lanes, so every build gives the same bits.
 *
 * A hot function is defined as
 *     CPU_HOT(static, float, name, (const float *x, int64_t n), (x, n))
 *     { ...the body... }
 * (CPU_HOT_VOID for one returning nothing): linkage, return type, name, the
 * parameters and the same names as arguments.  The body is written once, as
 * an always-inline function that each build inlines and compiles for its
 * target; `name` is the dispatcher the callers use. */
#define CPU_CAT_(a, b) a##b
#define CPU_CAT(a, b) CPU_CAT_(a, b)
#if defined(__GNUC__) && defined(__x86_64__)
#define CPU_HOT_(link, ret, name, params, args, RETURN, ATTR)                                \
	ATTR static inline __attribute__((always_inline)) ret CPU_CAT(name, _body) params;   \
	ATTR __attribute__((target("arch=x86-64-v4"))) static ret CPU_CAT(name, _v4) params \
	{                                                                                    \
		RETURN CPU_CAT(name, _body) args;                                            \
	}                                                                                    \
	ATTR __attribute__((target("arch=x86-64-v3"))) static ret CPU_CAT(name, _v3) params \
	{                                                                                    \
		RETURN CPU_CAT(name, _body) args;                                            \
	}                                                                                    \
	ATTR static ret CPU_CAT(name, _v1) params                                            \
	{                                                                                    \
		RETURN CPU_CAT(name, _body) args;                                            \
	}                                                                                    \
	link ret name params                                                                 \
	{                                                                                    \
		int clone_ = cpu_isa_clone();                                                \
		if (clone_ == 4)                                                             \
			RETURN CPU_CAT(name, _v4) args;                                      \
		else if (clone_ == 3)                                                        \
			RETURN CPU_CAT(name, _v3) args;                                      \
		else                                                                         \
			RETURN CPU_CAT(name, _v1) args;                                      \
	}                                                                                    \
	static inline __attribute__((always_inline)) ret CPU_CAT(name, _body) params
#elif defined(__GNUC__) && defined(__aarch64__)
#define CPU_HOT_(link, ret, name, params, args, RETURN, ATTR)                                \
	ATTR static inline __attribute__((always_inline)) ret CPU_CAT(name, _body) params;   \
	ATTR __attribute__((target("+sve"))) static ret CPU_CAT(name, _sve) params          \
	{                                                                                    \
		RETURN CPU_CAT(name, _body) args;                                            \
	}                                                                                    \
	ATTR static ret CPU_CAT(name, _neon) params                                          \
	{                                                                                    \
		RETURN CPU_CAT(name, _body) args;                                            \
	}                                                                                    \
	link ret name params                                                                 \
	{                                                                                    \
		if (cpu_isa_clone() == 2)                                                    \
			RETURN CPU_CAT(name, _sve) args;                                     \
		else                                                                         \
			RETURN CPU_CAT(name, _neon) args;                                    \
	}                                                                                    \
	ATTR static inline __attribute__((always_inline)) ret CPU_CAT(name, _body) params
#else
#define CPU_HOT_(link, ret, name, params, args, RETURN, ATTR) ATTR link ret name params
#endif
#define CPU_HOT(link, ret, name, params, args) CPU_HOT_(link, ret, name, params, args, return, )
#define CPU_HOT_VOID(link, name, params, args) CPU_HOT_(link, void, name, params, args, , )

#endif
