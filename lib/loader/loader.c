/* The training data loader: see loader.h for the order it defines. */
#include "loader/loader.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/crc32c.h"
#include "loader/mixture.h"
#include "loader/sft.h"
#include "shard/shard.h"

typedef struct slot {
	int32_t *inputs, *labels, *doc_ids, *positions; /* (B, T) each */
	loader_batch b;
	mix_rows *mix;   /* a mixture's: where the rows come from */
	int rc;          /* 1 batch, 0 end of val, -1 error */
	titan_err err;
} slot;

struct loader {
	loader_opts o;
	int64_t T, B;
	shard_file **files;
	uint8_t *verified;     /* per file: read whole against its CRCs and the
				  vocabulary (shard_file_verify), once, before its
				  first tokens are used */
	size_t n_files;
	uint64_t total;        /* tokens in the split */
	uint64_t units;        /* what windows cut: tokens, or pairs (documents) */
	uint64_t W;            /* windows per epoch (train) or in the pass (val) */
	loader_state id;       /* seed, seq_len, shuffle, split, data identity */
	uint32_t vocab_size;
	uint8_t fingerprint[32];
	loader_mix *mix;       /* the training split of a mixture: its sources, or NULL */

	/* producer side (the thread, or the caller when prefetch is 0) */
	uint64_t cache_epoch;
	int cache_valid;
	uint32_t *order;       /* n_files */
	uint64_t *prefix;      /* n_files + 1: offsets of the epoch's stream in units */
	shard_dec *dec;        /* shared by every shard */
	uint32_t *win;         /* (T + 1) */
	uint32_t *span;        /* documents: the tokens of a file's pairs (span_cap) */
	size_t span_cap;
	uint8_t *starts;       /* (T + 1): a document starts at this window position */

	/* SFT packing (opts.sft) */
	sft_plan *plan;
	uint32_t *doc_len;     /* every document's tokens, manifest order */
	int32_t eos;           /* the pad input */

	/* queue: batch q (0, 1, ... since the cursor was set) lives in slot q % depth */
	slot *slots;
	int depth;
	uint64_t base;         /* cursor (windows) at q = 0 */
	uint64_t produced, freed, returned;
	int held;              /* the caller holds the last returned batch */
	int ended;             /* producer reached the end of val */
	int threaded, stop;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
};

/* ---- the order */

static uint64_t mix64(uint64_t x)
{
	/* splitmix64's finaliser: a bijection with good avalanche. */
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* A seeded permutation of [0, n) evaluated at i, in O(1) memory: a balanced
 * Feistel network on the smallest even-bit power of two >= n, walking the cycle
 * until the value falls inside [0, n) (at most 4x on average). */
static uint64_t permute(uint64_t i, uint64_t n, uint64_t key)
{
	if (n <= 1)
		return i;
	unsigned bits = 64 - (unsigned)__builtin_clzll(n - 1);
	bits += bits & 1;
	unsigned h = bits / 2;
	uint64_t mask = h == 64 ? ~0ull : (1ull << h) - 1;
	uint64_t x = i;
	do {
		uint64_t L = x >> h, R = x & mask;
		for (uint64_t r = 0; r < 6; r++) {
			uint64_t F = mix64(R ^ key ^ (r * 0x632be59bd9b4e019ull)) & mask;
			uint64_t nl = R;
			R = L ^ F;
			L = nl;
		}
		x = (L << h) | R;
	} while (x >= n);
	return x;
}

static uint64_t epoch_key(const loader *l, uint64_t epoch, uint64_t what)
{
	return mix64(l->id.seed ^ mix64(epoch * 0x9e3779b97f4a7c15ull + what));
}

void loader_shard_order(const loader *l, uint64_t epoch, uint32_t *order)
{
	for (size_t i = 0; i < l->n_files; i++)
		order[i] = (uint32_t)i;
	if (!l->id.shuffle)
		return;
	uint64_t s = epoch_key(l, epoch, 1);
	for (size_t i = l->n_files; i > 1; i--) { /* Fisher-Yates */
		s = mix64(s);
		size_t j = (size_t)(s % i);
		uint32_t t = order[i - 1];
		order[i - 1] = order[j];
		order[j] = t;
	}
}

uint64_t loader_window_at(const loader *l, uint64_t p)
{
	if (l->o.split == SHARD_VAL)
		return p;
	uint64_t e = p / l->W, i = p % l->W;
	return l->id.shuffle ? permute(i, l->W, epoch_key(l, e, 2)) : i;
}

uint32_t loader_vocab_size(const loader *l)
{
	return l->vocab_size;
}

const uint8_t *loader_fingerprint(const loader *l)
{
	return l->fingerprint;
}

uint64_t loader_windows(const loader *l)
{
	return l->W;
}

size_t loader_shards(const loader *l)
{
	return l->n_files;
}

/* ---- producing one batch */

static uint64_t file_units(const loader *l, shard_file *f)
{
	const shard_header *h = shard_file_header(f);
	return l->o.documents ? h->n_tokens - h->n_docs : h->n_tokens;
}

static void set_epoch(loader *l, uint64_t e)
{
	if (l->cache_valid && l->cache_epoch == e)
		return;
	loader_shard_order(l, e, l->order);
	l->prefix[0] = 0;
	for (size_t k = 0; k < l->n_files; k++)
		l->prefix[k + 1] = l->prefix[k] + file_units(l, l->files[l->order[k]]);
	l->cache_epoch = e;
	l->cache_valid = 1;
}

/* The shard k of the epoch's order with prefix[k] <= s < prefix[k+1]. */
static size_t file_at(const loader *l, uint64_t s)
{
	size_t lo = 0, hi = l->n_files;
	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;
		if (l->prefix[mid] <= s)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* What titan-shard verify reads, done as the shard is first read (on the
 * prefetch thread), not for every shard at start: a data set of thousands of
 * shards starts at once, and each process pays for the shards it reads. */
static int verify_once(loader *l, size_t k, titan_err *err)
{
	if (!l->verified[l->order[k]]) {
		if (shard_file_verify(l->files[l->order[k]], err) != 0)
			return -1;
		l->verified[l->order[k]] = 1;
	}
	return 0;
}

/* Copy len tokens of the epoch stream from s into l->win, marking document
 * starts in l->starts. */
static int fill(loader *l, uint64_t s, size_t len, titan_err *err)
{
	size_t lo = file_at(l, s);
	memset(l->starts, 0, (size_t)l->T + 1);
	size_t done = 0;
	for (size_t k = lo; done < len; k++) {
		if (k >= l->n_files)
			return err_set(err, "%s: internal error: window past the end of the data",
				       l->o.dir);
		shard_file *f = l->files[l->order[k]];
		const shard_header *h = shard_file_header(f);
		uint64_t off = s + done - l->prefix[k];
		if (off >= h->n_tokens)
			continue;
		if (verify_once(l, k, err) != 0)
			return -1;
		size_t take = h->n_tokens - off < len - done ? (size_t)(h->n_tokens - off) : len - done;
		if (shard_file_read(f, l->dec, off, take, l->win + done, err) != 0)
			return -1;
		if (l->o.doc_bounds) {
			uint64_t d = shard_file_doc_of(f, off);
			if (shard_file_doc_start(f, d) < off)
				d++;
			for (; d < h->n_docs; d++) {
				uint64_t a = shard_file_doc_start(f, d);
				if (a >= off + take)
					break;
				l->starts[done + (a - off)] = 1;
			}
		}
		done += take;
	}
	return 0;
}

/* The document of f holding its pair q: the last d with doc_start(d) - d <= q
 * (the pairs before it; a one-token document has none, and the search passes
 * over it). */
static uint64_t doc_of_pair(shard_file *f, uint64_t q)
{
	uint64_t lo = 0, hi = shard_file_header(f)->n_docs;
	while (hi - lo > 1) {
		uint64_t mid = (lo + hi) / 2;
		if (shard_file_doc_start(f, mid) - mid <= q)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

static int grow_span(loader *l, size_t n, titan_err *err)
{
	if (n <= l->span_cap)
		return 0;
	uint32_t *p = realloc(l->span, n * sizeof *p);
	if (p == NULL)
		return err_set(err, "%s: out of memory for %zu tokens", l->o.dir, n);
	l->span = p;
	l->span_cap = n;
	return 0;
}

/* Pairs [q, q + take) of file k (of the epoch's order) into in, lab, pos: one
 * read of the tokens they span, then walked document by document.  The first
 * document counts its positions from 0 (0.3.0 normalises a window's leading
 * part of a document so); the ones after start at 0 anyway. */
static int file_pairs(loader *l, size_t k, uint64_t q, size_t take, int32_t *in, int32_t *lab,
		      int32_t *pos, titan_err *err)
{
	shard_file *f = l->files[l->order[k]];
	const shard_header *h = shard_file_header(f);
	uint64_t d = doc_of_pair(f, q), d1 = doc_of_pair(f, q + take - 1);
	uint64_t t0 = q + d, t1 = q + take - 1 + d1 + 2; /* tokens [t0, t1) */
	if (verify_once(l, k, err) != 0 || grow_span(l, (size_t)(t1 - t0), err) != 0 ||
	    shard_file_read(f, l->dec, t0, (size_t)(t1 - t0), l->span, err) != 0)
		return -1;
	uint64_t t = t0;
	int32_t p = 0;
	size_t out = 0;
	for (;;) {
		uint64_t end = d + 1 < h->n_docs ? shard_file_doc_start(f, d + 1) : h->n_tokens;
		for (; t + 1 < end && out < take; t++, out++) {
			in[out] = (int32_t)l->span[t - t0];
			lab[out] = (int32_t)l->span[t + 1 - t0];
			pos[out] = p++;
		}
		if (out == take)
			return 0;
		if (++d >= h->n_docs || (t = shard_file_doc_start(f, d)) >= t1)
			return err_set(err, "%s: internal error: pairs past the end of a shard",
				       l->o.dir);
		p = 0;
	}
}

/* len pairs of the epoch's stream from s (documents). */
static int fill_pairs(loader *l, uint64_t s, size_t len, int32_t *in, int32_t *lab,
		      int32_t *pos, titan_err *err)
{
	size_t done = 0;
	for (size_t k = file_at(l, s); done < len; k++) {
		if (k >= l->n_files)
			return err_set(err, "%s: internal error: window past the end of the data",
				       l->o.dir);
		uint64_t q = s + done - l->prefix[k], pairs = l->prefix[k + 1] - l->prefix[k];
		if (q >= pairs)
			continue;
		size_t take = pairs - q < len - done ? (size_t)(pairs - q) : len - done;
		if (file_pairs(l, k, q, take, in + done, lab + done, pos + done, err) != 0)
			return -1;
		done += take;
	}
	return 0;
}

/* Global position p's window: its start *s in the epoch's stream (in units)
 * and its length, T + 1 tokens or T pairs (documents), shorter or 0 at the
 * end of val; the epoch's order set. */
static size_t window_of(loader *l, uint64_t p, uint64_t *s)
{
	uint64_t w = (uint64_t)l->T + !l->o.documents;
	if (l->o.split == SHARD_VAL) {
		set_epoch(l, 0);
		*s = p * w;
		return p >= l->W ? 0 : l->units - *s < w ? (size_t)(l->units - *s) : (size_t)w;
	}
	set_epoch(l, p / l->W);
	*s = loader_window_at(l, p) * w;
	return (size_t)w;
}

static int make_row_docs(loader *l, uint64_t p, int32_t *in, int32_t *lab, int32_t *pos,
			 int32_t *doc, int64_t *valid, titan_err *err)
{
	const int64_t T = l->T;
	uint64_t s;
	size_t len = window_of(l, p, &s);
	if (len > 0 && fill_pairs(l, s, len, in, lab, pos, err) != 0)
		return -1;
	for (size_t t = len; t < (size_t)T; t++) { /* the short last window of val */
		in[t] = pos[t] = 0;
		lab[t] = LOADER_IGNORE_INDEX;
	}
	*valid += (int64_t)len;
	for (int64_t t = 0, c = -1; doc && t < T; t++)
		doc[t] = (int32_t)(c += pos[t] == 0);
	return 0;
}

static int make_row(loader *l, uint64_t p, int32_t *in, int32_t *lab, int32_t *doc,
		    int64_t *valid, titan_err *err)
{
	const int64_t T = l->T;
	uint64_t s;
	size_t len = window_of(l, p, &s);
	if (len > 0 && fill(l, s, len, err) != 0)
		return -1;
	int32_t c = 0;
	for (int64_t t = 0; t < T; t++) {
		in[t] = (size_t)t < len ? (int32_t)l->win[t] : 0;
		lab[t] = (size_t)t + 1 < len ? (int32_t)l->win[t + 1] : LOADER_IGNORE_INDEX;
		*valid += (size_t)t + 1 < len;
		if (doc) {
			c += t > 0 && (size_t)t < len && l->starts[t];
			doc[t] = c;
		}
	}
	return 0;
}

/* Row j of slot sl from global position p of loader l. */
static int make_any_row(loader *l, uint64_t p, slot *sl, int64_t j)
{
	const int64_t T = sl->b.T;
	int32_t *doc = sl->doc_ids ? sl->doc_ids + j * T : NULL;
	return l->o.documents ? make_row_docs(l, p, sl->inputs + j * T, sl->labels + j * T,
					      sl->positions + j * T, doc, &sl->b.n_valid, &sl->err)
			      : make_row(l, p, sl->inputs + j * T, sl->labels + j * T, doc,
					 &sl->b.n_valid, &sl->err);
}

/* A mixture's rows: each its source's window at the source's own position. */
static int make_mix_rows(loader *l, uint64_t P, uint64_t first, slot *sl)
{
	if (mix_batch(l->mix, P, (uint64_t)l->B * (uint64_t)l->o.dp_degree, first, l->B, sl->mix,
		      &sl->err) != 0)
		return -1;
	loader *src = mix_source(l->mix, sl->mix->src[0]);
	sl->b.epoch = sl->mix->k[0] / loader_windows(src);
	for (int64_t j = 0; j < l->B; j++)
		if (make_any_row(mix_source(l->mix, sl->mix->src[j]), sl->mix->k[j], sl, j) != 0)
			return -1;
	return 0;
}

/* ---- SFT packing: 0.3.0's ChatDataset (sft.h) */

/* Document d's tokens and label mask (1s in a shard without one), malloc'd. */
static int read_doc_masked(const loader *l, uint64_t d, uint32_t **tok, uint8_t **mask,
			   size_t *n, titan_err *err)
{
	loader_doc doc;
	if (loader_doc_read(l, d, &doc, err) != 0)
		return -1;
	*tok = doc.tokens;
	*n = doc.n;
	*mask = malloc(doc.n + 1);
	if (*mask == NULL) {
		free(doc.tokens);
		return err_set(err, "%s: out of memory", l->o.dir);
	}
	uint64_t docs = 0;
	for (size_t i = 0; i < l->n_files; i++) {
		const shard_header *h = shard_file_header(l->files[i]);
		if (d < docs + h->n_docs)
			return shard_file_mask(l->files[i], shard_file_doc_start(l->files[i], d - docs),
					       doc.n, *mask, err);
		docs += h->n_docs;
	}
	return 0;
}

/* One window of the rank: its conversations' pairs, then the pad. */
static int make_row_sft(loader *l, uint64_t k, int32_t *in, int32_t *lab, int32_t *pos,
			int32_t *doc, int64_t *valid, uint64_t *epoch, titan_err *err)
{
	const uint64_t *docs;
	size_t nd;
	if (sft_plan_window(l->plan, k, &docs, &nd, epoch, err) != 0)
		return -1;
	int64_t t = 0;
	for (size_t i = 0; i < nd; i++) {
		uint32_t *tok;
		uint8_t *mask;
		size_t n;
		if (read_doc_masked(l, docs[i], &tok, &mask, &n, err) != 0)
			return -1;
		for (size_t j = 0; j + 1 < n && t < l->T; j++, t++) {
			in[t] = (int32_t)tok[j];
			lab[t] = mask[j + 1] ? (int32_t)tok[j + 1] : LOADER_IGNORE_INDEX;
			pos[t] = (int32_t)j;
			*valid += mask[j + 1] != 0;
		}
		free(tok);
		free(mask);
	}
	for (int64_t p = 0; t < l->T; t++, p++) {
		in[t] = l->eos;
		lab[t] = LOADER_IGNORE_INDEX;
		pos[t] = (int32_t)p;
	}
	for (int64_t u = 0, c = -1; doc && u < l->T; u++)
		doc[u] = (int32_t)(c += pos[u] == 0);
	return 0;
}

/* The batch of the rank's windows k0 .. k0 + B - 1. */
static int produce_sft(loader *l, uint64_t k0, slot *sl)
{
	const int64_t T = l->T;
	for (int64_t j = 0; j < l->B; j++) {
		int32_t *doc = l->o.doc_bounds ? sl->doc_ids + j * T : NULL;
		uint64_t e;
		if (make_row_sft(l, k0 + (uint64_t)j, sl->inputs + j * T, sl->labels + j * T,
				 sl->positions + j * T, doc, &sl->b.n_valid, &e, &sl->err) != 0)
			return -1;
		if (j == 0)
			sl->b.epoch = e;
	}
	return 1;
}

/* SFT packing's setup at open: every document's length, the plan. */
static int open_sft(loader *l, int32_t eos, titan_err *err)
{
	if (l->o.split != LOADER_TRAIN)
		return err_set(err, "%s: SFT packing is for the train split", l->o.dir);
	if (eos < 0)
		return err_set(err, "%s: SFT packing pads with EOS: the data's tokenizer has none",
			       l->o.dir);
	l->eos = eos;
	uint64_t n = loader_doc_count(l), d = 0;
	l->doc_len = malloc((n ? n : 1) * sizeof *l->doc_len);
	if (l->doc_len == NULL)
		return err_set(err, "%s: out of memory", l->o.dir);
	for (size_t i = 0; i < l->n_files; i++) {
		shard_file *f = l->files[i];
		const shard_header *h = shard_file_header(f);
		/* the documents are read one by one, past the producer's checks: verify
		 * every shard now (SFT data sets are small) */
		if (shard_file_verify(f, err) != 0)
			return -1;
		l->verified[i] = 1;
		for (uint64_t k = 0; k < h->n_docs; k++, d++) {
			uint64_t end = k + 1 < h->n_docs ? shard_file_doc_start(f, k + 1) : h->n_tokens;
			uint64_t len = end - shard_file_doc_start(f, k);
			l->doc_len[d] = len > UINT32_MAX ? UINT32_MAX : (uint32_t)len;
		}
	}
	l->plan = sft_plan_new(l->doc_len, n, l->T, l->o.dp_rank, l->o.dp_degree, err);
	if (l->plan == NULL || sft_plan_windows0(l->plan, &l->W, err) != 0)
		return err_prefix(err, "%s", l->o.dir);
	l->id.sft_dp = (uint32_t)l->o.dp_degree;
	return 0;
}

static int produce(loader *l, uint64_t q, slot *sl)
{
	const int64_t B = l->B, T = l->T;
	uint64_t P = l->base + q * (uint64_t)B * (uint64_t)l->o.dp_degree;
	if (l->o.split == SHARD_VAL && P >= l->W)
		return sl->rc = 0;
	uint64_t first = P + (uint64_t)l->o.dp_rank * (uint64_t)B;
	sl->b = (loader_batch){.inputs = sl->inputs, .labels = sl->labels,
			       .positions = sl->positions,
			       .doc_ids = l->o.doc_bounds ? sl->doc_ids : NULL, .B = B, .T = T,
			       .position = P,
			       .epoch = l->o.split == SHARD_VAL ? 0 : first / l->W};
	if (l->mix != NULL)
		return sl->rc = make_mix_rows(l, P, first, sl) != 0 ? -1 : 1;
	if (l->o.sft)
		return sl->rc = produce_sft(l, P / (uint64_t)l->o.dp_degree, sl);
	for (int64_t j = 0; j < B; j++)
		if (make_any_row(l, first + (uint64_t)j, sl, j) != 0)
			return sl->rc = -1;
	return sl->rc = 1;
}

/* ---- the prefetch thread */

static void *prefetch_main(void *arg)
{
	loader *l = arg;
	pthread_mutex_lock(&l->mu);
	for (;;) {
		while (!l->stop && !l->ended && l->produced - l->freed >= (uint64_t)l->depth)
			pthread_cond_wait(&l->cv, &l->mu);
		if (l->stop || l->ended)
			break;
		uint64_t q = l->produced;
		pthread_mutex_unlock(&l->mu);
		/* The slot is ours: the consumer does not touch q until produced > q. */
		int rc = produce(l, q, &l->slots[q % (uint64_t)l->depth]);
		pthread_mutex_lock(&l->mu);
		l->produced = q + 1;
		if (rc <= 0)
			l->ended = 1; /* end of val, or an error the consumer will report */
		pthread_cond_broadcast(&l->cv);
	}
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

static int start_thread(loader *l, titan_err *err)
{
	l->produced = l->freed = l->returned = 0;
	l->held = l->ended = l->stop = 0;
	if (l->mix != NULL)
		mix_rewind(l->mix);
	if (!l->threaded)
		return 0;
	if (pthread_create(&l->th, NULL, prefetch_main, l) != 0) {
		l->threaded = 0;
		return err_set(err, "%s: cannot start the prefetch thread", l->o.dir);
	}
	return 0;
}

static void stop_thread(loader *l)
{
	if (!l->threaded)
		return;
	pthread_mutex_lock(&l->mu);
	l->stop = 1;
	pthread_cond_broadcast(&l->cv);
	pthread_mutex_unlock(&l->mu);
	pthread_join(l->th, NULL);
}

int loader_next(loader *l, const loader_batch **b, titan_err *err)
{
	uint64_t q = l->returned;
	slot *sl = &l->slots[q % (uint64_t)l->depth];
	if (!l->threaded) {
		if (produce(l, q, sl) < 0) {
			*err = sl->err;
			return -1;
		}
	} else {
		pthread_mutex_lock(&l->mu);
		if (l->held) {
			l->held = 0;
			l->freed++;
			pthread_cond_broadcast(&l->cv);
		}
		while (l->produced <= q)
			pthread_cond_wait(&l->cv, &l->mu);
		pthread_mutex_unlock(&l->mu);
	}
	if (sl->rc < 0) {
		*err = sl->err;
		return -1;
	}
	if (sl->rc == 0)
		return 0;
	l->returned++;
	l->held = 1;
	*b = &sl->b;
	return 1;
}

/* ---- open / close */

static int alloc_buffers(loader *l, titan_err *err)
{
	size_t bt = (size_t)l->B * (size_t)l->T;
	l->depth = l->o.prefetch > 0 ? l->o.prefetch + 1 : 1;
	l->slots = calloc((size_t)l->depth, sizeof *l->slots);
	l->order = calloc(l->n_files ? l->n_files : 1, sizeof *l->order);
	l->prefix = calloc(l->n_files + 1, sizeof *l->prefix);
	l->win = malloc(((size_t)l->T + 1) * sizeof *l->win);
	l->starts = malloc((size_t)l->T + 1);
	l->dec = shard_dec_new();
	if (!l->slots || !l->order || !l->prefix || !l->win || !l->starts || !l->dec)
		return err_set(err, "%s: out of memory", l->o.dir);
	for (int i = 0; i < l->depth; i++) {
		slot *s = &l->slots[i];
		s->inputs = malloc(bt * sizeof(int32_t));
		s->labels = malloc(bt * sizeof(int32_t));
		s->doc_ids = l->o.doc_bounds ? malloc(bt * sizeof(int32_t)) : NULL;
		int positions = l->o.documents || l->o.sft;
		s->positions = positions ? malloc(bt * sizeof(int32_t)) : NULL;
		s->mix = l->mix ? mix_rows_new(l->mix, l->B) : NULL;
		if (!s->inputs || !s->labels || (l->o.doc_bounds && !s->doc_ids) ||
		    (positions && !s->positions) || (l->mix && !s->mix))
			return err_set(err, "%s: out of memory for batch buffers", l->o.dir);
	}
	return 0;
}

static int check_opts(const loader_opts *o, titan_err *err)
{
	if (o->dir == NULL)
		return err_set(err, "loader: no folder");
	if (o->split != SHARD_TRAIN && o->split != SHARD_VAL)
		return err_set(err, "%s: split %d is not train (0) or val (1)", o->dir, o->split);
	if (o->seq_len < 1 || o->seq_len > LOADER_MAX_SEQ_LEN || o->local_batch < 1 ||
	    o->local_batch > LOADER_MAX_LOCAL_BATCH)
		return err_set(err, "%s: seq_len %lld / local_batch %lld out of range (1 to %lld / "
			       "1 to %lld)", o->dir, (long long)o->seq_len, (long long)o->local_batch,
			       (long long)LOADER_MAX_SEQ_LEN, (long long)LOADER_MAX_LOCAL_BATCH);
	if (o->dp_degree < 1 || o->dp_rank < 0 || o->dp_rank >= o->dp_degree)
		return err_set(err, "%s: dp_rank %d of dp_degree %d", o->dir, o->dp_rank,
			       o->dp_degree);
	if (o->seed >= (1ull << 63))
		return err_set(err, "%s: seed %llu is not below 2^63", o->dir,
			       (unsigned long long)o->seed);
	if (o->prefetch < 0 || o->prefetch > 64)
		return err_set(err, "%s: prefetch %d out of range 0..64", o->dir, o->prefetch);
	return 0;
}

/* The split's shards of folder dir (manifest m), after those already open
 * (a mixture's validation split is its sources' one after another). */
static int open_files(loader *l, const shard_manifest *m, const char *dir, titan_err *err)
{
	const shard_split *sp = &m->split[l->o.split];
	size_t n0 = l->n_files, cap = n0 + sp->n_shards + 1;
	shard_file **files = realloc(l->files, cap * sizeof *files);
	if (files != NULL)
		l->files = files;
	uint8_t *verified = files ? realloc(l->verified, cap) : NULL;
	if (verified != NULL)
		l->verified = verified;
	if (files == NULL || verified == NULL)
		return err_set(err, "%s: out of memory", l->o.dir);
	memset(l->verified + n0, 0, cap - n0);
	uint32_t crc = l->id.data_crc;
	for (size_t i = n0; i < n0 + sp->n_shards; i++) {
		const shard_entry *e = &sp->shards[i - n0];
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", dir, e->file);
		if ((l->files[i] = shard_file_open(path, err)) == NULL)
			return -1;
		l->n_files = i + 1;
		const shard_header *h = shard_file_header(l->files[i]);
		if (shard_entry_check(l->files[i], m, e, err) != 0)
			return -1;
		/* packing chat data as plain text would train on its prompts */
		if ((h->flags & SHARD_MASK) && !l->o.sft)
			return err_set(err, "%s: label-masked shards (SFT chat data from titan-tokenize "
				       "--chat) need SFT packing (training.sft)", path);
		l->total += h->n_tokens;
		l->units += file_units(l, l->files[i]);
		uint8_t rec[16]; /* tokens u64, data_crc, index_crc, little-endian */
		for (int b = 0; b < 8; b++)
			rec[b] = (uint8_t)(e->tokens >> (8 * b));
		for (int b = 0; b < 4; b++) {
			rec[8 + b] = (uint8_t)(e->data_crc >> (8 * b));
			rec[12 + b] = (uint8_t)(e->index_crc >> (8 * b));
		}
		crc = crc32c(crc32c(crc, e->file, strlen(e->file)), rec, sizeof rec);
	}
	l->id.data_tokens = l->total;
	l->id.data_crc = crc;
	return 0;
}

/* The data's vocabulary and tokenizer, checked against the options'. */
static int set_vocab(loader *l, uint32_t vocab_size, const uint8_t *fp, titan_err *err)
{
	const uint8_t *want = l->o.tokenizer;
	l->vocab_size = vocab_size;
	memcpy(l->fingerprint, fp, 32);
	if (vocab_size > (uint32_t)INT32_MAX)
		return err_set(err, "%s: vocab_size %u does not fit int32 ids", l->o.dir, vocab_size);
	if (want != NULL && memcmp(want, fp, 32) != 0)
		return err_set(err, "%s: tokenized with another tokenizer (fingerprint "
			       "%02x%02x%02x%02x..., expected %02x%02x%02x%02x...)", l->o.dir, fp[0],
			       fp[1], fp[2], fp[3], want[0], want[1], want[2], want[3]);
	return 0;
}

/* The split's shards of the complete shard folder dir. */
static int open_folder(loader *l, const char *dir, titan_err *err)
{
	shard_manifest m;
	if (shard_manifest_read(dir, &m, err) != 0)
		return -1;
	int rc = 0;
	if (!m.complete)
		rc = err_set(err, "%s: incomplete shard set (titan-shard was interrupted; rerun it "
			     "to finish)", dir);
	if (rc == 0)
		rc = set_vocab(l, m.stream.vocab_size, m.stream.fingerprint, err);
	if (rc == 0)
		rc = open_files(l, &m, dir, err);
	l->eos = m.stream.eos_id; /* SFT packing's pad (open_sft) */
	shard_manifest_free(&m);
	return rc;
}

/* A mixture: its train split draws from its sources (mixture.h); its val
 * split is theirs read one after another. */
static int open_mixture(loader *l, titan_err *err)
{
	if (l->o.split == SHARD_TRAIN) {
		if ((l->mix = mix_open(&l->o, err)) == NULL)
			return -1;
		mix_identity(l->mix, &l->id.data_tokens, &l->id.data_crc);
		return set_vocab(l, mix_vocab_size(l->mix), mix_fingerprint(l->mix), err);
	}
	shard_mix def;
	if (shard_mix_read(l->o.dir, &def, err) != 0)
		return -1;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < def.n; i++) {
		shard_manifest sm;
		rc = shard_mix_source_manifest(&def, i, &sm, err);
		if (rc == 0)
			shard_manifest_free(&sm);
		if (rc == 0)
			rc = open_folder(l, def.src[i].dir, err);
	}
	shard_mix_free(&def);
	return rc;
}

loader *loader_open(const loader_opts *o, titan_err *err)
{
	if (check_opts(o, err) != 0)
		return NULL;
	loader *l = calloc(1, sizeof *l);
	if (l == NULL) {
		err_set(err, "%s: out of memory", o->dir);
		return NULL;
	}
	l->o = *o;
	l->T = o->seq_len;
	l->B = o->local_batch;
	l->id = (loader_state){.seed = o->seed, .seq_len = o->seq_len,
			       .shuffle = o->split == SHARD_TRAIN && o->shuffle,
			       .documents = o->documents != 0,
			       .split = (uint32_t)o->split};
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->cv, NULL);
	int rc = shard_dir_is_mix(o->dir) ? open_mixture(l, err) : open_folder(l, o->dir, err);
	if (rc == 0 && o->sft)
		rc = l->mix != NULL ? err_set(err, "%s: SFT packing reads one shard folder, not a "
					     "mixture", o->dir)
				    : open_sft(l, l->eos, err);
	uint64_t w1 = (uint64_t)l->T + !o->documents;
	if (!o->sft)
		l->W = l->mix ? mix_windows(l->mix)
		       : o->split == SHARD_VAL ? (l->units + w1 - 1) / w1 : l->units / w1;
	if (rc == 0 && o->split == SHARD_TRAIN && l->W == 0)
		rc = err_set(err, "%s: %llu train %s, fewer than one window of %llu", o->dir,
			     (unsigned long long)l->units,
			     o->documents ? "pairs (a document's tokens less one)" : "tokens",
			     (unsigned long long)w1);
	if (rc == 0)
		rc = alloc_buffers(l, err);
	l->threaded = o->prefetch > 0;
	if (rc == 0)
		rc = start_thread(l, err);
	if (rc != 0) {
		l->threaded = 0;
		loader_close(l);
		return NULL;
	}
	return l;
}

void loader_close(loader *l)
{
	if (l == NULL)
		return;
	stop_thread(l);
	for (size_t i = 0; i < l->n_files; i++)
		shard_file_close(l->files[i]);
	free(l->files);
	free(l->verified);
	for (int i = 0; l->slots && i < l->depth; i++) {
		free(l->slots[i].inputs);
		free(l->slots[i].labels);
		free(l->slots[i].doc_ids);
		free(l->slots[i].positions);
		mix_rows_free(l->slots[i].mix);
	}
	free(l->slots);
	free(l->order);
	free(l->prefix);
	free(l->win);
	free(l->starts);
	free(l->span);
	sft_plan_free(l->plan);
	free(l->doc_len);
	shard_dec_free(l->dec);
	mix_close(l->mix);
	pthread_mutex_destroy(&l->mu);
	pthread_cond_destroy(&l->cv);
	free(l);
}

/* ---- state */

void loader_state_get(const loader *l, loader_state *s)
{
	*s = l->id;
	s->windows = l->base + l->returned * (uint64_t)l->B * (uint64_t)l->o.dp_degree;
}

/* Continue from s; a mixture's sampler from mark m, or replayed when NULL. */
static int state_set(loader *l, const loader_state *s, const mix_mark *m, titan_err *err)
{
	const loader_state *me = &l->id;
	if ((s->sft_dp != 0) != (me->sft_dp != 0))
		return err_set(err, "%s: dataloader state is for %s, this loader %s", l->o.dir,
			       s->sft_dp ? "SFT packing" : "no SFT packing",
			       me->sft_dp ? "packs SFT data" : "does not");
	if (s->sft_dp && s->sft_dp != (uint32_t)l->o.dp_degree)
		return err_set(err, "%s: SFT data loader state of %u dp ranks, this run has %d: "
			       "each rank packs its own conversations (as in torchtitan), so the "
			       "dp degree cannot change", l->o.dir, s->sft_dp, l->o.dp_degree);
	if (s->split != me->split || s->seed != me->seed || s->shuffle != me->shuffle ||
	    s->seq_len != me->seq_len || s->documents != me->documents)
		return err_set(err, "%s: dataloader state is for split %u, seed %llu, shuffle %u, "
			       "seq_len %lld, %s packing; this loader has %u, %llu, %u, %lld, %s",
			       l->o.dir, s->split, (unsigned long long)s->seed, s->shuffle,
			       (long long)s->seq_len, s->documents ? "documents'" : "windows'",
			       me->split, (unsigned long long)me->seed, me->shuffle,
			       (long long)me->seq_len, me->documents ? "documents'" : "windows'");
	if (s->data_tokens != me->data_tokens || s->data_crc != me->data_crc)
		return err_set(err, "%s: dataloader state was saved over another data set (%llu "
			       "tokens, id 0x%08x; here %llu, 0x%08x)", l->o.dir,
			       (unsigned long long)s->data_tokens, s->data_crc,
			       (unsigned long long)me->data_tokens, me->data_crc);
	stop_thread(l);
	l->base = s->windows;
	if (l->mix != NULL)
		mix_seek(l->mix, s->windows, m);
	return start_thread(l, err);
}

int loader_state_set(loader *l, const loader_state *s, titan_err *err)
{
	return state_set(l, s, NULL, err);
}

size_t loader_mix_sources(const loader *l)
{
	return l->mix ? mix_sources(l->mix) : 0;
}

/* The mixture's sampler after the batches returned so far: the held slot's
 * (the caller has not asked for the next one, so the producer leaves it). */
static const mix_mark *returned_mark(const loader *l)
{
	if (l->returned == 0)
		return mix_base(l->mix);
	return &l->slots[(l->returned - 1) % (uint64_t)l->depth].mix->after;
}

void loader_mix_taken(const loader *l, uint64_t *taken)
{
	const mix_mark *m = returned_mark(l);
	memcpy(taken, m->taken, mix_sources(l->mix) * sizeof *taken);
}

int loader_save(const loader *l, uint8_t **out, size_t *n, titan_err *err)
{
	loader_state s;
	loader_state_get(l, &s);
	*n = LOADER_STATE_BYTES + (l->mix ? mix_record_bytes(l->mix) : 0);
	if ((*out = malloc(*n)) == NULL)
		return err_set(err, "%s: out of memory", l->o.dir);
	loader_state_encode(&s, *out);
	if (l->mix != NULL)
		mix_record_encode(l->mix, returned_mark(l), *out + LOADER_STATE_BYTES);
	return 0;
}

int loader_load(loader *l, const uint8_t *buf, size_t n, loader_state *s, titan_err *err)
{
	size_t head = n > LOADER_STATE_BYTES ? LOADER_STATE_BYTES : n;
	if (loader_state_decode(buf, head, s, err) != 0)
		return -1;
	if (n == LOADER_STATE_BYTES) /* a mixture's draws replay from the seed */
		return loader_state_set(l, s, err);
	if (l->mix == NULL)
		return err_set(err, "dataloader state: %zu bytes, a mixture's, for a loader over one "
			       "shard folder (%s)", n, l->o.dir);
	mix_mark m;
	if (mix_mark_init(l->mix, &m) != 0)
		return err_set(err, "out of memory");
	int rc = mix_record_decode(l->mix, buf + head, n - head, s->windows, &m, err);
	if (rc == 0)
		rc = state_set(l, s, &m, err);
	mix_mark_free(&m);
	return rc;
}

/* ---- the documents one by one, as torchtitan 0.3.0's dataset reads them
 *
 * The manifest's order (epoch 0 of an unshuffled loader).  Only the mapped
 * headers and indexes and a decoder of the call's own are touched, never the
 * producer's caches, so these run beside the prefetch thread. */

uint64_t loader_doc_count(const loader *l)
{
	uint64_t n = 0;
	for (size_t i = 0; i < l->n_files; i++)
		n += shard_file_header(l->files[i])->n_docs;
	return n;
}

int loader_doc_of_pair(const loader *l, uint64_t pair, uint64_t *d, titan_err *err)
{
	uint64_t docs = 0, pairs = 0;
	for (size_t i = 0; i < l->n_files; i++) {
		shard_file *f = l->files[i];
		const shard_header *h = shard_file_header(f);
		uint64_t np = h->n_tokens - h->n_docs;
		if (pair < pairs + np) {
			*d = docs + doc_of_pair(f, pair - pairs);
			return 0;
		}
		docs += h->n_docs;
		pairs += np;
	}
	return err_set(err, "%s: pair %llu is past the %llu pairs of the data", l->o.dir,
		       (unsigned long long)pair, (unsigned long long)pairs);
}

int loader_doc_read(const loader *l, uint64_t d, loader_doc *out, titan_err *err)
{
	memset(out, 0, sizeof *out);
	uint64_t docs = 0, pairs = 0;
	for (size_t i = 0; i < l->n_files; i++) {
		shard_file *f = l->files[i];
		const shard_header *h = shard_file_header(f);
		if (d >= docs + h->n_docs) {
			docs += h->n_docs;
			pairs += h->n_tokens - h->n_docs;
			continue;
		}
		uint64_t k = d - docs, t0 = shard_file_doc_start(f, k);
		uint64_t t1 = k + 1 < h->n_docs ? shard_file_doc_start(f, k + 1) : h->n_tokens;
		out->pairs_before = pairs + t0 - k;
		out->n = (size_t)(t1 - t0);
		out->tokens = malloc(out->n * sizeof(uint32_t) + 1);
		shard_dec *dec = shard_dec_new();
		int rc = out->tokens == NULL || dec == NULL
				 ? err_set(err, "%s: out of memory", l->o.dir)
				 : shard_file_read(f, dec, t0, out->n, out->tokens, err);
		shard_dec_free(dec);
		if (rc != 0) {
			free(out->tokens);
			out->tokens = NULL;
		}
		return rc;
	}
	return err_set(err, "%s: document %llu is past the %llu documents of the data", l->o.dir,
		       (unsigned long long)d, (unsigned long long)docs);
}
