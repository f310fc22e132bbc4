/* snappy.c: Snappy's block format (google/snappy's format_description.txt):
 * the uncompressed length as a varint, then literals and back-references.
 * Written from the format's description; every length and offset checked. */
#include "parquet/parquet_impl.h"

#include <string.h>

int pq_snappy_decompress(const uint8_t *in, size_t in_n, uint8_t *out, size_t n)
{
	const uint8_t *p = in, *end = in + in_n;
	uint64_t len = 0;
	for (int s = 0;; s += 7) {
		if (p == end || s > 28)
			return -1;
		len |= (uint64_t)(*p & 0x7f) << s;
		if (!(*p++ & 0x80))
			break;
	}
	if (len != n)
		return -1;
	size_t o = 0;
	while (p < end) {
		uint8_t tag = *p++;
		size_t l, off = 0;
		if ((tag & 3) == 0) { /* literal: length - 1 in the tag, or in 1-4 bytes after */
			l = tag >> 2;
			if (l >= 60) {
				size_t k = l - 59;
				if ((size_t)(end - p) < k)
					return -1;
				l = 0;
				for (size_t b = 0; b < k; b++)
					l |= (size_t)p[b] << (8 * b);
				p += k;
			}
			l += 1;
			if ((size_t)(end - p) < l || n - o < l)
				return -1;
			memcpy(out + o, p, l);
			p += l;
			o += l;
			continue;
		}
		size_t k = (tag & 3) == 1 ? 1 : (tag & 3) == 2 ? 2 : 4;
		if ((size_t)(end - p) < k)
			return -1;
		if ((tag & 3) == 1) {
			l = 4 + ((tag >> 2) & 7);
			off = (size_t)(tag >> 5) << 8 | p[0];
		} else {
			l = (size_t)(tag >> 2) + 1;
			for (size_t b = 0; b < k; b++)
				off |= (size_t)p[b] << (8 * b);
		}
		p += k;
		if (off == 0 || off > o || n - o < l)
			return -1;
		for (size_t i = 0; i < l; i++, o++) /* may overlap itself: byte by byte */
			out[o] = out[o - off];
	}
	return o == n ? 0 : -1;
}
