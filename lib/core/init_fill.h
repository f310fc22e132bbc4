/* init_fill.h: the random draws of titan's weight initialisation.
 *
 * A tensor is cut into fixed chunks of INIT_FILL_CHUNK elements, each drawn
 * from its own splitmix64 stream seeded by (seed, tensor, chunk): the values
 * do not depend on the number of threads, and a rank that holds a shard draws
 * it alone.  A normal draw is Box-Muller's in double with libm's log and cos
 * (made faster, to the same bits: init_fill.c), rounded once to float.
 * scripts/model_golden.py replicates it (titan_init). */
#ifndef TITAN_INIT_FILL_H
#define TITAN_INIT_FILL_H

#include <stddef.h>
#include <stdint.h>

#define INIT_FILL_CHUNK 65536

/* Elements [first, end) of a tensor of n elements (the rest of their chunks
 * drawn and thrown away): normal(0, std) cut to [lo, hi] by rejection (torch's
 * trunc_normal_ distribution; lo >= hi: no cut), or with uniform set
 * uniform(-std, std). */
void init_fill(float *dst, size_t n, size_t first, size_t end, double std, double lo, double hi,
	       int uniform, uint64_t seed, uint64_t tensor);

/* How many normal draws of this process went to libm's log and cos, the fast
 * ones too close to a float's rounding or to the cut to decide (tests). */
size_t init_fill_libm_draws(void);

#endif
