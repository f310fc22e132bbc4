/* mixer.h: which source each window of a mixture comes from (private to
 * lib/loader and its tests).
 *
 * torchtitan 0.3.0's InterleavedDataset (torchtitan/hf_datasets/interleaved.py)
 * draws the source of every sample it yields with
 *     self._rng = random.Random(seed)
 *     idx = self._rng.choices(range(n), weights=[w / sum(weights) for w in weights])[0]
 * and each source yields packed windows of seq_len, so the weights are a
 * token mixture.  This is that draw bit for bit: CPython's Mersenne Twister
 * (MT19937 seeded by init_by_array over the seed's 32-bit words, as
 * random.seed(int) does), random() as genrand_res53 (two 32-bit outputs per
 * draw), and choices' bisect_right over the running sums of the normalised
 * weights, with its hi = n - 1.  The sum of the weights is taken left to right
 * as Python 3.11's sum() does (3.12 compensates it, which can move the total
 * by an ulp; a draw lands that close to a boundary about once in 10^16).
 * tests/loader/golden/interleave.tsv holds it to 0.3.0's own draws
 * (scripts/interleave_golden.py). */
#ifndef TITAN_LOADER_MIXER_H
#define TITAN_LOADER_MIXER_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/mt19937.h"

#define MIX_MT_N MT19937_N
#define MIX_MAX_SOURCES 1024

/* random.Random's state: getstate()'s 624 words and the index after them
 * (core/mt19937's engine, which torch's generator shares). */
typedef mt19937 mix_rng;

void mix_rng_seed(mix_rng *r, uint64_t seed); /* random.Random(seed) */
double mix_rng_random(mix_rng *r);            /* random.random() */

/* The normalised weights' running sums, as choices builds them. */
typedef struct mixer {
	size_t n;
	double cum[MIX_MAX_SOURCES];
} mixer;

/* Refuses what InterleavedDataset refuses: no source, a negative or
 * non-finite weight, a sum that is not positive; and more than
 * MIX_MAX_SOURCES sources. */
int mixer_init(mixer *m, const double *weights, size_t n, titan_err *err);
/* The next window's source, drawn from r. */
size_t mixer_draw(const mixer *m, mix_rng *r);

#endif
