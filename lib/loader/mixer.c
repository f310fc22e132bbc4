/* The mixture's draw of a source per window: see mixer.h. */
#include "loader/mixer.h"

#include <math.h>

/* random.seed(seed) for a non-negative int: init_by_array over the seed's
 * 32-bit words, least significant first, at least one. */
void mix_rng_seed(mix_rng *r, uint64_t seed)
{
	uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
	size_t klen = key[1] ? 2 : 1;
	uint32_t *mt = r->mt;
	mt19937_init(r, 19650218u);
	size_t i = 1, j = 0;
	for (size_t k = MIX_MT_N > klen ? MIX_MT_N : klen; k; k--) {
		mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
		i++, j++;
		if (i >= MIX_MT_N) {
			mt[0] = mt[MIX_MT_N - 1];
			i = 1;
		}
		if (j >= klen)
			j = 0;
	}
	for (size_t k = MIX_MT_N - 1; k; k--) {
		mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
		i++;
		if (i >= MIX_MT_N) {
			mt[0] = mt[MIX_MT_N - 1];
			i = 1;
		}
	}
	mt[0] = 0x80000000u; /* a non-zero initial array */
}

/* genrand_res53: 53 random bits from two outputs. */
double mix_rng_random(mix_rng *r)
{
	uint32_t a = mt19937_next(r) >> 5, b = mt19937_next(r) >> 6;
	return ((double)a * 67108864.0 + (double)b) * (1.0 / 9007199254740992.0);
}

int mixer_init(mixer *m, const double *w, size_t n, titan_err *err)
{
	if (n == 0)
		return err_set(err, "a mixture needs at least one source");
	if (n > MIX_MAX_SOURCES)
		return err_set(err, "%zu sources, at most %d", n, MIX_MAX_SOURCES);
	double total = 0; /* sum(weights), left to right */
	for (size_t i = 0; i < n; i++) {
		if (!(w[i] >= 0) || !isfinite(w[i]))
			return err_set(err, "source %zu: weight %g is not a finite number >= 0", i + 1,
				       w[i]);
		total += w[i];
	}
	if (!(total > 0) || !isfinite(total))
		return err_set(err, "the weights sum to %g; their sum must be positive and finite",
			       total);
	/* probs = [w / total]; choices' cum_weights = accumulate(probs) */
	double c = 0;
	for (size_t i = 0; i < n; i++)
		m->cum[i] = c = i ? c + w[i] / total : w[i] / total;
	m->n = n;
	return 0;
}

size_t mixer_draw(const mixer *m, mix_rng *r)
{
	double x = mix_rng_random(r) * (m->cum[m->n - 1] + 0.0);
	size_t lo = 0, hi = m->n - 1; /* bisect_right(cum, x, 0, n - 1) */
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (x < m->cum[mid])
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}
