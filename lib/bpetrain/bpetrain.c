/* ByteLevel BPE training, step for step like HF tokenizers' BpeTrainer (see
 * bpetrain.h for the rules and the quirks kept on purpose). */
#include "bpetrain/bpetrain.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/afile.h"
#include "textin/textin.h"
#include "tok/tok.h"

/* Byte strings -> u64 values: open addressing over entry indices, keys kept
 * in an arena. */
typedef struct bent {
	uint64_t hash;
	size_t off, len;
	uint64_t val;
} bent;

typedef struct bmap {
	uint32_t *slots; /* entry index + 1, 0 when empty */
	size_t cap;      /* a power of two */
	bent *e;
	size_t n, ecap;
	uint8_t *arena;
	size_t an, acap;
} bmap;

static uint64_t hash_bytes(const uint8_t *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, then a final mix */
	for (size_t i = 0; i < n; i++)
		h = (h ^ s[i]) * 0x100000001b3ull;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	return h ^ (h >> 33);
}

static int bmap_grow(bmap *m)
{
	size_t cap = m->cap ? 2 * m->cap : 1024;
	uint32_t *slots = calloc(cap, sizeof *slots);
	if (slots == NULL)
		return -1;
	for (size_t i = 0; i < m->n; i++) {
		size_t j = m->e[i].hash & (cap - 1);
		while (slots[j])
			j = (j + 1) & (cap - 1);
		slots[j] = (uint32_t)(i + 1);
	}
	free(m->slots);
	m->slots = slots;
	m->cap = cap;
	return 0;
}

/* Find or insert key s; *val points at its value (valid until the next
 * insert).  1 inserted (value 0), 0 found, -1 out of memory. */
static int bmap_upsert(bmap *m, const uint8_t *s, size_t n, uint64_t **val)
{
	if (2 * (m->n + 1) > m->cap && bmap_grow(m) != 0)
		return -1;
	uint64_t h = hash_bytes(s, n);
	size_t j = h & (m->cap - 1);
	while (m->slots[j]) {
		bent *e = &m->e[m->slots[j] - 1];
		if (e->hash == h && e->len == n && memcmp(m->arena + e->off, s, n) == 0) {
			*val = &e->val;
			return 0;
		}
		j = (j + 1) & (m->cap - 1);
	}
	if (m->n == m->ecap) {
		size_t cap = m->ecap ? 2 * m->ecap : 1024;
		bent *e = realloc(m->e, cap * sizeof *e);
		if (e == NULL)
			return -1;
		m->e = e;
		m->ecap = cap;
	}
	if (m->acap - m->an < n) {
		size_t cap = m->acap ? m->acap : 65536;
		while (cap - m->an < n)
			cap *= 2;
		uint8_t *a = realloc(m->arena, cap);
		if (a == NULL)
			return -1;
		m->arena = a;
		m->acap = cap;
	}
	if (n)
		memcpy(m->arena + m->an, s, n);
	m->e[m->n] = (bent){h, m->an, n, 0};
	m->an += n;
	m->slots[j] = (uint32_t)(++m->n);
	*val = &m->e[m->n - 1].val;
	return 1;
}

static void bmap_free(bmap *m)
{
	free(m->slots);
	free(m->e);
	free(m->arena);
	memset(m, 0, sizeof *m);
}

/* Pairs (left << 32 | right) -> counts. */
#define PAIR_NONE UINT64_MAX

typedef struct pmap {
	uint64_t *k;
	int64_t *v;
	size_t cap, n;
} pmap;

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

static int pmap_grow(pmap *m)
{
	size_t cap = m->cap ? 2 * m->cap : 4096;
	uint64_t *k = malloc(cap * sizeof *k);
	int64_t *v = malloc(cap * sizeof *v);
	if (k == NULL || v == NULL) {
		free(k);
		free(v);
		return -1;
	}
	memset(k, 0xff, cap * sizeof *k);
	for (size_t i = 0; i < m->cap; i++) {
		if (m->k[i] == PAIR_NONE)
			continue;
		size_t j = mix64(m->k[i]) & (cap - 1);
		while (k[j] != PAIR_NONE)
			j = (j + 1) & (cap - 1);
		k[j] = m->k[i];
		v[j] = m->v[i];
	}
	free(m->k);
	free(m->v);
	m->k = k;
	m->v = v;
	m->cap = cap;
	return 0;
}

/* The count of pair, created at 0 when missing; NULL out of memory. */
static int64_t *pmap_at(pmap *m, uint64_t pair)
{
	if (2 * (m->n + 1) > m->cap && pmap_grow(m) != 0)
		return NULL;
	size_t j = mix64(pair) & (m->cap - 1);
	while (m->k[j] != PAIR_NONE && m->k[j] != pair)
		j = (j + 1) & (m->cap - 1);
	if (m->k[j] == PAIR_NONE) {
		m->k[j] = pair;
		m->v[j] = 0;
		m->n++;
	}
	return &m->v[j];
}

static void pmap_free(pmap *m)
{
	free(m->k);
	free(m->v);
	memset(m, 0, sizeof *m);
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the
 * others to U+0100 + n in byte order. */
static uint32_t byte_cp(unsigned b)
{
	if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
		return b;
	unsigned n = 0;
	for (unsigned c = 0; c < b; c++)
		if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174))
			n++;
	return 256 + n;
}

static int cp_byte(uint32_t cp)
{
	for (unsigned b = 0; b < 256; b++)
		if (byte_cp(b) == cp)
			return (int)b;
	return -1;
}

/* The raw bytes whose ByteLevel form is the UTF-8 string s, or -1 when s has
 * a character outside the ByteLevel alphabet. */
static int bytelevel_inverse(const char *s, uint8_t *out, size_t *n)
{
	const unsigned char *p = (const unsigned char *)s;
	*n = 0;
	while (*p) {
		uint32_t cp;
		if (p[0] < 0x80)
			cp = *p++;
		else if ((p[0] & 0xE0) == 0xC0 && p[1]) {
			cp = ((uint32_t)(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
			p += 2;
		} else
			return -1; /* ByteLevel symbols are all below U+0800 */
		int b = cp_byte(cp);
		if (b < 0)
			return -1;
		out[(*n)++] = (uint8_t)b;
	}
	return 0;
}

/* A queue entry: BpeTrainer's Merge {pair, count, pos}. */
typedef struct qent {
	uint64_t count;
	uint64_t pair;
	uint32_t *pos; /* word indices, ascending, no duplicates (owned) */
	size_t npos;
} qent;

typedef struct queue {
	qent *a;
	size_t n, cap;
} queue;

/* Highest count first; on equal counts the smaller pair. */
static int q_before(const qent *x, const qent *y)
{
	return x->count != y->count ? x->count > y->count : x->pair < y->pair;
}

static int q_push(queue *q, qent e)
{
	if (q->n == q->cap) {
		size_t cap = q->cap ? 2 * q->cap : 4096;
		qent *a = realloc(q->a, cap * sizeof *a);
		if (a == NULL)
			return -1;
		q->a = a;
		q->cap = cap;
	}
	size_t i = q->n++;
	while (i > 0 && q_before(&e, &q->a[(i - 1) / 2])) {
		q->a[i] = q->a[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	q->a[i] = e;
	return 0;
}

static qent q_pop(queue *q)
{
	qent top = q->a[0], last = q->a[--q->n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= q->n)
			break;
		if (c + 1 < q->n && q_before(&q->a[c + 1], &q->a[c]))
			c++;
		if (!q_before(&q->a[c], &last))
			break;
		q->a[i] = q->a[c];
		i = c;
	}
	if (q->n > 0)
		q->a[i] = last;
	return top;
}

/* A (pair, word) to revisit: BpeTrainer's where_to_update. */
typedef struct upd {
	uint64_t pair;
	uint32_t w;
} upd;

typedef struct upds {
	upd *a;
	size_t n, cap;
} upds;

static int upd_add(upds *u, uint64_t pair, uint32_t w)
{
	if (u->n == u->cap) {
		size_t cap = u->cap ? 2 * u->cap : 4096;
		upd *a = realloc(u->a, cap * sizeof *a);
		if (a == NULL)
			return -1;
		u->a = a;
		u->cap = cap;
	}
	u->a[u->n++] = (upd){pair, w};
	return 0;
}

static int upd_cmp(const void *x, const void *y)
{
	const upd *a = x, *b = y;
	if (a->pair != b->pair)
		return a->pair < b->pair ? -1 : 1;
	return (a->w > b->w) - (a->w < b->w);
}

struct bpetrain {
	bpetrain_opts o;
	char **specials; /* copies */
	const char *bos, *eos;
	tok_split *split;
	bmap words;      /* word bytes -> count */
	uint64_t n_words;
	int ran;

	/* Vocabulary: id -> bytes in tarena (a special: its content);
	 * toks: bytes -> id (a special by the bytes its ByteLevel form names). */
	bmap toks;
	uint8_t *tarena;
	size_t tan, tacap;
	size_t *toff, *tlen;
	size_t n_toks, cap_toks;
	uint64_t *merges; /* pairs in the order merged (repeats possible) */
	size_t n_merges, cap_merges;
	uint32_t byte_id[256];

	/* Training state. */
	uint32_t *sym;   /* every word's symbols */
	size_t *woff;    /* word i: sym[woff[i] .. woff[i] + wlen[i]) */
	uint32_t *wlen;
	uint64_t *wcnt;
	pmap counts;
	queue q;
	upds u;
};

/* Turn the collected (pair, word) updates into queue entries, like
 * where_to_update.drain(): a pair whose count is positive gets an entry with
 * the words it was added to. */
static int flush_updates(bpetrain *b)
{
	upds *u = &b->u;
	qsort(u->a, u->n, sizeof *u->a, upd_cmp);
	size_t i = 0;
	while (i < u->n) {
		size_t j = i;
		while (j < u->n && u->a[j].pair == u->a[i].pair)
			j++;
		int64_t *c = pmap_at(&b->counts, u->a[i].pair);
		if (c == NULL)
			return -1;
		if (*c > 0) {
			uint32_t *pos = malloc((j - i) * sizeof *pos);
			if (pos == NULL)
				return -1;
			size_t n = 0;
			for (size_t k = i; k < j; k++)
				if (n == 0 || pos[n - 1] != u->a[k].w)
					pos[n++] = u->a[k].w;
			if (q_push(&b->q, (qent){(uint64_t)*c, u->a[i].pair, pos, n}) != 0) {
				free(pos);
				return -1;
			}
		}
		i = j;
	}
	u->n = 0;
	return 0;
}

static int add_count(bpetrain *b, uint32_t l, uint32_t r, int64_t delta, uint32_t w)
{
	uint64_t pair = (uint64_t)l << 32 | r;
	int64_t *c = pmap_at(&b->counts, pair);
	if (c == NULL)
		return -1;
	*c += delta;
	return delta > 0 ? upd_add(&b->u, pair, w) : 0;
}

/* Word::merge: replace every (c1, c2), left to right without overlap, by rep,
 * and apply the count changes (times the word's count). */
static int merge_word(bpetrain *b, uint32_t w, uint32_t c1, uint32_t c2, uint32_t rep)
{
	uint32_t *s = b->sym + b->woff[w];
	size_t n = b->wlen[w], out = 0, in = 0;
	int64_t cnt = (int64_t)b->wcnt[w];
	while (in < n) {
		if (s[in] == c1 && in + 1 < n && s[in + 1] == c2) {
			if (out > 0 && (add_count(b, s[out - 1], c1, -cnt, w) != 0 ||
					add_count(b, s[out - 1], rep, cnt, w) != 0))
				return -1;
			s[out++] = rep;
			in += 2;
			if (in < n && (add_count(b, c2, s[in], -cnt, w) != 0 ||
				       add_count(b, rep, s[in], cnt, w) != 0))
				return -1;
		} else
			s[out++] = s[in++];
	}
	b->wlen[w] = (uint32_t)out;
	return 0;
}

/* A new vocabulary entry with the next id; its bytes are copied. */
static int push_token(bpetrain *b, const uint8_t *s, size_t n)
{
	if (b->n_toks == b->cap_toks) {
		size_t cap = b->cap_toks ? 2 * b->cap_toks : 1024;
		size_t *o = realloc(b->toff, cap * sizeof *o);
		if (o == NULL)
			return -1;
		b->toff = o;
		size_t *l = realloc(b->tlen, cap * sizeof *l);
		if (l == NULL)
			return -1;
		b->tlen = l;
		b->cap_toks = cap;
	}
	if (b->tacap - b->tan < n) {
		size_t cap = b->tacap ? b->tacap : 65536;
		while (cap - b->tan < n)
			cap *= 2;
		uint8_t *a = realloc(b->tarena, cap);
		if (a == NULL)
			return -1;
		b->tarena = a;
		b->tacap = cap;
	}
	if (n)
		memcpy(b->tarena + b->tan, s, n);
	b->toff[b->n_toks] = b->tan;
	b->tlen[b->n_toks] = n;
	b->tan += n;
	b->n_toks++;
	return 0;
}

/* Specials, then the 256 bytes in ByteLevel code point order (the sorted
 * initial alphabet). */
static int initial_vocab(bpetrain *b)
{
	for (size_t i = 0; i < b->o.n_specials; i++) {
		const char *s = b->specials[i];
		if (push_token(b, (const uint8_t *)s, strlen(s)) != 0)
			return -1;
		/* HF looks tokens up by their ByteLevel string, so a special spelled
		 * in ByteLevel symbols stands for those bytes too. */
		size_t len = strlen(s), n;
		uint8_t *raw = malloc(len + 1);
		if (raw == NULL)
			return -1;
		uint64_t *v;
		int r = bytelevel_inverse(s, raw, &n) == 0 ? bmap_upsert(&b->toks, raw, n, &v) : 0;
		free(raw);
		if (r < 0)
			return -1;
		if (r == 1)
			*v = i;
	}
	unsigned order[256];
	for (unsigned i = 0; i < 256; i++)
		order[i] = i;
	for (unsigned i = 1; i < 256; i++) /* insertion sort by code point */
		for (unsigned j = i; j > 0 && byte_cp(order[j]) < byte_cp(order[j - 1]); j--) {
			unsigned t = order[j];
			order[j] = order[j - 1];
			order[j - 1] = t;
		}
	for (unsigned i = 0; i < 256; i++) {
		uint8_t c = (uint8_t)order[i];
		uint64_t *v;
		int r = bmap_upsert(&b->toks, &c, 1, &v);
		if (r < 0)
			return -1;
		if (r == 1) {
			*v = b->n_toks;
			if (push_token(b, &c, 1) != 0)
				return -1;
		}
		b->byte_id[c] = (uint32_t)*v;
	}
	return 0;
}

/* Words as symbol arrays, their pair counts, and the first queue. */
static int setup_words(bpetrain *b)
{
	size_t nw = b->words.n, total = b->words.an;
	b->sym = malloc((total ? total : 1) * sizeof *b->sym);
	b->woff = malloc((nw ? nw : 1) * sizeof *b->woff);
	b->wlen = malloc((nw ? nw : 1) * sizeof *b->wlen);
	b->wcnt = malloc((nw ? nw : 1) * sizeof *b->wcnt);
	if (!b->sym || !b->woff || !b->wlen || !b->wcnt)
		return -1;
	size_t at = 0;
	for (size_t i = 0; i < nw; i++) {
		const bent *e = &b->words.e[i];
		const uint8_t *s = b->words.arena + e->off;
		b->woff[i] = at;
		b->wlen[i] = (uint32_t)e->len;
		b->wcnt[i] = e->val;
		for (size_t k = 0; k < e->len; k++)
			b->sym[at + k] = b->byte_id[s[k]];
		for (size_t k = 0; k + 1 < e->len; k++)
			if (add_count(b, b->sym[at + k], b->sym[at + k + 1], (int64_t)e->val,
				      (uint32_t)i) != 0)
				return -1;
		at += e->len;
	}
	return flush_updates(b);
}

static int record_merge(bpetrain *b, uint64_t pair)
{
	if (b->n_merges == b->cap_merges) {
		size_t cap = b->cap_merges ? 2 * b->cap_merges : 1024;
		uint64_t *m = realloc(b->merges, cap * sizeof *m);
		if (m == NULL)
			return -1;
		b->merges = m;
		b->cap_merges = cap;
	}
	b->merges[b->n_merges++] = pair;
	return 0;
}

/* The id of left + right's bytes, added when new. */
static int merged_id(bpetrain *b, uint32_t l, uint32_t r, uint32_t *id)
{
	size_t nl = b->tlen[l], nr = b->tlen[r];
	uint8_t *s = malloc(nl + nr + 1);
	if (s == NULL)
		return -1;
	memcpy(s, b->tarena + b->toff[l], nl);
	memcpy(s + nl, b->tarena + b->toff[r], nr);
	uint64_t *v;
	int rc = bmap_upsert(&b->toks, s, nl + nr, &v);
	if (rc == 1) {
		*v = b->n_toks;
		rc = push_token(b, s, nl + nr) == 0 ? 1 : -1;
	}
	if (rc >= 0)
		*id = (uint32_t)*v;
	free(s);
	return rc < 0 ? -1 : 0;
}

/* The merge loop of BpeTrainer::do_train. */
static int merge_loop(bpetrain *b)
{
	while (b->n_toks < b->o.vocab_size && b->q.n > 0) {
		qent top = q_pop(&b->q);
		int64_t *c = pmap_at(&b->counts, top.pair);
		if (c == NULL)
			return -1;
		if (top.count != (uint64_t)*c) {
			top.count = (uint64_t)*c;
			if (q_push(&b->q, top) != 0)
				return -1;
			continue;
		}
		if (top.count < 1 || b->o.min_frequency > top.count) {
			free(top.pos);
			break;
		}
		uint32_t l = (uint32_t)(top.pair >> 32), r = (uint32_t)top.pair, id;
		if (merged_id(b, l, r, &id) != 0 || record_merge(b, top.pair) != 0) {
			free(top.pos);
			return -1;
		}
		for (size_t k = 0; k < top.npos; k++)
			if (merge_word(b, top.pos[k], l, r, id) != 0) {
				free(top.pos);
				return -1;
			}
		free(top.pos);
		if (flush_updates(b) != 0)
			return -1;
	}
	return 0;
}

bpetrain *bpetrain_new(const bpetrain_opts *opts, titan_err *err)
{
	if (opts->vocab_size < opts->n_specials + 256) {
		err_set(err, "vocab size %zu is below %zu (the specials and 256 bytes)",
			opts->vocab_size, opts->n_specials + 256);
		return NULL;
	}
	bpetrain *b = calloc(1, sizeof *b);
	if (b == NULL || (b->specials = calloc(opts->n_specials + 1, sizeof(char *))) == NULL) {
		free(b);
		err_set(err, "out of memory");
		return NULL;
	}
	b->o = *opts;
	for (size_t i = 0; i < opts->n_specials; i++) {
		for (size_t j = 0; j < i; j++)
			if (strcmp(opts->specials[i], opts->specials[j]) == 0) {
				err_set(err, "special token '%s' given twice", opts->specials[i]);
				goto fail;
			}
		if (opts->specials[i][0] == '\0') {
			err_set(err, "empty special token");
			goto fail;
		}
		if ((b->specials[i] = strdup(opts->specials[i])) == NULL) {
			err_set(err, "out of memory");
			goto fail;
		}
	}
	const char *names[2] = {opts->bos, opts->eos};
	const char **dst[2] = {&b->bos, &b->eos};
	for (int k = 0; k < 2; k++) {
		if (names[k] == NULL)
			continue;
		size_t i = 0;
		while (i < opts->n_specials && strcmp(opts->specials[i], names[k]) != 0)
			i++;
		if (i == opts->n_specials) {
			err_set(err, "%s token '%s' is not one of the special tokens",
				k ? "EOS" : "BOS", names[k]);
			goto fail;
		}
		*dst[k] = b->specials[i];
	}
	b->split = tok_split_new(opts->pretok == BPETRAIN_GPT2 ? tok_re_gpt2 : tok_re_llama3,
				 TOK_PRETOK_AUTO, err);
	if (b->split == NULL)
		goto fail;
	return b;
fail:
	bpetrain_free(b);
	return NULL;
}

void bpetrain_free(bpetrain *b)
{
	if (b == NULL)
		return;
	for (size_t i = 0; b->specials && i < b->o.n_specials; i++)
		free(b->specials[i]);
	free(b->specials);
	if (b->split)
		tok_split_free(b->split);
	bmap_free(&b->words);
	bmap_free(&b->toks);
	free(b->tarena);
	free(b->toff);
	free(b->tlen);
	free(b->merges);
	free(b->sym);
	free(b->woff);
	free(b->wlen);
	free(b->wcnt);
	pmap_free(&b->counts);
	for (size_t i = 0; i < b->q.n; i++)
		free(b->q.a[i].pos);
	free(b->q.a);
	free(b->u.a);
	free(b);
}

static int count_piece(void *ctx, const uint8_t *piece, size_t n)
{
	bpetrain *b = ctx;
	uint64_t *v;
	if (n == 0)
		return 0;
	if (n > UINT32_MAX || bmap_upsert(&b->words, piece, n, &v) < 0)
		return -2;
	(*v)++;
	b->n_words++;
	return 0;
}

int bpetrain_feed(bpetrain *b, const uint8_t *text, size_t n, titan_err *err)
{
	if (b->ran)
		return err_set(err, "bpetrain_feed after bpetrain_run");
	int rc = tok_split_run(b->split, text, n, count_piece, b, err);
	if (rc == -2)
		return err_set(err, "out of memory");
	return rc == 0 ? 0 : -1;
}

int bpetrain_run(bpetrain *b, titan_err *err)
{
	if (b->ran)
		return err_set(err, "bpetrain_run called twice");
	b->ran = 1;
	if (initial_vocab(b) != 0 || setup_words(b) != 0 || merge_loop(b) != 0)
		return err_set(err, "out of memory");
	return 0;
}

uint64_t bpetrain_n_words(const bpetrain *b)
{
	return b->n_words;
}

size_t bpetrain_n_distinct(const bpetrain *b)
{
	return b->words.n;
}

size_t bpetrain_n_vocab(const bpetrain *b)
{
	return b->n_toks;
}

size_t bpetrain_n_merges(const bpetrain *b)
{
	return b->n_merges;
}

/* Appending JSON text; every append reports out of memory as -1. */
static int put(textin_buf *o, const char *s)
{
	return textin_buf_append(o, s, strlen(s));
}

/* The ByteLevel string of a token (a special: its content), as JSON. */
static int put_token(textin_buf *o, const bpetrain *b, uint32_t id)
{
	const uint8_t *s = b->tarena + b->toff[id];
	size_t n = b->tlen[id];
	if (id < b->o.n_specials)
		return textin_json_quote(o, (const char *)s, n);
	textin_buf t = {0};
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		uint32_t cp = byte_cp(s[i]);
		char u[2];
		if (cp < 0x80) {
			u[0] = (char)cp;
			rc = textin_buf_append(&t, u, 1);
		} else {
			u[0] = (char)(0xC0 | (cp >> 6));
			u[1] = (char)(0x80 | (cp & 0x3F));
			rc = textin_buf_append(&t, u, 2);
		}
	}
	if (rc == 0)
		rc = textin_json_quote(o, t.p ? t.p : "", t.n);
	free(t.p);
	return rc;
}

static int put_added(textin_buf *o, const bpetrain *b, size_t i, const char *indent)
{
	char head[64];
	snprintf(head, sizeof head, "%s{\"id\": %zu, \"content\": ", indent, i);
	return put(o, head) || put_token(o, b, (uint32_t)i) ||
	       put(o, ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
		      "\"normalized\": false, \"special\": true}");
}

static int put_pretok(textin_buf *o, const bpetrain *b)
{
	if (b->o.pretok == BPETRAIN_GPT2)
		return put(o, "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
			      "\"trim_offsets\": true, \"use_regex\": true}");
	return put(o, "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
		      "\"pattern\": {\"Regex\": ") ||
	       textin_json_quote(o, tok_re_llama3, strlen(tok_re_llama3)) ||
	       put(o, "}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": "
		      "\"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
		      "\"use_regex\": false}]}");
}

/* One template item: {"SpecialToken": {...}} or {"Sequence": {...}}. */
static int put_item(textin_buf *o, const char *special, const char *seq, int type_id)
{
	char tail[32];
	snprintf(tail, sizeof tail, ", \"type_id\": %d}}", type_id);
	if (special)
		return put(o, "{\"SpecialToken\": {\"id\": ") ||
		       textin_json_quote(o, special, strlen(special)) || put(o, tail);
	return put(o, "{\"Sequence\": {\"id\": \"") || put(o, seq) || put(o, "\"") || put(o, tail);
}

static size_t special_id(const bpetrain *b, const char *s)
{
	size_t i = 0;
	while (strcmp(b->specials[i], s) != 0)
		i++;
	return i;
}

/* TemplateProcessing adding BOS / EOS the way tokenizer_config.json says, so
 * that HF's encode() and titan-tokenize agree; null when neither is added. */
static int put_post(textin_buf *o, const bpetrain *b)
{
	const char *bos = b->o.add_bos ? b->bos : NULL, *eos = b->o.add_eos ? b->eos : NULL;
	if (bos == NULL && eos == NULL)
		return put(o, "null");
	int rc = put(o, "{\"type\": \"TemplateProcessing\", \"single\": [");
	for (int pass = 0; pass < 2 && rc == 0; pass++) {
		if (pass == 1)
			rc = put(o, "], \"pair\": [");
		for (int part = 0; part <= pass && rc == 0; part++) {
			const char *seq = part ? "B" : "A";
			int sep = part > 0;
			if (bos)
				rc = rc || (sep && put(o, ", ")) || put_item(o, bos, NULL, part);
			sep = sep || bos;
			rc = rc || (sep && put(o, ", ")) || put_item(o, NULL, seq, part);
			if (eos)
				rc = rc || put(o, ", ") || put_item(o, eos, NULL, part);
		}
	}
	rc = rc || put(o, "], \"special_tokens\": {");
	const char *list[2] = {bos, eos};
	int first = 1;
	for (int k = 0; k < 2 && rc == 0; k++) {
		if (list[k] == NULL || (k == 1 && bos && strcmp(bos, eos) == 0))
			continue;
		char ids[48];
		snprintf(ids, sizeof ids, ", \"ids\": [%zu], \"tokens\": [", special_id(b, list[k]));
		rc = (!first && put(o, ", ")) || textin_json_quote(o, list[k], strlen(list[k])) ||
		     put(o, ": {\"id\": ") || textin_json_quote(o, list[k], strlen(list[k])) ||
		     put(o, ids) || textin_json_quote(o, list[k], strlen(list[k])) || put(o, "]}");
		first = 0;
	}
	return rc || put(o, "}}");
}

/* Merges in rank order; a pair merged twice keeps its later rank (HF builds
 * its merge map from the list, the later entry overwriting the earlier). */
static int put_merges(textin_buf *o, const bpetrain *b)
{
	pmap last = {0};
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < b->n_merges; i++) {
		int64_t *v = pmap_at(&last, b->merges[i]);
		if (v == NULL)
			rc = -1;
		else
			*v = (int64_t)i;
	}
	int first = 1;
	for (size_t i = 0; rc == 0 && i < b->n_merges; i++) {
		if (*pmap_at(&last, b->merges[i]) != (int64_t)i)
			continue;
		rc = put(o, first ? "\n      [" : ",\n      [") ||
		     put_token(o, b, (uint32_t)(b->merges[i] >> 32)) || put(o, ", ") ||
		     put_token(o, b, (uint32_t)b->merges[i]) || put(o, "]");
		first = 0;
	}
	pmap_free(&last);
	return rc;
}

static int put_tokenizer_json(textin_buf *o, const bpetrain *b)
{
	int rc = put(o, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n"
			"  \"added_tokens\": [");
	for (size_t i = 0; rc == 0 && i < b->o.n_specials; i++)
		rc = put(o, i ? ",\n" : "\n") || put_added(o, b, i, "    ");
	rc = rc || put(o, "\n  ],\n  \"normalizer\": null,\n  \"pre_tokenizer\": ") ||
	     put_pretok(o, b) || put(o, ",\n  \"post_processor\": ") || put_post(o, b) ||
	     put(o, ",\n  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
		    "\"trim_offsets\": true, \"use_regex\": true},\n  \"model\": {\"type\": \"BPE\", "
		    "\"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": null, "
		    "\"end_of_word_suffix\": null, \"fuse_unk\": false, \"byte_fallback\": false, "
		    "\"ignore_merges\": false,\n    \"vocab\": {");
	for (size_t i = 0; rc == 0 && i < b->n_toks; i++) {
		char num[32];
		snprintf(num, sizeof num, ": %zu", i);
		rc = put(o, i ? ",\n      " : "\n      ") || put_token(o, b, (uint32_t)i) || put(o, num);
	}
	return rc || put(o, "\n    },\n    \"merges\": [") || put_merges(o, b) ||
	       put(o, "\n    ]\n  }\n}\n");
}

static int put_config_json(textin_buf *o, const bpetrain *b)
{
	int rc = put(o, "{\n  \"add_bos_token\": ") || put(o, b->o.add_bos ? "true" : "false") ||
		 put(o, ",\n  \"add_eos_token\": ") || put(o, b->o.add_eos ? "true" : "false") ||
		 put(o, ",\n  \"added_tokens_decoder\": {");
	for (size_t i = 0; rc == 0 && i < b->o.n_specials; i++) {
		char head[48];
		snprintf(head, sizeof head, "%s    \"%zu\": {\"content\": ", i ? ",\n" : "\n", i);
		rc = put(o, head) || put_token(o, b, (uint32_t)i) ||
		     put(o, ", \"lstrip\": false, \"normalized\": false, \"rstrip\": false, "
			    "\"single_word\": false, \"special\": true}");
	}
	rc = rc || put(o, "\n  },\n  \"bos_token\": ") ||
	     (b->bos ? textin_json_quote(o, b->bos, strlen(b->bos)) : put(o, "null")) ||
	     put(o, ",\n  \"eos_token\": ") ||
	     (b->eos ? textin_json_quote(o, b->eos, strlen(b->eos)) : put(o, "null")) ||
	     put(o, ",\n  \"clean_up_tokenization_spaces\": false,\n"
		    "  \"tokenizer_class\": \"PreTrainedTokenizerFast\"\n}\n");
	return rc;
}

int bpetrain_save(const bpetrain *b, const char *dir, titan_err *err)
{
	if (!b->ran)
		return err_set(err, "bpetrain_save before bpetrain_run");
	if (mkdir_p(dir, err) != 0)
		return -1;
	textin_buf tj = {0}, cj = {0};
	char *p1 = NULL, *p2 = NULL;
	int rc = -1;
	if (put_tokenizer_json(&tj, b) != 0 || put_config_json(&cj, b) != 0 ||
	    asprintf(&p1, "%s/tokenizer.json", dir) < 0 ||
	    asprintf(&p2, "%s/tokenizer_config.json", dir) < 0)
		err_set(err, "out of memory");
	else if (atomic_write_file(p1, tj.p, tj.n, err) == 0 &&
		 atomic_write_file(p2, cj.p, cj.n, err) == 0)
		rc = 0;
	free(tj.p);
	free(cj.p);
	free(p1);
	free(p2);
	return rc;
}
