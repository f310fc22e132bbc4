/* The loader over a mixture of shard folders: see mixture.h. */
#include "loader/mixture.h"

#include <stdlib.h>
#include <string.h>

#include "core/crc32c.h"
#include "core/le.h"
#include "shard/shard.h"

#define RECORD_MAGIC "TLDM"
#define RECORD_FIXED (4 + 4 + 4 + 8 + 4 + 4 * MIX_MT_N + 4) /* all but the counts */

struct loader_mix {
	shard_mix def;
	loader **src;      /* def.n */
	mixer mx;
	mix_mark base;     /* where the producer starts */
	mix_mark cur;      /* the producer's sampler */
	uint64_t tokens, windows;
	uint32_t crc;
};

int mix_mark_init(const loader_mix *x, mix_mark *m)
{
	memset(m, 0, sizeof *m);
	m->taken = calloc(x->def.n, sizeof *m->taken);
	return m->taken ? 0 : -1;
}

void mix_mark_free(mix_mark *m)
{
	free(m->taken);
	m->taken = NULL;
}

static void mark_copy(const loader_mix *x, mix_mark *to, const mix_mark *from)
{
	to->pos = from->pos;
	to->rng = from->rng;
	memcpy(to->taken, from->taken, x->def.n * sizeof *to->taken);
}

/* Source i's loader, checked against the manifest's SHA-256 the mixture
 * names and the mixture's tokenizer; its identity into the mixture's. */
static int open_source(loader_mix *x, const loader_opts *o, size_t i, titan_err *err)
{
	shard_manifest sm;
	if (shard_mix_source_manifest(&x->def, i, &sm, err) != 0)
		return err_prefix(err, "%s", o->dir);
	shard_manifest_free(&sm);
	loader_opts so = *o;
	so.dir = x->def.src[i].dir;
	so.prefetch = 0;
	so.dp_rank = 0;
	so.dp_degree = 1;
	so.local_batch = 1;
	so.tokenizer = x->def.fingerprint;
	if ((x->src[i] = loader_open(&so, err)) == NULL)
		return err_prefix(err, "%s: mixture source %zu", o->dir, i + 1);
	loader_state st;
	loader_state_get(x->src[i], &st);
	uint8_t rec[20]; /* the source's tokens, CRC and weight (bits), little-endian */
	uint64_t wbits;
	memcpy(&wbits, &x->def.src[i].weight, sizeof wbits);
	le_put64(rec, st.data_tokens);
	le_put32(rec + 8, st.data_crc);
	le_put64(rec + 12, wbits);
	x->crc = crc32c(x->crc, rec, sizeof rec);
	x->tokens += st.data_tokens;
	x->windows += loader_windows(x->src[i]);
	return 0;
}

static int open_all(loader_mix *x, const loader_opts *o, titan_err *err)
{
	if (shard_mix_read(o->dir, &x->def, err) != 0)
		return -1;
	double *w = malloc(x->def.n * sizeof *w);
	x->src = calloc(x->def.n, sizeof *x->src);
	if (w == NULL || x->src == NULL || mix_mark_init(x, &x->base) || mix_mark_init(x, &x->cur)) {
		free(w);
		return err_set(err, "%s: out of memory", o->dir);
	}
	for (size_t i = 0; i < x->def.n; i++)
		w[i] = x->def.src[i].weight;
	int rc = mixer_init(&x->mx, w, x->def.n, err);
	free(w);
	if (rc != 0)
		return err_prefix(err, "%s/manifest.json", o->dir);
	uint8_t seed[8];
	le_put64(seed, x->def.seed);
	x->crc = crc32c(0, seed, sizeof seed);
	for (size_t i = 0; i < x->def.n; i++)
		if (open_source(x, o, i, err) != 0)
			return -1;
	mix_seek(x, 0, NULL);
	return 0;
}

loader_mix *mix_open(const loader_opts *o, titan_err *err)
{
	loader_mix *x = calloc(1, sizeof *x);
	if (x == NULL) {
		err_set(err, "%s: out of memory", o->dir);
		return NULL;
	}
	if (open_all(x, o, err) != 0) {
		mix_close(x);
		return NULL;
	}
	return x;
}

void mix_close(loader_mix *x)
{
	if (x == NULL)
		return;
	for (size_t i = 0; x->src && i < x->def.n; i++)
		loader_close(x->src[i]);
	free(x->src);
	mix_mark_free(&x->base);
	mix_mark_free(&x->cur);
	shard_mix_free(&x->def);
	free(x);
}

size_t mix_sources(const loader_mix *x)
{
	return x->def.n;
}

loader *mix_source(const loader_mix *x, size_t i)
{
	return x->src[i];
}

void mix_identity(const loader_mix *x, uint64_t *tokens, uint32_t *crc)
{
	*tokens = x->tokens;
	*crc = x->crc;
}

const uint8_t *mix_fingerprint(const loader_mix *x)
{
	return x->def.fingerprint;
}

uint32_t mix_vocab_size(const loader_mix *x)
{
	return x->def.vocab_size;
}

uint64_t mix_windows(const loader_mix *x)
{
	return x->windows;
}

mix_rows *mix_rows_new(const loader_mix *x, int64_t B)
{
	mix_rows *r = calloc(1, sizeof *r);
	if (r == NULL)
		return NULL;
	r->src = malloc((size_t)B * sizeof *r->src);
	r->k = malloc((size_t)B * sizeof *r->k);
	if (r->src == NULL || r->k == NULL || mix_mark_init(x, &r->after) != 0) {
		mix_rows_free(r);
		return NULL;
	}
	return r;
}

void mix_rows_free(mix_rows *r)
{
	if (r == NULL)
		return;
	free(r->src);
	free(r->k);
	mix_mark_free(&r->after);
	free(r);
}

int mix_batch(loader_mix *x, uint64_t P, uint64_t n, uint64_t first, int64_t B, mix_rows *r,
	      titan_err *err)
{
	mix_mark *c = &x->cur;
	if (c->pos != P)
		return err_set(err, "internal error: the mixture's sampler is at %llu, not %llu",
			       (unsigned long long)c->pos, (unsigned long long)P);
	for (uint64_t i = 0; i < n; i++) {
		size_t s = mixer_draw(&x->mx, &c->rng);
		uint64_t j = P + i - first;
		if (P + i >= first && j < (uint64_t)B) {
			r->src[j] = (uint32_t)s;
			r->k[j] = c->taken[s];
		}
		c->taken[s]++;
	}
	c->pos = P + n;
	mark_copy(x, &r->after, c);
	return 0;
}

const mix_mark *mix_base(const loader_mix *x)
{
	return &x->base;
}

void mix_rewind(loader_mix *x)
{
	mark_copy(x, &x->cur, &x->base);
}

void mix_seek(loader_mix *x, uint64_t p, const mix_mark *m)
{
	if (m != NULL) {
		mark_copy(x, &x->base, m);
		return;
	}
	mix_mark *b = &x->base;
	b->pos = 0;
	mix_rng_seed(&b->rng, x->def.seed);
	memset(b->taken, 0, x->def.n * sizeof *b->taken);
	for (; b->pos < p; b->pos++)
		b->taken[mixer_draw(&x->mx, &b->rng)]++;
}

size_t mix_record_bytes(const loader_mix *x)
{
	return RECORD_FIXED + 8 * x->def.n;
}

/* "TLDM" version n pos index mt[624] taken[n] crc, little-endian. */
void mix_record_encode(const loader_mix *x, const mix_mark *m, uint8_t *out)
{
	size_t n = x->def.n, at = 24 + 4 * MIX_MT_N;
	memcpy(out, RECORD_MAGIC, 4);
	le_put32(out + 4, 1);
	le_put32(out + 8, (uint32_t)n);
	le_put64(out + 12, m->pos);
	le_put32(out + 20, m->rng.index);
	for (int i = 0; i < MIX_MT_N; i++)
		le_put32(out + 24 + 4 * i, m->rng.mt[i]);
	for (size_t i = 0; i < n; i++, at += 8)
		le_put64(out + at, m->taken[i]);
	le_put32(out + at, crc32c(0, out, at));
}

int mix_record_decode(const loader_mix *x, const uint8_t *buf, size_t n, uint64_t windows,
		      mix_mark *m, titan_err *err)
{
	size_t want = mix_record_bytes(x), at = 24 + 4 * MIX_MT_N;
	if (n < 12 || memcmp(buf, RECORD_MAGIC, 4) != 0 || le_get32(buf + 4) != 1)
		return err_set(err, "dataloader state: no mixture record (\"" RECORD_MAGIC "\" "
			       "version 1) after the loader's");
	if (le_get32(buf + 8) != x->def.n || n != want)
		return err_set(err, "dataloader state: a mixture of %llu sources (%zu bytes); this "
			       "one has %zu", (unsigned long long)le_get32(buf + 8), n, x->def.n);
	if (crc32c(0, buf, want - 4) != le_get32(buf + want - 4))
		return err_set(err, "dataloader state: the mixture record's checksum is wrong");
	m->pos = le_get64(buf + 12);
	m->rng.index = (uint32_t)le_get32(buf + 20);
	for (int i = 0; i < MIX_MT_N; i++)
		m->rng.mt[i] = (uint32_t)le_get32(buf + 24 + 4 * i);
	uint64_t sum = 0;
	for (size_t i = 0; i < x->def.n; i++, at += 8)
		sum += m->taken[i] = le_get64(buf + at);
	if (m->pos != windows || sum != windows || m->rng.index > MIX_MT_N)
		return err_set(err, "dataloader state: the mixture record is at window %llu with "
			       "%llu taken, the loader's at %llu", (unsigned long long)m->pos,
			       (unsigned long long)sum, (unsigned long long)windows);
	return 0;
}
