/* strmap.h: a map from strings to positions (size_t), for look-ups by name
 * among many (the keys of a large checkpoint, the paths of a Hub listing):
 * open addressing over FNV-1a hashes. */
#ifndef TITAN_STRMAP_H
#define TITAN_STRMAP_H

#include <stddef.h>

typedef struct strmap {
	struct strmap_slot {
		const char *key;
		size_t val;
	} *slot;
	size_t cap, n;
	int owns; /* set before the first put: keys are copied (else borrowed: they
	             must outlive the map) */
} strmap;

/* 0 when key was added, 1 when it was there already (its value kept), -1 out
 * of memory. */
int strmap_put(strmap *m, const char *key, size_t val);
/* 1 with *val set when key is there, else 0. */
int strmap_get(const strmap *m, const char *key, size_t *val);
/* Frees the table (and the keys when the map owns them); the map is empty after. */
void strmap_free(strmap *m);

#endif
