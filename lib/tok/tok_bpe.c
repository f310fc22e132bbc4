/* tok_bpe.c: the vocabulary and merge hash maps, and BPE of one piece.
 *
 * Both references repeatedly merge the adjacent pair of lowest rank, the
 * leftmost on ties.  tiktoken ranks a pair by the rank of its concatenated
 * bytes; HF by the merge's line in the merges list.  Either way the loader
 * fills one map (left id, right id) -> rank, rank -> merged id, and this file runs
 * the loop: a plain scan for short pieces, a heap over a linked list for long
 * ones (no quadratic time on a megabyte piece). */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "tok/tok_int.h"

uint64_t tok_hash_bytes(const uint8_t *p, size_t n)
{
	uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
	while (n >= 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
		h ^= h >> 31;
		p += 8, n -= 8;
	}
	uint64_t w = 0;
	memcpy(&w, p, n);
	h = (h ^ w) * 0x94d049bb133111ebull;
	h ^= h >> 29;
	return h;
}

/* A table that the encoder probes at random: on 2 MiB pages where the kernel
 * gives them on request, since a probe otherwise misses the TLB as well as the
 * caches.  Free it with free(). */
void *tok_alloc_table(size_t size)
{
	enum { HUGE = 1 << 21 };
	if (size < HUGE)
		return malloc(size);
	void *p = aligned_alloc(HUGE, (size + HUGE - 1) / HUGE * HUGE);
#ifdef MADV_HUGEPAGE
	if (p)
		madvise(p, size, MADV_HUGEPAGE); /* advice only: failure is harmless */
#endif
	return p;
}

static size_t pow2_at_least(size_t n)
{
	size_t c = 16;
	while (c < n)
		c <<= 1;
	return c;
}

int tok_strmap_build(tok_strmap *m, const tok *t, uint8_t flag_mask, uint8_t flag_want,
		     titan_err *err)
{
	size_t count = 0;
	for (int64_t id = 0; id < t->n_vocab; id++)
		if (t->len[id] != UINT32_MAX && (t->flags[id] & flag_mask) == flag_want)
			count++;
	size_t cap = pow2_at_least(count * 2 + 1);
	m->slot = tok_alloc_table(cap * sizeof *m->slot);
	if (!m->slot)
		return err_set(err, "out of memory for a %zu-entry token map", cap);
	for (size_t i = 0; i < cap; i++)
		m->slot[i] = (tok_strslot){.id = -1};
	m->mask = cap - 1;
	m->pool = t->pool, m->off = t->off, m->len = t->len;
	for (int64_t id = 0; id < t->n_vocab; id++) {
		if (t->len[id] == UINT32_MAX || (t->flags[id] & flag_mask) != flag_want)
			continue;
		const uint8_t *p = t->pool + t->off[id];
		size_t n = t->len[id];
		if (tok_strmap_get(m, p, n) >= 0)
			continue; /* the same bytes twice: the lower id wins */
		uint64_t h = tok_hash_bytes(p, n);
		size_t i = (size_t)h & m->mask;
		while (m->slot[i].id >= 0)
			i = (i + 1) & m->mask;
		tok_strslot *s = &m->slot[i];
		s->id = (int32_t)id;
		s->tag = (uint8_t)(h >> 56);
		s->len = n <= TOK_INLINE ? (uint8_t)n : 255;
		if (n <= TOK_INLINE)
			memcpy(s->bytes, p, n);
	}
	return 0;
}

int32_t tok_strmap_get_h(const tok_strmap *m, const uint8_t *p, size_t n, uint64_t h)
{
	if (!m->slot)
		return -1;
	uint8_t tag = (uint8_t)(h >> 56);
	size_t i = (size_t)h & m->mask;
	for (;;) {
		const tok_strslot *s = &m->slot[i];
		if (s->id < 0)
			return -1;
		if (s->tag == tag) {
			if (n <= TOK_INLINE) {
				if (s->len == n && !memcmp(s->bytes, p, n))
					return s->id;
			} else if (s->len == 255 && m->len[s->id] == n &&
				   !memcmp(m->pool + m->off[s->id], p, n)) {
				return s->id;
			}
		}
		i = (i + 1) & m->mask;
	}
}

int32_t tok_strmap_get(const tok_strmap *m, const uint8_t *p, size_t n)
{
	return tok_strmap_get_h(m, p, n, tok_hash_bytes(p, n));
}

void tok_strmap_free(tok_strmap *m)
{
	free(m->slot);
	m->slot = NULL;
}

/* Slots for n pairs. */
#define PAIRMAP_LOAD(n) ((n) * 2 + 1)

int tok_pairmap_init(tok_pairmap *m, size_t expect, int64_t n_vocab, uint32_t n_ranks,
		     titan_err *err)
{
	/* n_vocab < 2^idbits - 1: no key is all ones, the empty slot's low bits. */
	unsigned idbits = 1;
	while (((int64_t)1 << idbits) - 1 <= n_vocab)
		idbits++;
	if (2 * idbits > 62 || (UINT64_MAX >> 2 * idbits) <= n_ranks)
		return err_set(err, "%lld ids and %u merges do not fit the merge map",
			       (long long)n_vocab, n_ranks);
	size_t cap = pow2_at_least(PAIRMAP_LOAD(expect));
	m->slot = tok_alloc_table(cap * sizeof *m->slot);
	m->merged = malloc(((size_t)n_ranks + 1) * sizeof *m->merged);
	if (!m->slot || !m->merged)
		return err_set(err, "out of memory for a %zu-entry merge map", cap);
	for (size_t i = 0; i < cap; i++)
		m->slot[i] = UINT64_MAX;
	/* Ranks that merge nothing (a tiktoken byte) keep this: no id. */
	memset(m->merged, 0xff, ((size_t)n_ranks + 1) * sizeof *m->merged);
	m->mask = cap - 1;
	m->n = 0;
	m->idbits = idbits;
	m->keymask = (UINT64_C(1) << 2 * idbits) - 1;
	m->rnone = UINT64_MAX >> 2 * idbits;
	m->n_ranks = n_ranks;
	return 0;
}

void tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id)
{
	uint64_t key = tok_pair_key(m, a, b);
	size_t i = (size_t)tok_pair_hash(key) & m->mask;
	while (m->slot[i] != UINT64_MAX && (m->slot[i] & m->keymask) != key)
		i = (i + 1) & m->mask;
	if (m->slot[i] == UINT64_MAX)
		m->n++;
	m->slot[i] = key | (uint64_t)rank << 2 * m->idbits;
	m->merged[rank] = (uint32_t)id;
}

/* Rehash into the smallest table that keeps probes short: the loaders size
 * it for a bound on the count (tiktoken: every split of every token). */
void tok_pairmap_fit(tok_pairmap *m)
{
	size_t cap = pow2_at_least(PAIRMAP_LOAD(m->n));
	if (cap >= m->mask + 1)
		return;
	uint64_t *slot = tok_alloc_table(cap * sizeof *slot);
	if (!slot)
		return; /* the larger table still works */
	for (size_t i = 0; i < cap; i++)
		slot[i] = UINT64_MAX;
	for (size_t k = 0; k <= m->mask; k++) {
		uint64_t v = m->slot[k];
		if (v == UINT64_MAX)
			continue;
		size_t i = (size_t)tok_pair_hash(v & m->keymask) & (cap - 1);
		while (slot[i] != UINT64_MAX)
			i = (i + 1) & (cap - 1);
		slot[i] = v;
	}
	free(m->slot);
	m->slot = slot;
	m->mask = cap - 1;
}

void tok_pairmap_free(tok_pairmap *m)
{
	free(m->slot);
	free(m->merged);
	m->slot = NULL;
	m->merged = NULL;
}

/* Short pieces: arrays, a full scan per merge (at most SHORT^2 lookups). */
enum { SHORT = 64 };

typedef struct heap_ent {
	uint32_t rank;
	uint32_t pos;
} heap_ent;

/* A small direct-mapped cache of the merge map in front of it: the map of a
 * 200k vocabulary is tens of megabytes and each probe misses the CPU caches,
 * while the pairs a corpus uses most are few. */
enum { PAIR_CACHE = 1 << 15 };

struct tok_bpe_scratch {
	uint64_t pc[PAIR_CACHE]; /* the map's slots; UINT64_MAX: empty */
	int32_t *id;      /* (n) symbol ids */
	uint32_t *rank;   /* (n) rank of the pair (k, next(k)), UINT32_MAX none */
	uint32_t *prev, *next;
	heap_ent *heap;
	size_t cap;
};

tok_bpe_scratch *tok_bpe_scratch_new(void)
{
	tok_bpe_scratch *s = calloc(1, sizeof(tok_bpe_scratch));
	if (s)
		for (size_t i = 0; i < PAIR_CACHE; i++)
			s->pc[i] = UINT64_MAX;
	return s;
}

void tok_bpe_scratch_free(tok_bpe_scratch *s)
{
	if (!s)
		return;
	free(s->id);
	free(s->rank);
	free(s->prev);
	free(s->next);
	free(s->heap);
	free(s);
}

static int scratch_reserve(tok_bpe_scratch *s, size_t n)
{
	if (n <= s->cap)
		return 0;
	size_t cap = pow2_at_least(n);
#define GROW(f) do { void *q = realloc(s->f, cap * sizeof *s->f); if (!q) return -1; s->f = q; } while (0)
	GROW(id);
	GROW(rank);
	GROW(prev);
	GROW(next);
	GROW(heap);
#undef GROW
	s->cap = cap;
	return 0;
}

/* The rank of the pair (a, b), UINT32_MAX when it does not merge. */
static inline uint32_t pair_rank(const tok *t, tok_bpe_scratch *s, int32_t a, int32_t b)
{
	const tok_pairmap *m = &t->pairs;
	uint64_t key = tok_pair_key(m, a, b), h = tok_pair_hash(key);
	uint64_t *c = &s->pc[(size_t)(h >> 40) & (PAIR_CACHE - 1)];
	if ((*c & m->keymask) != key) /* an empty slot's key is all ones */
		*c = tok_pairmap_get(m, key, h);
	uint64_t r = *c >> 2 * m->idbits;
	return r == m->rnone ? UINT32_MAX : (uint32_t)r;
}

/* Start the loads of the first pairs' cache and map slots before using them:
 * the misses then overlap instead of queueing. */
static void prefetch_pairs(const tok *t, const tok_bpe_scratch *s, const int32_t *id, size_t n)
{
	for (size_t k = 0; k + 1 < n; k++) {
		uint64_t h = tok_pair_hash(tok_pair_key(&t->pairs, id[k], id[k + 1]));
		__builtin_prefetch(&s->pc[(size_t)(h >> 40) & (PAIR_CACHE - 1)]);
		__builtin_prefetch(&t->pairs.slot[(size_t)h & t->pairs.mask]);
	}
}

static int bpe_short(const tok *t, tok_bpe_scratch *s, size_t n, tok_ids *out, titan_err *err)
{
	int32_t *id = s->id;
	const uint32_t *mg = t->pairs.merged;
	uint32_t *rk = s->rank;
	prefetch_pairs(t, s, id, n);
	for (size_t k = 0; k + 1 < n; k++)
		rk[k] = pair_rank(t, s, id[k], id[k + 1]);
	while (n > 1) {
		size_t best = 0;
		for (size_t k = 1; k + 1 < n; k++)
			if (rk[k] < rk[best])
				best = k;
		if (rk[best] == UINT32_MAX)
			break;
		id[best] = (int32_t)mg[rk[best]];
		memmove(id + best + 1, id + best + 2, (n - best - 2) * sizeof *id);
		memmove(rk + best + 1, rk + best + 2, (n - best - 2) * sizeof *rk);
		n--;
		if (best > 0)
			rk[best - 1] = pair_rank(t, s, id[best - 1], id[best]);
		if (best + 1 < n)
			rk[best] = pair_rank(t, s, id[best], id[best + 1]);
	}
	for (size_t k = 0; k < n; k++)
		if (tok_ids_push(out, id[k], err))
			return -1;
	return 0;
}

static inline bool heap_less(heap_ent a, heap_ent b)
{
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(heap_ent *h, size_t *n, heap_ent e)
{
	size_t i = (*n)++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!heap_less(e, h[p]))
			break;
		h[i] = h[p];
		i = p;
	}
	h[i] = e;
}

static heap_ent heap_pop(heap_ent *h, size_t *n)
{
	heap_ent top = h[0], e = h[--*n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= *n)
			break;
		if (c + 1 < *n && heap_less(h[c + 1], h[c]))
			c++;
		if (!heap_less(h[c], e))
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n)
		h[i] = e;
	return top;
}

/* Long pieces: symbols in a linked list indexed by their first byte's
 * position, candidate pairs in a min-heap on (rank, position); an entry is
 * stale when its left symbol is gone or now pairs with a different rank. */
static int bpe_long(const tok *t, tok_bpe_scratch *s, size_t n, tok_ids *out, titan_err *err)
{
	int32_t *id = s->id;
	const uint32_t *mg = t->pairs.merged;
	uint32_t *rk = s->rank, *prev = s->prev, *next = s->next;
	const uint32_t NONE = UINT32_MAX;
	size_t hn = 0;
	for (size_t k = 0; k < n; k++) {
		prev[k] = k ? (uint32_t)k - 1 : NONE;
		next[k] = k + 1 < n ? (uint32_t)k + 1 : NONE;
		rk[k] = NONE;
		if (k + 1 < n) {
			rk[k] = pair_rank(t, s, id[k], id[k + 1]);
			if (rk[k] != NONE)
				heap_push(s->heap, &hn, (heap_ent){rk[k], (uint32_t)k});
		}
	}
	while (hn) {
		heap_ent e = heap_pop(s->heap, &hn);
		uint32_t a = e.pos;
		if (id[a] < 0 || rk[a] != e.rank)
			continue;
		uint32_t b = next[a];
		id[a] = (int32_t)mg[rk[a]];
		id[b] = -1;
		next[a] = next[b];
		if (next[b] != NONE)
			prev[next[b]] = a;
		uint32_t p = prev[a];
		if (p != NONE) {
			rk[p] = pair_rank(t, s, id[p], id[a]);
			if (rk[p] != NONE)
				heap_push(s->heap, &hn, (heap_ent){rk[p], p});
		}
		rk[a] = NONE;
		if (next[a] != NONE) {
			rk[a] = pair_rank(t, s, id[a], id[next[a]]);
			if (rk[a] != NONE)
				heap_push(s->heap, &hn, (heap_ent){rk[a], a});
		}
	}
	for (uint32_t k = 0; k != NONE && k < n; k = next[k])
		if (tok_ids_push(out, id[k], err))
			return -1;
	return 0;
}

int tok_bpe_piece(const tok *t, tok_bpe_scratch *s, const uint8_t *p, size_t n, tok_ids *out,
		  titan_err *err)
{
	if (scratch_reserve(s, n))
		return err_set(err, "out of memory for a %zu-byte piece", n);
	/* HF drops a character that has no token (no unk_token in a byte-level
	 * vocabulary); its neighbours then become adjacent. */
	size_t m = 0;
	for (size_t k = 0; k < n; k++)
		if (t->byte_id[p[k]] >= 0)
			s->id[m++] = t->byte_id[p[k]];
	/* end_of_word_suffix: the word's last character carries it (every
	 * byte's suffixed token exists: checked at load). */
	if (t->has_eow && n) {
		if (t->byte_id[p[n - 1]] >= 0)
			m--;
		s->id[m++] = t->eow_id[p[n - 1]];
	}
	if (m <= SHORT)
		return bpe_short(t, s, m, out, err);
	return bpe_long(t, s, m, out, err);
}
