/* unicode.c: lookups in the generated tables, UTF-8, NFC (UAX #15). */
#include "unicode/unicode.h"

#include <stdlib.h>
#include <string.h>

#include "unicode/unicode_tables.h"

uint8_t uni_props(uint32_t cp)
{
	if (cp >= 0x110000)
		return UNI_CN; /* a bad byte: no letter, number, mark nor space */
	return uni_props_stage2[((size_t)uni_props_stage1[cp >> 8] << 8) | (cp & 0xff)];
}

uint8_t uni_ccc(uint32_t cp)
{
	if (cp >= 0x110000)
		return 0;
	return uni_ccc_stage2[((size_t)uni_ccc_stage1[cp >> 8] << 8) | (cp & 0xff)];
}

static bool wanted(uint8_t p, uint32_t gc_mask, bool ws)
{
	return (gc_mask >> uni_gc_of(p) & 1) || (ws && (p & UNI_PROP_WS));
}

/* A run being collected: code point cp is wanted or not. */
typedef struct runs {
	uint32_t start;
	bool in;
	int (*fn)(void *ctx, uint32_t lo, uint32_t hi);
	void *ctx;
} runs;

static int step(runs *r, uint32_t cp, bool want)
{
	if (want && !r->in) {
		r->start = cp;
		r->in = true;
	} else if (!want && r->in) {
		r->in = false;
		return r->fn(r->ctx, r->start, cp - 1);
	}
	return 0;
}

int uni_ranges(uint32_t gc_mask, bool ws, int (*fn)(void *ctx, uint32_t lo, uint32_t hi),
	       void *ctx)
{
	/* Each distinct block of the two-stage table is judged once: none of
	 * its code points wanted (0), all (1), or some (2). */
	uint16_t nblocks = 0;
	for (size_t i = 0; i < 0x1100; i++)
		if (uni_props_stage1[i] >= nblocks)
			nblocks = (uint16_t)(uni_props_stage1[i] + 1);
	uint8_t *judged = calloc(nblocks, 1); /* 0 not yet, else 1 + verdict */
	if (!judged)
		return -1;
	runs r = {.fn = fn, .ctx = ctx};
	int rc = 0;
	for (uint32_t b = 0; b < 0x1100 && !rc; b++) {
		uint16_t blk = uni_props_stage1[b];
		const uint8_t *p = uni_props_stage2 + ((size_t)blk << 8);
		if (!judged[blk]) {
			int n = 0;
			for (int k = 0; k < 256; k++)
				n += wanted(p[k], gc_mask, ws);
			judged[blk] = (uint8_t)(1 + (n == 0 ? 0 : n == 256 ? 1 : 2));
		}
		if (judged[blk] != 3) { /* the whole block alike */
			rc = step(&r, b << 8, judged[blk] == 2);
			continue;
		}
		for (uint32_t k = 0; k < 256 && !rc; k++)
			rc = step(&r, b << 8 | k, wanted(p[k], gc_mask, ws));
	}
	if (!rc && r.in)
		rc = fn(ctx, r.start, 0x10FFFF);
	free(judged);
	return rc;
}

size_t uni_fold_new_pairs(const uint32_t (**pairs)[2])
{
	*pairs = uni_fold_new;
	return uni_n_fold_new;
}

size_t uni_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp)
{
	uint8_t b = s[0];
	if (b < 0x80) {
		*cp = b;
		return 1;
	}
	size_t len;
	uint32_t c, min;
	if (b >= 0xc2 && b <= 0xdf) {
		len = 2, c = b & 0x1f, min = 0x80;
	} else if (b >= 0xe0 && b <= 0xef) {
		len = 3, c = b & 0x0f, min = 0x800;
	} else if (b >= 0xf0 && b <= 0xf4) {
		len = 4, c = b & 0x07, min = 0x10000;
	} else {
		*cp = UNI_BAD_BYTE(b);
		return 1;
	}
	if (n < len)
		goto bad;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			goto bad;
		c = (c << 6) | (s[i] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c < 0xe000))
		goto bad;
	*cp = c;
	return len;
bad:
	*cp = UNI_BAD_BYTE(b);
	return 1;
}

size_t uni_utf8_encode(uint32_t cp, uint8_t *o)
{
	if (cp < 0x80) {
		o[0] = (uint8_t)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (uint8_t)(0xc0 | (cp >> 6));
		o[1] = (uint8_t)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (uint8_t)(0xe0 | (cp >> 12));
		o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (uint8_t)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (uint8_t)(0xf0 | (cp >> 18));
	o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
	o[3] = (uint8_t)(0x80 | (cp & 0x3f));
	return 4;
}

bool uni_is_nfc_quick(const uint8_t *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		/* Below U+0300 nothing combines or decomposes under NFC. */
		if (s[i] < 0xcc) {
			i += 1 + (s[i] >= 0xc0);
			continue;
		}
		uint32_t cp;
		i += uni_utf8_decode(s + i, n - i, &cp);
		if (uni_props(cp) & UNI_PROP_NFC)
			return false;
	}
	return true;
}

/* Hangul syllables compose and decompose by arithmetic (Unicode ch. 3.12). */
enum { SBASE = 0xAC00, LBASE = 0x1100, VBASE = 0x1161, TBASE = 0x11A7,
       LCOUNT = 19, VCOUNT = 21, TCOUNT = 28, NCOUNT = VCOUNT * TCOUNT,
       SCOUNT = LCOUNT * NCOUNT };

typedef struct cpvec {
	uint32_t *v;
	size_t n, cap;
} cpvec;

static int cpvec_push(cpvec *a, uint32_t c)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 256;
		uint32_t *v = realloc(a->v, cap * sizeof *v);
		if (!v)
			return -1;
		a->v = v, a->cap = cap;
	}
	a->v[a->n++] = c;
	return 0;
}

static const uni_decomp_entry *find_decomp(uint32_t cp)
{
	size_t lo = 0, hi = uni_n_decomp;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (uni_decomp[mid].cp < cp)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < uni_n_decomp && uni_decomp[lo].cp == cp ? &uni_decomp[lo] : NULL;
}

static int decompose(uint32_t cp, cpvec *out)
{
	if (cp >= SBASE && cp < SBASE + SCOUNT) {
		uint32_t s = cp - SBASE;
		if (cpvec_push(out, LBASE + s / NCOUNT) || cpvec_push(out, VBASE + (s % NCOUNT) / TCOUNT))
			return -1;
		return s % TCOUNT ? cpvec_push(out, TBASE + s % TCOUNT) : 0;
	}
	const uni_decomp_entry *d = cp < 0x110000 ? find_decomp(cp) : NULL;
	if (!d)
		return cpvec_push(out, cp);
	for (uint32_t i = 0; i < d->len; i++)
		if (cpvec_push(out, uni_decomp_pool[d->off + i]))
			return -1;
	return 0;
}

static uint8_t ccc_of(uint32_t cp) { return uni_ccc(cp); }

/* Canonical ordering: stable sort of each run of non-starters by ccc.  Short
 * runs by insertion; long (adversarial) runs by a stable counting sort on the
 * 256 classes, so a megabyte of combining marks stays linear. */
static int sort_run_counting(uint32_t *v, size_t len)
{
	size_t count[257] = {0};
	uint32_t *tmp = malloc(len * sizeof *tmp);
	if (!tmp)
		return -1;
	for (size_t a = 0; a < len; a++)
		count[ccc_of(v[a]) + 1]++;
	for (int k = 1; k <= 256; k++)
		count[k] += count[k - 1];
	for (size_t a = 0; a < len; a++)
		tmp[count[ccc_of(v[a])]++] = v[a];
	memcpy(v, tmp, len * sizeof *tmp);
	free(tmp);
	return 0;
}

static int reorder(uint32_t *v, size_t n)
{
	size_t i = 0;
	while (i < n) {
		if (!ccc_of(v[i])) {
			i++;
			continue;
		}
		size_t j = i;
		while (j < n && ccc_of(v[j]))
			j++;
		if (j - i > 32) {
			if (sort_run_counting(v + i, j - i))
				return -1;
		} else {
			for (size_t a = i + 1; a < j; a++) {
				uint32_t c = v[a];
				uint8_t k = ccc_of(c);
				size_t b = a;
				while (b > i && ccc_of(v[b - 1]) > k) {
					v[b] = v[b - 1];
					b--;
				}
				v[b] = c;
			}
		}
		i = j;
	}
	return 0;
}

static uint32_t compose_pair(uint32_t a, uint32_t b)
{
	if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
		return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
	if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE &&
	    b < TBASE + TCOUNT)
		return a + (b - TBASE);
	size_t lo = 0, hi = uni_n_comp;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		const uni_comp_entry *e = &uni_comp[mid];
		if (e->first < a || (e->first == a && e->second < b))
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < uni_n_comp && uni_comp[lo].first == a && uni_comp[lo].second == b)
		return uni_comp[lo].composite;
	return 0;
}

/* Canonical composition in place; returns the new length. */
static size_t compose(uint32_t *v, size_t n)
{
	size_t o = 0, starter = SIZE_MAX;
	int last = -1; /* ccc of the last character kept after the starter; -1: none */
	for (size_t i = 0; i < n; i++) {
		uint32_t c = v[i];
		int k = ccc_of(c);
		bool reachable = last == -1 || (last != 0 && last < k);
		if (starter != SIZE_MAX && reachable && !(c & UNI_BAD)) {
			uint32_t comp = compose_pair(v[starter], c);
			if (comp) {
				v[starter] = comp;
				continue;
			}
		}
		if (k == 0) {
			starter = o;
			last = -1;
		} else {
			last = k;
		}
		v[o++] = c;
	}
	return o;
}

int uni_nfc(const uint8_t *s, size_t n, uint8_t **out, size_t *out_n, titan_err *err)
{
	cpvec cps = {0};
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		i += uni_utf8_decode(s + i, n - i, &cp);
		if (decompose(cp, &cps))
			goto oom;
	}
	if (reorder(cps.v, cps.n))
		goto oom;
	cps.n = compose(cps.v, cps.n);
	uint8_t *o = malloc(cps.n * 4 + 1);
	if (!o)
		goto oom;
	size_t m = 0;
	for (size_t i = 0; i < cps.n; i++) {
		if (cps.v[i] & UNI_BAD)
			o[m++] = (uint8_t)cps.v[i];
		else
			m += uni_utf8_encode(cps.v[i], o + m);
	}
	free(cps.v);
	*out = o, *out_n = m;
	return 0;
oom:
	free(cps.v);
	return err_set(err, "NFC: out of memory on a %zu-byte text", n);
}
