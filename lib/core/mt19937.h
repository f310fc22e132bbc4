/* mt19937.h: the Mersenne Twister (Matsumoto and Nishimura, 1998) that both
 * CPython's random.Random (loader/mixer) and torch's CPU generator
 * (core/torch_rng) draw from.  They share the 624-word state, the twist and
 * the tempering; they differ in seeding (CPython: init_by_array over the
 * seed's words, in loader/mixer.c; torch: init_genrand over the seed's low
 * 32 bits, here) and in what they make of the 32-bit outputs. */
#ifndef TITAN_MT19937_H
#define TITAN_MT19937_H

#include <stdint.h>

#define MT19937_N 624

/* The state words and the index of the next one to temper; index ==
 * MT19937_N means the words are used up and the next draw twists first
 * (CPython's getstate() holds exactly these). */
typedef struct mt19937 {
	uint32_t mt[MT19937_N];
	uint32_t index; /* 0..MT19937_N */
} mt19937;

/* init_genrand(s) of the 2002 reference code: the words from s, index N. */
void mt19937_init(mt19937 *m, uint32_t s);
/* genrand_uint32: the next 32-bit output. */
uint32_t mt19937_next(mt19937 *m);

#endif
