#include "core/strmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static int grow(strmap *m)
{
	size_t cap = m->cap ? 2 * m->cap : 64;
	struct strmap_slot *s = calloc(cap, sizeof *s);
	if (s == NULL)
		return -1;
	for (size_t i = 0; i < m->cap; i++) {
		if (m->slot[i].key == NULL)
			continue;
		size_t j = hash(m->slot[i].key) & (cap - 1);
		while (s[j].key != NULL)
			j = (j + 1) & (cap - 1);
		s[j] = m->slot[i];
	}
	free(m->slot);
	m->slot = s;
	m->cap = cap;
	return 0;
}

int strmap_put(strmap *m, const char *key, size_t val)
{
	if ((m->n + 1) * 2 > m->cap && grow(m) != 0)
		return -1;
	size_t j = hash(key) & (m->cap - 1);
	for (; m->slot[j].key != NULL; j = (j + 1) & (m->cap - 1))
		if (strcmp(m->slot[j].key, key) == 0)
			return 1;
	const char *k = m->owns ? strdup(key) : key;
	if (k == NULL)
		return -1;
	m->slot[j].key = k;
	m->slot[j].val = val;
	m->n++;
	return 0;
}

int strmap_get(const strmap *m, const char *key, size_t *val)
{
	if (m->cap == 0)
		return 0;
	for (size_t j = hash(key) & (m->cap - 1); m->slot[j].key != NULL; j = (j + 1) & (m->cap - 1))
		if (strcmp(m->slot[j].key, key) == 0) {
			*val = m->slot[j].val;
			return 1;
		}
	return 0;
}

void strmap_free(strmap *m)
{
	for (size_t i = 0; m->owns && i < m->cap; i++)
		free((char *)m->slot[i].key);
	free(m->slot);
	int owns = m->owns;
	memset(m, 0, sizeof *m);
	m->owns = owns;
}
