/* tok_unigram.c: the SentencePiece Unigram model as HF tokenizers runs it
 * (models/unigram, encode_optimized): Viterbi over the pieces that start at
 * each character, best total score wins, the first candidate found wins a tie
 * (pieces in order of length, then the unknown-character candidate); a
 * character no one-character piece covers gets unk_id with the score
 * min_score - 10; consecutive unknowns fuse into one; each resulting string is
 * then looked up again (a fused string may be a piece), else becomes its
 * bytes' <0xXX> pieces under byte_fallback when all exist, else unk_id.
 * Scores are doubles summed left to right, as HF sums its f64s. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tok_int.h"
#include "unicode/unicode.h"

/* Every prefix of every piece, so that the search from a character stops as
 * soon as no piece goes on (the role of HF's trie). */
typedef struct uni_slot {
	uint64_t h;
	uint32_t off, len; /* the prefix: bytes off..off+len of the pool */
	int32_t id;        /* the piece it is, or -1 for a proper prefix only */
} uni_slot;

struct tok_unigram {
	uint8_t *pool;     /* the pieces' bytes */
	uni_slot *slot;
	size_t mask;
	double *score;     /* (n_pieces) */
	int32_t n_pieces;
	int32_t unk_id;
	double unk_score;  /* min_score - 10 (HF's K_UNK_PENALTY) */
	bool byte_fallback;
	int32_t byte_piece[256]; /* "<0xXX>" ids, -1 when absent */
};

struct tok_uni_scratch {
	double *score;     /* (n + 1) best score of a path ending at each byte */
	int64_t *start;    /* (n + 1) where its last piece starts; -1: none yet */
	int32_t *id;       /* (n + 1) that piece */
	size_t cap;
};

static uint64_t fnv_step(uint64_t h, uint8_t b) { return (h ^ b) * 0x100000001b3ull; }
#define FNV_INIT 0xcbf29ce484222325ull

static uni_slot *slot_find(const tok_unigram *u, uint64_t h, const uint8_t *p, size_t n)
{
	for (size_t i = (size_t)h & u->mask;; i = (i + 1) & u->mask) {
		uni_slot *s = &u->slot[i];
		if (s->len == 0)
			return s; /* empty: where it would go */
		if (s->h == h && s->len == n && !memcmp(u->pool + s->off, p, n))
			return s;
	}
}

static int build_prefixes(tok_unigram *u, const uint32_t *off, const uint32_t *len,
			  size_t total, titan_err *err)
{
	size_t cap = 16;
	while (cap < 2 * total + 16)
		cap *= 2;
	u->slot = calloc(cap, sizeof *u->slot);
	if (!u->slot)
		return err_set(err, "out of memory for the Unigram pieces");
	u->mask = cap - 1;
	for (int32_t id = 0; id < u->n_pieces; id++) {
		const uint8_t *p = u->pool + off[id];
		uint64_t h = FNV_INIT;
		for (uint32_t k = 1; k <= len[id]; k++) {
			h = fnv_step(h, p[k - 1]);
			uni_slot *s = slot_find(u, h, p, k);
			if (s->len == 0)
				*s = (uni_slot){h, off[id], k, -1};
			if (k == len[id])
				s->id = id;
		}
	}
	return 0;
}

static int32_t piece_id(const tok_unigram *u, const uint8_t *p, size_t n)
{
	uint64_t h = FNV_INIT;
	for (size_t k = 0; k < n; k++)
		h = fnv_step(h, p[k]);
	const uni_slot *s = n ? slot_find(u, h, p, n) : NULL;
	return s && s->len ? s->id : -1;
}

void tok_unigram_free(tok_unigram *u)
{
	if (!u)
		return;
	free(u->pool);
	free(u->slot);
	free(u->score);
	free(u);
}

/* model.vocab's entries: their strings into the pool, scores kept. */
static int read_pieces(tok_unigram *u, json_t *vocab, uint32_t *off, uint32_t *len,
		       size_t *total, titan_err *err)
{
	size_t i, n = 0;
	json_t *e;
	json_array_foreach(vocab, i, e) {
		json_t *s = json_array_get(e, 0), *sc = json_array_get(e, 1);
		if (!json_is_array(e) || json_array_size(e) != 2 || !json_is_string(s) ||
		    !json_is_number(sc))
			return err_set(err, "model.vocab[%zu] is not [piece, score]", i);
		n += json_string_length(s);
	}
	if (n >= UINT32_MAX)
		return err_set(err, "model.vocab: %zu bytes of pieces, too many", n);
	u->pool = malloc(n + 1);
	if (!u->pool)
		return err_set(err, "out of memory");
	size_t k = 0;
	json_array_foreach(vocab, i, e) {
		json_t *s = json_array_get(e, 0);
		off[i] = (uint32_t)k;
		len[i] = (uint32_t)json_string_length(s);
		memcpy(u->pool + k, json_string_value(s), len[i]);
		k += len[i];
		u->score[i] = json_number_value(json_array_get(e, 1));
	}
	*total = k;
	return 0;
}

int tok_unigram_load(tok *t, json_t *model, titan_err *err)
{
	json_t *vocab = json_object_get(model, "vocab"), *unk = json_object_get(model, "unk_id");
	size_t n = json_array_size(vocab);
	if (!json_is_array(vocab) || n == 0 || n >= TOK_MAX_IDS)
		return err_set(err, "Unigram model.vocab is not a non-empty list of [piece, score] "
			       "(at most %d)", TOK_MAX_IDS);
	if (!json_is_integer(unk) || json_integer_value(unk) < 0 ||
	    json_integer_value(unk) >= (json_int_t)n)
		return err_set(err, "Unigram unk_id is %s: titan needs an id in 0..%zu (HF fails "
			       "on an unknown character without one)", json_is_null(unk) || !unk ?
			       "null" : "out of range", n - 1);
	tok_unigram *u = calloc(1, sizeof *u);
	uint32_t *off = malloc(n * sizeof *off), *len = malloc(n * sizeof *len);
	if (u)
		u->score = malloc(n * sizeof *u->score);
	int rc = -1;
	size_t total = 0;
	if (!u || !off || !len || !u->score) {
		err_set(err, "out of memory");
		goto out;
	}
	u->n_pieces = (int32_t)n;
	u->unk_id = (int32_t)json_integer_value(unk);
	u->byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
	if (read_pieces(u, vocab, off, len, &total, err) || build_prefixes(u, off, len, total, err))
		goto out;
	double min = INFINITY;
	for (size_t i = 0; i < n; i++) {
		if (len[i] && piece_id(u, u->pool + off[i], len[i]) != (int32_t)i) {
			err_set(err, "model.vocab[%zu] \"%.40s\" is also a later entry (titan needs one "
				"id per piece)", i, json_string_value(json_array_get(json_array_get(vocab, i), 0)));
			goto out;
		}
		if (u->score[i] < min)
			min = u->score[i];
	}
	u->unk_score = min - 10.0;
	for (int b = 0; b < 256; b++) {
		char name[8];
		snprintf(name, sizeof name, "<0x%02X>", b);
		u->byte_piece[b] = piece_id(u, (const uint8_t *)name, 6);
	}
	t->uni = u;
	u = NULL;
	rc = 0;
out:
	tok_unigram_free(u);
	free(off);
	free(len);
	return rc;
}

tok_uni_scratch *tok_uni_scratch_new(void)
{
	return calloc(1, sizeof(tok_uni_scratch));
}

void tok_uni_scratch_free(tok_uni_scratch *s)
{
	if (!s)
		return;
	free(s->score);
	free(s->start);
	free(s->id);
	free(s);
}

static int scratch_fit(tok_uni_scratch *s, size_t n)
{
	if (n + 1 <= s->cap)
		return 0;
	size_t cap = n + 1 > 2 * s->cap ? n + 1 : 2 * s->cap;
	double *sc = realloc(s->score, cap * sizeof *sc);
	if (sc)
		s->score = sc;
	int64_t *st = realloc(s->start, cap * sizeof *st);
	if (st)
		s->start = st;
	int32_t *id = realloc(s->id, cap * sizeof *id);
	if (id)
		s->id = id;
	if (!sc || !st || !id)
		return -1;
	s->cap = cap;
	return 0;
}

/* A path through k: kept when none reached k yet or it scores higher. */
static void relax(tok_uni_scratch *s, size_t k, double score, size_t from, int32_t id)
{
	if (s->start[k] < 0 || score > s->score[k]) {
		s->score[k] = score;
		s->start[k] = (int64_t)from;
		s->id[k] = id;
	}
}

static void viterbi(const tok_unigram *u, tok_uni_scratch *s, const uint8_t *p, size_t n)
{
	for (size_t k = 0; k <= n; k++)
		s->start[k] = -1;
	s->score[0] = 0.0;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t mblen = uni_utf8_decode(p + i, n - i, &cp);
		double base = s->score[i];
		bool single = false;
		uint64_t h = FNV_INIT;
		for (size_t j = i; j < n; j++) {
			h = fnv_step(h, p[j]);
			const uni_slot *sl = slot_find(u, h, p + i, j + 1 - i);
			if (sl->len == 0)
				break;
			if (sl->id < 0)
				continue;
			relax(s, j + 1, u->score[sl->id] + base, i, sl->id);
			single |= j + 1 - i == mblen;
		}
		if (!single)
			relax(s, i + mblen, u->unk_score + base, i, u->unk_id);
		i += mblen;
	}
}

/* One result string's ids: the piece, else its bytes' pieces, else unk. */
static int emit(const tok_unigram *u, const uint8_t *p, size_t n, tok_ids *out, titan_err *err)
{
	int32_t id = piece_id(u, p, n);
	if (id >= 0)
		return tok_ids_push(out, id, err);
	bool bytes = u->byte_fallback;
	for (size_t k = 0; bytes && k < n; k++)
		bytes = u->byte_piece[p[k]] >= 0;
	if (!bytes)
		return tok_ids_push(out, u->unk_id, err);
	for (size_t k = 0; k < n; k++)
		if (tok_ids_push(out, u->byte_piece[p[k]], err))
			return -1;
	return 0;
}

int tok_unigram_piece(const tok *t, tok_uni_scratch *s, const uint8_t *p, size_t n,
		      tok_ids *out, titan_err *err)
{
	const tok_unigram *u = t->uni;
	if (!n)
		return 0;
	if (scratch_fit(s, n))
		return err_set(err, "out of memory for a %zu-byte piece", n);
	viterbi(u, s, p, n);
	/* Back from the end: the path's pieces in reverse, stored as their end
	 * offsets in id[] slots already passed (start[k] < k). */
	size_t m = 0;
	for (size_t k = n; k > 0; k = (size_t)s->start[k])
		m++;
	size_t *ends = malloc(m * sizeof *ends);
	if (!ends)
		return err_set(err, "out of memory");
	size_t j = m;
	for (size_t k = n; k > 0; k = (size_t)s->start[k])
		ends[--j] = k;
	int rc = 0;
	for (size_t a = 0; a < m && !rc;) {
		size_t from = (size_t)s->start[ends[a]], b = a + 1;
		if (s->id[ends[a]] == u->unk_id) /* HF fuses a run of unknowns */
			while (b < m && s->id[ends[b]] == u->unk_id)
				b++;
		rc = emit(u, p + from, ends[b - 1] - from, out, err);
		a = b;
	}
	free(ends);
	return rc;
}
