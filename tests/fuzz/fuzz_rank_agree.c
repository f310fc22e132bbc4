/* fuzz_rank_agree: the message titan-train's ranks print when their configs
 * differ (config_agreement_diff), on what another rank could send.
 *
 * The first byte chooses the input's shape:
 *   even: two arbitrary texts (the rest cut in two at a point the next bytes
 *         choose), as a rank of another build or a corrupted exchange sends;
 *   odd:  two key/value tables, the second the first with some values
 *         changed, keys dropped or renamed (the bytes say which), written as
 *         config_agreement_text writes them.
 * Properties: never a crash; the message is one line of printable ASCII,
 * fits the buffer and stays under MSG_BOUND bytes whatever the input; the
 * texts are reported the same exactly when they are line for line (an
 * oracle independent of the parser: equal once one final newline is
 * dropped); a message that names one key names a key whose values differ,
 * one that names two names two different keys. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

/* The key and two values are cut at 120 and 160 bytes: the rest is words. */
#define MSG_BOUND 700
#define PREFIX "config differs across ranks: "

enum { MAX_KEYS = 16, MAX_VAL = 300 };

typedef struct table {
	char key[MAX_KEYS][24];
	char val[MAX_KEYS][MAX_VAL + 1];
	int present[MAX_KEYS];
	int n;
} table;

/* Bytes as a little reader that yields zeros once it runs out. */
typedef struct reader {
	const uint8_t *p;
	size_t n;
} reader;

static unsigned byte(reader *r)
{
	if (r->n == 0)
		return 0;
	r->n--;
	return *r->p++;
}

static void check_line(const char *msg, size_t cap)
{
	size_t len = strnlen(msg, cap);
	if (len >= cap || len >= MSG_BOUND)
		abort();
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)msg[i] < 0x20 || (unsigned char)msg[i] >= 0x7f)
			abort();
}

/* The text less one final newline. */
static size_t stripped(const char *s, size_t n)
{
	return n > 0 && s[n - 1] == '\n' ? n - 1 : n;
}

static void raw_pair(reader *r)
{
	size_t cut = byte(r);
	cut = cut << 8 | byte(r);
	int ra = (int)byte(r), rb = (int)byte(r) + 256;
	size_t cap = 1 + byte(r) * 8;
	const char *a = (const char *)r->p;
	if (cut > r->n)
		cut = r->n;
	const char *b = a + cut;
	size_t na = cut, nb = r->n - cut;
	char *msg = malloc(cap);
	if (msg == NULL)
		return;
	memset(msg, 'x', cap);
	int d = config_agreement_diff(a, na, ra, b, nb, rb, msg, cap);
	check_line(msg, cap);
	size_t sa = stripped(a, na), sb = stripped(b, nb);
	int same = sa == sb && memcmp(a, b, sa) == 0;
	/* "" has no line, "\n" one empty line: the one pair the oracle calls
	 * the same and the texts are not. */
	int empty_vs_newline = sa == 0 && sb == 0 && na != nb;
	if (d != 0 && d != 1)
		abort();
	if (d == 0 && !same)
		abort();
	if (d == 1 && same && !empty_vs_newline)
		abort();
	if (d == 1 && cap > sizeof PREFIX && strncmp(msg, PREFIX, sizeof PREFIX - 1) != 0)
		abort();
	free(msg);
}

static char *serialize(const table *t, size_t *n)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (f == NULL)
		return NULL;
	for (int i = 0; i < t->n; i++)
		if (t->present[i])
			fprintf(f, "%s = %s\n", t->key[i], t->val[i]);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	*n = len;
	return buf;
}

static int find(const table *t, const char *key, size_t len)
{
	for (int i = 0; i < t->n; i++)
		if (t->present[i] && strlen(t->key[i]) == len && memcmp(t->key[i], key, len) == 0)
			return i;
	return -1;
}

static void table_pair(reader *r)
{
	static table a, b;
	memset(&a, 0, sizeof a);
	a.n = 1 + (int)(byte(r) % MAX_KEYS);
	for (int i = 0; i < a.n; i++) {
		snprintf(a.key[i], sizeof a.key[i], "section.key_%d", i);
		size_t len = byte(r) % 40;
		if (byte(r) == 0xff)
			len = MAX_VAL; /* now and then one past the message's cut */
		for (size_t j = 0; j < len; j++) {
			unsigned c = byte(r);
			a.val[i][j] = c == '\n' || c == 0 ? '?' : (char)c;
		}
		a.val[i][len] = '\0';
		a.present[i] = 1;
	}
	b = a;
	for (int m = (int)(byte(r) % 4); m > 0; m--) {
		int i = (int)(byte(r) % (unsigned)a.n);
		switch (byte(r) % 3) {
		case 0:
			a.val[i][0] == '\0' ? (void)snprintf(b.val[i], sizeof b.val[i], "1")
					    : (void)(b.val[i][0] ^= (char)(1 + byte(r) % 16));
			if (b.val[i][0] == '\n' || b.val[i][0] == '\0')
				b.val[i][0] = '!';
			break;
		case 1:
			b.present[i] = 0;
			break;
		default:
			snprintf(b.key[i], sizeof b.key[i], "section.other_%d", i);
			break;
		}
	}
	size_t na = 0, nb = 0;
	char *ta = serialize(&a, &na), *tb = serialize(&b, &nb);
	char msg[4096];
	if (ta != NULL && tb != NULL) {
		int d = config_agreement_diff(ta, na, 0, tb, nb, 1, msg, sizeof msg);
		check_line(msg, sizeof msg);
		if (d != (na != nb || memcmp(ta, tb, na) != 0))
			abort();
		const char *k = msg + sizeof PREFIX - 1, *is = strstr(k, " is ");
		const char *has = strstr(msg, " where rank 1 has ");
		if (d == 1 && strncmp(k, "rank 0 has ", 11) == 0 && has != NULL) {
			/* two keys named: they must differ */
			const char *k1 = k + 11, *k2 = has + 18, *end = strstr(k2, " (different");
			if (end == NULL || ((size_t)(has - k1) == (size_t)(end - k2) &&
					    memcmp(k1, k2, (size_t)(has - k1)) == 0))
				abort();
		} else if (d == 1) {
			if (is == NULL)
				abort();
			int ia = find(&a, k, (size_t)(is - k)), ib = find(&b, k, (size_t)(is - k));
			if (ia < 0 && ib < 0)
				abort();
			if (ia >= 0 && ib >= 0 && strcmp(a.val[ia], b.val[ib]) == 0)
				abort();
		}
	}
	free(ta);
	free(tb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	reader r = {data, size};
	if (byte(&r) & 1)
		table_pair(&r);
	else
		raw_pair(&r);
	return 0;
}
