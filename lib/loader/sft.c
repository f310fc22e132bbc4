/* torchtitan 0.3.0's ChatDataset order and packing: see sft.h. */
#include "loader/sft.h"

#include <stdlib.h>
#include <string.h>

/* ---- numpy's default_rng: SeedSequence -> PCG64 -> Generator.permutation
 * (numpy/random/bit_generator.pyx, pcg64.h, distributions.c random_interval,
 * _generator.pyx _shuffle_raw), the bit-exact algorithms. */

enum { POOL = 4 };
#define INIT_A 0x43b0d7e5u
#define MULT_A 0x931e8875u
#define INIT_B 0x8b51f9ddu
#define MULT_B 0x58f38dedu
#define MIX_MULT_L 0xca01f9ddu
#define MIX_MULT_R 0x4973f715u

static uint32_t hashmix(uint32_t v, uint32_t *h)
{
	v ^= *h;
	*h *= MULT_A;
	v *= *h;
	return v ^ (v >> 16);
}

static uint32_t mix(uint32_t x, uint32_t y)
{
	uint32_t r = MIX_MULT_L * x - MIX_MULT_R * y;
	return r ^ (r >> 16);
}

/* SeedSequence(seed).generate_state(4, uint64) */
static void seed_sequence(uint64_t seed, uint64_t out[4])
{
	uint32_t ent[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
	int n_ent = seed >> 32 ? 2 : 1; /* _coerce_to_uint32_array: 32-bit words, low first */
	uint32_t pool[POOL], h = INIT_A;
	for (int i = 0; i < POOL; i++)
		pool[i] = hashmix(i < n_ent ? ent[i] : 0, &h);
	for (int s = 0; s < POOL; s++)
		for (int d = 0; d < POOL; d++)
			if (s != d)
				pool[d] = mix(pool[d], hashmix(pool[s], &h));
	uint32_t hb = INIT_B, w[8];
	for (int i = 0; i < 8; i++) {
		uint32_t v = pool[i % POOL] ^ hb;
		hb *= MULT_B;
		v *= hb;
		w[i] = v ^ (v >> 16);
	}
	for (int i = 0; i < 4; i++)
		out[i] = (uint64_t)w[2 * i] | (uint64_t)w[2 * i + 1] << 32;
}

typedef unsigned __int128 u128;

typedef struct pcg64 {
	u128 state, inc;
	int has32;
	uint32_t saved;
} pcg64;

static const u128 PCG_MULT = ((u128)2549297995355413924ull << 64) | 4865540595714422341ull;

static void pcg_step(pcg64 *g)
{
	g->state = g->state * PCG_MULT + g->inc;
}

static void pcg_seed(pcg64 *g, uint64_t seed)
{
	uint64_t s[4];
	seed_sequence(seed, s);
	u128 init = ((u128)s[0] << 64) | s[1], seq = ((u128)s[2] << 64) | s[3];
	*g = (pcg64){.state = 0, .inc = (seq << 1) | 1};
	pcg_step(g);
	g->state += init;
	pcg_step(g);
}

static uint64_t pcg_next64(pcg64 *g)
{
	pcg_step(g);
	uint64_t x = (uint64_t)(g->state >> 64) ^ (uint64_t)g->state;
	unsigned rot = (unsigned)(g->state >> 122);
	return (x >> rot) | (x << ((64 - rot) & 63));
}

static uint32_t pcg_next32(pcg64 *g)
{
	if (g->has32) {
		g->has32 = 0;
		return g->saved;
	}
	uint64_t v = pcg_next64(g);
	g->has32 = 1;
	g->saved = (uint32_t)(v >> 32);
	return (uint32_t)v;
}

/* random_interval: uniform in [0, max] by masked rejection */
static uint64_t interval(pcg64 *g, uint64_t max)
{
	if (max == 0)
		return 0;
	uint64_t mask = max, v;
	for (int s = 1; s < 64; s *= 2)
		mask |= mask >> s;
	if (max <= 0xffffffffu) {
		while ((v = (pcg_next32(g) & mask)) > max)
			;
	} else {
		while ((v = (pcg_next64(g) & mask)) > max)
			;
	}
	return v;
}

void sft_numpy_permutation(uint64_t seed, uint64_t n, uint64_t *perm)
{
	pcg64 g;
	pcg_seed(&g, seed);
	for (uint64_t i = 0; i < n; i++)
		perm[i] = i;
	for (uint64_t i = n; i-- > 1;) {
		uint64_t j = interval(&g, i), t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
}

/* ---- the plan */

struct sft_plan {
	const uint32_t *len;   /* of every document of the data set */
	int64_t T;
	uint64_t *block;       /* the rank's documents in epoch 0's order */
	uint64_t R;            /* how many */
	uint64_t *order;       /* the current epoch's order (R) */
	uint64_t epoch;        /* of order and the windows */
	int have_epoch;
	uint64_t *ws, *we;     /* the epoch's windows: [ws, we) of order */
	uint64_t W, win_cap;
	uint64_t first;        /* rank window index of the epoch's first window */
	uint64_t *docs;        /* sft_plan_window's answer (R) */
};

/* Whether document d takes part: n - 1 pairs, 1 to seq_len of them (0.3.0
 * drops n - 1 > seq_len; a one-token document adds nothing). */
static int fits(const sft_plan *p, uint64_t d)
{
	return p->len[d] >= 2 && (int64_t)(p->len[d] - 1) <= p->T;
}

static int grow_windows(sft_plan *p, titan_err *err)
{
	if (p->W < p->win_cap)
		return 0;
	uint64_t cap = p->win_cap ? 2 * p->win_cap : 1024;
	uint64_t *s = realloc(p->ws, cap * sizeof *s);
	if (s != NULL)
		p->ws = s;
	uint64_t *e = s ? realloc(p->we, cap * sizeof *e) : NULL;
	if (e == NULL)
		return err_set(err, "SFT packing: out of memory");
	p->we = e;
	p->win_cap = cap;
	return 0;
}

/* _iter_greedy_packed over the epoch's order: the windows' spans. */
static int pack(sft_plan *p, titan_err *err)
{
	int64_t used = 0;
	int open = 0;
	p->W = 0;
	for (uint64_t i = 0; i < p->R; i++) {
		uint64_t d = p->order[i];
		if (!fits(p, d))
			continue;
		int64_t L = (int64_t)p->len[d] - 1;
		if (open && L > p->T - used) { /* does not fit: pad and close */
			p->we[p->W - 1] = i;
			open = 0;
		}
		if (!open) {
			if (grow_windows(p, err) != 0)
				return -1;
			p->ws[p->W++] = i;
			open = 1;
			used = 0;
		}
		used += L;
		if (used == p->T) {
			p->we[p->W - 1] = i + 1;
			open = 0;
		}
	}
	if (open) /* the end of the data: the partial window, padded */
		p->we[p->W - 1] = p->R;
	return 0;
}

static int set_epoch(sft_plan *p, uint64_t e, titan_err *err)
{
	if (p->have_epoch && p->epoch == e)
		return 0;
	if (e == 0) {
		memcpy(p->order, p->block, p->R * sizeof *p->order);
	} else {
		/* ChatDataset.reloop: the rank's block shuffled with seed 42 + epoch */
		sft_numpy_permutation(42 + e, p->R, p->docs);
		for (uint64_t i = 0; i < p->R; i++)
			p->order[i] = p->block[p->docs[i]];
	}
	p->epoch = e;
	p->have_epoch = 1;
	if (pack(p, err) != 0) {
		p->have_epoch = 0;
		return -1;
	}
	return 0;
}

int sft_plan_windows0(sft_plan *p, uint64_t *w, titan_err *err)
{
	const uint64_t *docs;
	size_t n;
	uint64_t e;
	if (sft_plan_window(p, 0, &docs, &n, &e, err) != 0)
		return -1;
	*w = p->W;
	return 0;
}

int sft_plan_window(sft_plan *p, uint64_t k, const uint64_t **docs, size_t *n, uint64_t *epoch,
		    titan_err *err)
{
	if (!p->have_epoch || k < p->first) {
		p->first = 0;
		if (set_epoch(p, 0, err) != 0)
			return -1;
	}
	if (p->W == 0)
		return err_set(err, "SFT packing: no conversation of this rank's %llu fits seq_len "
			       "%lld (each needs at most seq_len + 1 tokens)",
			       (unsigned long long)p->R, (long long)p->T);
	while (k >= p->first + p->W) {
		uint64_t next = p->first + p->W;
		if (set_epoch(p, p->epoch + 1, err) != 0)
			return -1;
		p->first = next;
	}
	uint64_t w = k - p->first;
	size_t m = 0;
	for (uint64_t i = p->ws[w]; i < p->we[w]; i++)
		if (fits(p, p->order[i]))
			p->docs[m++] = p->order[i];
	*docs = p->docs;
	*n = m;
	*epoch = p->epoch;
	return 0;
}

sft_plan *sft_plan_new(const uint32_t *len, uint64_t n_docs, int64_t seq_len, int dp_rank,
		       int dp_degree, titan_err *err)
{
	sft_plan *p = calloc(1, sizeof *p);
	uint64_t *all = malloc((n_docs ? n_docs : 1) * sizeof *all);
	if (p == NULL || all == NULL) {
		free(p);
		free(all);
		err_set(err, "SFT packing: out of memory");
		return NULL;
	}
	p->len = len;
	p->T = seq_len;
	sft_numpy_permutation(42, n_docs, all);
	uint64_t div = n_docs / (uint64_t)dp_degree, mod = n_docs % (uint64_t)dp_degree;
	uint64_t r = (uint64_t)dp_rank, start = div * r + (r < mod ? r : mod);
	p->R = div + (r < mod);
	p->block = all;
	memmove(all, all + start, p->R * sizeof *all);
	size_t sz = (p->R ? p->R : 1) * sizeof(uint64_t);
	p->order = malloc(sz);
	p->docs = malloc(sz);
	if (p->order == NULL || p->docs == NULL) {
		sft_plan_free(p);
		err_set(err, "SFT packing: out of memory");
		return NULL;
	}
	return p;
}

void sft_plan_free(sft_plan *p)
{
	if (p == NULL)
		return;
	free(p->block);
	free(p->order);
	free(p->docs);
	free(p->ws);
	free(p->we);
	free(p);
}
