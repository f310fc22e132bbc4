/* tok_cache.c: compiled tokenizers in a cache folder, keyed by the SHA-256 of
 * what they were loaded from, mapped back in a few milliseconds.
 *
 * A loaded tok is mostly flat tables (token bytes, per-id arrays, the hash
 * maps of the vocabulary, the added tokens and the merges); the file holds
 * them as they are in memory, each section 64-byte aligned, so that a load is
 * an mmap, two CRC-32C passes and a check of the tables' bounds, and the
 * encoder probes the mapped tables directly.  The layout is titan-formats(5),
 * COMPILED TOKENIZER.  The file is a cache: anything wrong with it (another
 * version, a torn or corrupt file, another machine's layout) makes the loader
 * ignore it and load the source again; it is written to a temporary name and
 * renamed into place, so concurrent writers and readers never see half a file. */
#include <dirent.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/afile.h"
#include "core/crc32c.h"
#include "core/sha256.h"
#include "tok/tok_int.h"
#include "tok/tok_split_int.h"
#include "unicode/unicode.h"

#define CACHE_MAGIC "TTKC"
enum { HEADER_LEN = 128, SECTION_ALIGN = 64 };

enum {
	SEC_META, SEC_SPLITS, SEC_POOL, SEC_OFF, SEC_LEN, SEC_FLAGS, SEC_DEC, SEC_VOCAB,
	SEC_ADDED, SEC_PAIRS, SEC_MERGED, N_SEC
};

/* A tok's scalars as the file holds them (host byte order and layout: the
 * cache key includes both). */
typedef struct meta {
	int32_t format, added_mode, pretok_mode, n_splits;
	uint8_t nfc, ignore_merges, add_bos, add_eos;
	int32_t bos, eos;
	int64_t n_vocab;
	int32_t n_added_lens, pad_id;
	int32_t n_post_pre, n_post_suf;
	int32_t post_pre[TOK_MAX_AFFIX], post_suf[TOK_MAX_AFFIX];
	uint32_t added_lens[64];
	uint8_t added_first[32];
	int32_t byte_id[256];
	char encoding[32];
	char describe[512];
	uint64_t vocab_mask, added_mask, pairs_mask, pairs_n, pairs_keymask, pairs_rnone;
	uint32_t pairs_idbits, pairs_n_ranks;
	uint64_t pool_len, n_dec;
} meta;

void tok_cache_key(const uint8_t source_sha[32], const uint8_t *config_sha, int added, int pretok,
		   uint8_t key[32])
{
	/* Everything a compiled tokenizer depends on: the sources, the options,
	 * titan's loaders and Unicode version, and this machine's layout. */
	struct {
		char tag[32];
		uint32_t format, cache_version, meta_size, slot_size;
		uint64_t byte_order;
		int32_t added, pretok;
		char unicode[16];
		uint8_t source[32], config[32];
	} k;
	memset(&k, 0, sizeof k);
	snprintf(k.tag, sizeof k.tag, "titan compiled tokenizer");
	k.format = TOK_CACHE_FORMAT;
	k.cache_version = TOK_CACHE_VERSION;
	k.meta_size = sizeof(meta);
	k.slot_size = sizeof(tok_strslot);
	k.byte_order = 0x0102030405060708ull;
	k.added = added;
	k.pretok = pretok;
	snprintf(k.unicode, sizeof k.unicode, "%s", uni_version);
	memcpy(k.source, source_sha, 32);
	if (config_sha)
		memcpy(k.config, config_sha, 32);
	titan_err err;
	if (sha256(&k, sizeof k, key, &err))
		memset(key, 0, 32); /* no key: the file name never matches a real one */
}

static char *cache_path(const char *dir, const uint8_t key[32])
{
	char hex[65], name[80];
	sha256_hex(key, hex);
	snprintf(name, sizeof name, "%s.ttok", hex);
	return path_join(dir, name);
}

/* ---- writing ---- */

typedef struct section {
	const void *p;
	uint64_t size;
} section;

static uint64_t align_up(uint64_t x)
{
	return (x + SECTION_ALIGN - 1) / SECTION_ALIGN * SECTION_ALIGN;
}

static void put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* The whole file in memory: header, section directory, sections. */
static uint8_t *build(const section *sec, const uint8_t key[32], uint64_t *size)
{
	uint64_t off[N_SEC], at = align_up(HEADER_LEN + N_SEC * 16);
	for (int i = 0; i < N_SEC; i++) {
		off[i] = at;
		at = align_up(at + sec[i].size);
	}
	uint8_t *f = calloc(1, at);
	if (!f)
		return NULL;
	memcpy(f, CACHE_MAGIC, 4);
	put_u32(f + 4, TOK_CACHE_FORMAT);
	put_u32(f + 8, HEADER_LEN);
	put_u32(f + 12, N_SEC);
	memcpy(f + 16, key, 32);
	put_u64(f + 48, at);
	for (int i = 0; i < N_SEC; i++) {
		put_u64(f + HEADER_LEN + 16 * i, off[i]);
		put_u64(f + HEADER_LEN + 16 * i + 8, sec[i].size);
		if (sec[i].size)
			memcpy(f + off[i], sec[i].p, sec[i].size);
	}
	put_u32(f + 56, crc32c(0, f + HEADER_LEN, at - HEADER_LEN));
	put_u32(f + 60, crc32c(0, f, 60));
	*size = at;
	return f;
}

/* The split regexes, each with its NUL. */
static char *splits_blob(const tok *t, uint64_t *n)
{
	size_t len = 0;
	for (int i = 0; i < t->n_splits; i++)
		len += strlen(tok_split_source(t->split[i])) + 1;
	char *b = malloc(len + 1), *q = b;
	if (!b)
		return NULL;
	for (int i = 0; i < t->n_splits; i++) {
		const char *s = tok_split_source(t->split[i]);
		memcpy(q, s, strlen(s) + 1);
		q += strlen(s) + 1;
	}
	*n = len;
	return b;
}

/* The ids whose decoded bytes differ from their pool bytes: u32 id, u32 len,
 * the bytes, padded to 4. */
static uint8_t *dec_blob(const tok *t, uint64_t *n, uint64_t *count)
{
	size_t len = 0;
	*count = 0;
	for (int64_t id = 0; id < t->n_vocab; id++)
		if (t->dec[id])
			len += 8 + (t->dec_len[id] + 3) / 4 * 4, ++*count;
	uint8_t *b = calloc(1, len + 1), *q = b;
	if (!b)
		return NULL;
	for (int64_t id = 0; id < t->n_vocab; id++) {
		if (!t->dec[id])
			continue;
		put_u32(q, (uint32_t)id);
		put_u32(q + 4, t->dec_len[id]);
		memcpy(q + 8, t->dec[id], t->dec_len[id]);
		q += 8 + (t->dec_len[id] + 3) / 4 * 4;
	}
	*n = len;
	return b;
}

/* Temporary files a killed writer left (afile's NAME.tmp.PID.XXXXXX), once
 * they are old enough that no live writer can own them. */
static void sweep(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	time_t now = time(NULL);
	while ((e = readdir(d))) {
		if (!strstr(e->d_name, ".ttok.tmp."))
			continue;
		char *p = path_join(dir, e->d_name);
		struct stat st;
		if (p && !lstat(p, &st) && S_ISREG(st.st_mode) && now - st.st_mtime > 3600)
			unlink(p);
		free(p);
	}
	closedir(d);
}

void tok_cache_write(tok *t, const char *dir, const uint8_t key[32])
{
	if (t->extended) {
		/* Unigram, a normalizer beyond NFC, Metaspace...: small tokenizers
		 * that load in milliseconds, kept out of the format. */
		snprintf(t->cache_note, sizeof t->cache_note, "not cached (pipeline beyond ByteLevel BPE)");
		return;
	}
	meta m;
	memset(&m, 0, sizeof m);
	m.pad_id = t->pad_id, m.n_post_pre = t->n_post_pre, m.n_post_suf = t->n_post_suf;
	memcpy(m.post_pre, t->post_pre, sizeof m.post_pre);
	memcpy(m.post_suf, t->post_suf, sizeof m.post_suf);
	m.format = t->format, m.added_mode = t->added_mode, m.pretok_mode = t->pretok_mode;
	m.n_splits = t->n_splits, m.nfc = t->nfc, m.ignore_merges = t->ignore_merges;
	m.add_bos = t->add_bos, m.add_eos = t->add_eos, m.bos = t->bos, m.eos = t->eos;
	m.n_vocab = t->n_vocab, m.n_added_lens = t->n_added_lens;
	memcpy(m.added_lens, t->added_lens, sizeof m.added_lens);
	memcpy(m.added_first, t->added_first, sizeof m.added_first);
	memcpy(m.byte_id, t->byte_id, sizeof m.byte_id);
	memcpy(m.encoding, t->encoding, sizeof m.encoding);
	memcpy(m.describe, t->describe, sizeof m.describe);
	m.vocab_mask = t->vocab.mask, m.added_mask = t->added.mask;
	m.pairs_mask = t->pairs.mask, m.pairs_n = t->pairs.n, m.pairs_keymask = t->pairs.keymask;
	m.pairs_rnone = t->pairs.rnone, m.pairs_idbits = t->pairs.idbits;
	m.pairs_n_ranks = t->pairs.n_ranks;
	for (int64_t id = 0; id < t->n_vocab; id++)
		if (t->len[id] != UINT32_MAX && t->off[id] + t->len[id] > m.pool_len)
			m.pool_len = t->off[id] + t->len[id];
	uint64_t nsplits = 0, ndec = 0, size = 0;
	char *splits = splits_blob(t, &nsplits);
	uint8_t *dec = dec_blob(t, &ndec, &m.n_dec);
	uint64_t nv = (uint64_t)t->n_vocab;
	section sec[N_SEC] = {
		[SEC_META] = {&m, sizeof m},
		[SEC_SPLITS] = {splits, nsplits},
		[SEC_POOL] = {t->pool, m.pool_len},
		[SEC_OFF] = {t->off, nv * sizeof *t->off},
		[SEC_LEN] = {t->len, nv * sizeof *t->len},
		[SEC_FLAGS] = {t->flags, nv},
		[SEC_DEC] = {dec, ndec},
		[SEC_VOCAB] = {t->vocab.slot, (t->vocab.mask + 1) * sizeof *t->vocab.slot},
		[SEC_ADDED] = {t->added.slot, (t->added.mask + 1) * sizeof *t->added.slot},
		[SEC_PAIRS] = {t->pairs.slot, t->pairs.slot ? (t->pairs.mask + 1) * sizeof *t->pairs.slot : 0},
		[SEC_MERGED] = {t->pairs.merged, t->pairs.merged ? ((uint64_t)t->pairs.n_ranks + 1) * 4 : 0},
	};
	uint8_t *file = splits && dec ? build(sec, key, &size) : NULL;
	char *path = cache_path(dir, key);
	titan_err err = {0};
	char why[sizeof t->cache_note]; /* what the read said, kept in front */
	snprintf(why, sizeof why, "%s%s", t->cache_note, t->cache_note[0] ? "; " : "");
	if (!file || !path)
		snprintf(t->cache_note, sizeof t->cache_note, "%scache not written: out of memory", why);
	else if (mkdir_p(dir, &err) || atomic_write_file(path, file, size, &err))
		snprintf(t->cache_note, sizeof t->cache_note, "%scache not written: %s", why, err.msg);
	else {
		snprintf(t->cache_note, sizeof t->cache_note, "%scompiled into %s", why, path);
		sweep(dir);
	}
	free(path);
	free(file);
	free(splits);
	free(dec);
}

/* ---- reading ---- */

static uint32_t get_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* The file's sections, or NULL when the header, the directory or a CRC is
 * wrong; why says which. */
static const char *check_file(const mfile *f, const uint8_t key[32], section sec[N_SEC])
{
	const uint8_t *p = f->data;
	if (f->size < align_up(HEADER_LEN + N_SEC * 16) || memcmp(p, CACHE_MAGIC, 4))
		return "not a compiled tokenizer";
	if (get_u32(p + 4) != TOK_CACHE_FORMAT || get_u32(p + 8) != HEADER_LEN ||
	    get_u32(p + 12) != N_SEC)
		return "another version";
	if (memcmp(p + 16, key, 32))
		return "another key";
	if (get_u64(p + 48) != f->size)
		return "truncated";
	if (get_u32(p + 60) != crc32c(0, p, 60))
		return "bad header CRC";
	if (get_u32(p + 56) != crc32c(0, p + HEADER_LEN, f->size - HEADER_LEN))
		return "bad CRC";
	for (int i = 0; i < N_SEC; i++) {
		uint64_t off = get_u64(p + HEADER_LEN + 16 * i), size = get_u64(p + HEADER_LEN + 16 * i + 8);
		if (off % SECTION_ALIGN || off > f->size || size > f->size - off)
			return "bad section directory";
		sec[i].p = p + off;
		sec[i].size = size;
	}
	return NULL;
}

/* The tables' sizes follow from the scalars; ids and offsets stay in range. */
static const char *check_tables(const meta *m, const section *sec)
{
	uint64_t nv = (uint64_t)m->n_vocab;
	if (m->n_vocab <= 0 || m->n_vocab > TOK_MAX_IDS || m->n_splits < 0 ||
	    m->n_splits > TOK_MAX_SPLITS || m->n_added_lens < 0 || m->n_added_lens > 64 ||
	    m->vocab_mask >= (1u << 28) || m->added_mask >= (1u << 28) || m->pairs_mask >= (1u << 28) ||
	    m->pairs_idbits > 31 || m->n_post_pre < 0 || m->n_post_pre > TOK_MAX_AFFIX ||
	    m->n_post_suf < 0 || m->n_post_suf > TOK_MAX_AFFIX || m->pad_id < -1 ||
	    m->pad_id >= m->n_vocab)
		return "bad scalars";
	for (int i = 0; i < m->n_post_pre + m->n_post_suf; i++) {
		int32_t id = i < m->n_post_pre ? m->post_pre[i] : m->post_suf[i - m->n_post_pre];
		if (id < 0 || id >= m->n_vocab)
			return "a special token with a bad id";
	}
	if (sec[SEC_POOL].size != m->pool_len || sec[SEC_OFF].size != nv * 8 ||
	    sec[SEC_LEN].size != nv * 4 || sec[SEC_FLAGS].size != nv ||
	    sec[SEC_VOCAB].size != (m->vocab_mask + 1) * sizeof(tok_strslot) ||
	    sec[SEC_ADDED].size != (m->added_mask + 1) * sizeof(tok_strslot) ||
	    sec[SEC_PAIRS].size != (m->pairs_mask + 1) * 8 ||
	    sec[SEC_MERGED].size != ((uint64_t)m->pairs_n_ranks + 1) * 4)
		return "bad table sizes";
	const uint64_t *off = sec[SEC_OFF].p;
	const uint32_t *len = sec[SEC_LEN].p, *merged = sec[SEC_MERGED].p;
	for (uint64_t id = 0; id < nv; id++)
		if (len[id] != UINT32_MAX && (off[id] > m->pool_len || len[id] > m->pool_len - off[id]))
			return "a token outside the pool";
	const tok_strslot *slots[2] = {sec[SEC_VOCAB].p, sec[SEC_ADDED].p};
	uint64_t nslots[2] = {m->vocab_mask + 1, m->added_mask + 1};
	for (int k = 0; k < 2; k++)
		for (uint64_t i = 0; i < nslots[k]; i++)
			if (slots[k][i].id >= m->n_vocab || slots[k][i].id < -1 ||
			    (slots[k][i].id >= 0 && len[slots[k][i].id] == UINT32_MAX))
				return "a map slot with a bad id";
	for (uint64_t r = 0; r < m->pairs_n_ranks; r++)
		if (merged[r] >= nv && merged[r] != UINT32_MAX)
			return "a merge making a bad id";
	const uint64_t *pairs = sec[SEC_PAIRS].p;
	for (uint64_t i = 0; i <= m->pairs_mask; i++) {
		uint64_t v = pairs[i];
		if (v == UINT64_MAX)
			continue;
		uint64_t rank = v >> 2 * m->pairs_idbits, a = (v & m->pairs_keymask) >> m->pairs_idbits;
		uint64_t b = v & ((UINT64_C(1) << m->pairs_idbits) - 1);
		if (rank >= m->pairs_n_ranks || merged[rank] >= nv || a >= nv || b >= nv)
			return "a bad merge";
	}
	for (int i = 0; i < 256; i++)
		if (m->byte_id[i] >= m->n_vocab)
			return "a bad byte id";
	return NULL;
}

/* The splits and the decoded bytes of added tokens, into t. */
static int rebuild(tok *t, const meta *m, const section *sec, titan_err *err)
{
	const char *s = sec[SEC_SPLITS].p, *end = s + sec[SEC_SPLITS].size;
	for (int i = 0; i < m->n_splits; i++) {
		const char *nul = memchr(s, 0, (size_t)(end - s));
		if (!nul)
			return 1;
		/* A regex that does not compile now is a bad file (or a titan that
		 * refuses what an older one took): the source decides. */
		if (!(t->split[i] = tok_split_new(s, t->pretok_mode, err)))
			return 1;
		t->n_splits = i + 1;
		s = nul + 1;
	}
	t->dec = calloc((size_t)m->n_vocab, sizeof *t->dec);
	t->dec_len = calloc((size_t)m->n_vocab, sizeof *t->dec_len);
	if (!t->dec || !t->dec_len)
		return err_set(err, "out of memory");
	const uint8_t *d = sec[SEC_DEC].p, *dend = d + sec[SEC_DEC].size;
	for (uint64_t k = 0; k < m->n_dec; k++) {
		if (dend - d < 8)
			return 1;
		uint32_t id = get_u32(d), len = get_u32(d + 4);
		uint64_t step = 8 + ((uint64_t)len + 3) / 4 * 4;
		if (id >= m->n_vocab || (uint64_t)(dend - d) < step || t->dec[id])
			return 1;
		if (!(t->dec[id] = malloc(len + 1)))
			return err_set(err, "out of memory");
		memcpy(t->dec[id], d + 8, len);
		t->dec_len[id] = len;
		d += step;
	}
	return 0;
}

static void adopt(tok *t, const meta *m, const section *sec)
{
	t->format = m->format, t->added_mode = m->added_mode, t->pretok_mode = m->pretok_mode;
	t->nfc = m->nfc, t->ignore_merges = m->ignore_merges, t->add_bos = m->add_bos;
	t->add_eos = m->add_eos, t->bos = m->bos, t->eos = m->eos, t->n_vocab = m->n_vocab;
	t->n_added_lens = m->n_added_lens;
	t->pad_id = m->pad_id, t->n_post_pre = m->n_post_pre, t->n_post_suf = m->n_post_suf;
	memcpy(t->post_pre, m->post_pre, sizeof t->post_pre);
	memcpy(t->post_suf, m->post_suf, sizeof t->post_suf);
	memcpy(t->added_lens, m->added_lens, sizeof t->added_lens);
	memcpy(t->added_first, m->added_first, sizeof t->added_first);
	memcpy(t->byte_id, m->byte_id, sizeof t->byte_id);
	memcpy(t->encoding, m->encoding, sizeof t->encoding);
	memcpy(t->describe, m->describe, sizeof t->describe);
	t->encoding[sizeof t->encoding - 1] = t->describe[sizeof t->describe - 1] = 0;
	/* The tables stay in the mapping; tok_free leaves them to it. */
	t->pool = (uint8_t *)sec[SEC_POOL].p;
	t->off = (uint64_t *)sec[SEC_OFF].p;
	t->len = (uint32_t *)sec[SEC_LEN].p;
	t->flags = (uint8_t *)sec[SEC_FLAGS].p;
	tok_strmap *maps[2] = {&t->vocab, &t->added};
	const section *ms[2] = {&sec[SEC_VOCAB], &sec[SEC_ADDED]};
	uint64_t masks[2] = {m->vocab_mask, m->added_mask};
	for (int k = 0; k < 2; k++) {
		maps[k]->slot = (tok_strslot *)ms[k]->p;
		maps[k]->mask = masks[k];
		maps[k]->pool = t->pool, maps[k]->off = t->off, maps[k]->len = t->len;
	}
	t->pairs.slot = (uint64_t *)sec[SEC_PAIRS].p;
	t->pairs.merged = (uint32_t *)sec[SEC_MERGED].p;
	t->pairs.mask = m->pairs_mask, t->pairs.n = m->pairs_n, t->pairs.idbits = m->pairs_idbits;
	t->pairs.keymask = m->pairs_keymask, t->pairs.rnone = m->pairs_rnone;
	t->pairs.n_ranks = m->pairs_n_ranks;
	t->mapped = true;
}

int tok_cache_read(tok *t, const char *dir, const uint8_t key[32], titan_err *err)
{
	char *path = cache_path(dir, key);
	if (!path)
		return err_set(err, "out of memory");
	mfile f;
	titan_err ferr;
	if (mfile_open(&f, path, &ferr)) {
		snprintf(t->cache_note, sizeof t->cache_note, "not in the cache");
		free(path);
		return 1;
	}
	section sec[N_SEC];
	meta m;
	const char *why = check_file(&f, key, sec);
	if (!why && sec[SEC_META].size != sizeof m)
		why = "bad scalars";
	if (!why) {
		memcpy(&m, sec[SEC_META].p, sizeof m);
		why = check_tables(&m, sec);
	}
	if (why) {
		snprintf(t->cache_note, sizeof t->cache_note, "%s ignored: %s", path, why);
		mfile_close(&f);
		free(path);
		return 1;
	}
	t->pretok_mode = m.pretok_mode;
	int rc = rebuild(t, &m, sec, err);
	if (rc) {
		for (int i = 0; i < t->n_splits; i++)
			tok_split_free(t->split[i]);
		t->n_splits = 0;
		if (t->dec)
			for (int64_t id = 0; id < m.n_vocab; id++)
				free(t->dec[id]);
		free(t->dec);
		free(t->dec_len);
		t->dec = NULL, t->dec_len = NULL;
		mfile_close(&f);
		if (rc > 0)
			snprintf(t->cache_note, sizeof t->cache_note, "%s ignored: bad splits or decoded tokens",
				 path);
		free(path);
		return rc < 0 ? -1 : 1;
	}
	adopt(t, &m, sec);
	t->map = f;
	snprintf(t->cache_note, sizeof t->cache_note, "compiled, from %s", path);
	free(path);
	return 0;
}
