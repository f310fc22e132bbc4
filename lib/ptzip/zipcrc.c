/* zipcrc.c: the zip CRC-32 (IEEE 802.3, reflected 0xEDB88320), slicing by 8,
 * with big buffers split across threads and the parts combined (the GF(2)
 * matrix method), so a multi-GB tensor is not limited by one core. */
#include "ptzip/zipcrc.h"

#include <pthread.h>

static uint32_t tab[8][256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
		tab[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			tab[t][i] = tab[0][tab[t - 1][i] & 0xff] ^ (tab[t - 1][i] >> 8);
}

static uint32_t crc_serial(uint32_t crc, const uint8_t *p, size_t n)
{
	crc = ~crc;
	while (n && ((uintptr_t)p & 7)) {
		crc = tab[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
		n--;
	}
	while (n >= 8) {
		uint32_t a = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
				    (uint32_t)p[3] << 24);
		crc = tab[7][a & 0xff] ^ tab[6][(a >> 8) & 0xff] ^ tab[5][(a >> 16) & 0xff] ^
		      tab[4][a >> 24] ^ tab[3][p[4]] ^ tab[2][p[5]] ^ tab[1][p[6]] ^ tab[0][p[7]];
		p += 8;
		n -= 8;
	}
	while (n--)
		crc = tab[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec)
{
	uint32_t sum = 0;
	while (vec) {
		if (vec & 1)
			sum ^= *mat;
		vec >>= 1;
		mat++;
	}
	return sum;
}

static void gf2_square(uint32_t *sq, const uint32_t *mat)
{
	for (int n = 0; n < 32; n++)
		sq[n] = gf2_times(mat, mat[n]);
}

/* crc of A||B from crc(A), crc(B) and len(B). */
uint32_t zipcrc_combine(uint32_t crc1, uint32_t crc2, uint64_t len2)
{
	if (len2 == 0)
		return crc1;
	uint32_t even[32], odd[32];
	odd[0] = 0xEDB88320u;
	uint32_t row = 1;
	for (int n = 1; n < 32; n++) {
		odd[n] = row;
		row <<= 1;
	}
	gf2_square(even, odd);
	gf2_square(odd, even);
	do {
		gf2_square(even, odd);
		if (len2 & 1)
			crc1 = gf2_times(even, crc1);
		len2 >>= 1;
		if (!len2)
			break;
		gf2_square(odd, even);
		if (len2 & 1)
			crc1 = gf2_times(odd, crc1);
		len2 >>= 1;
	} while (len2);
	return crc1 ^ crc2;
}

uint32_t zipcrc(uint32_t crc, const void *buf, size_t n)
{
	pthread_once(&once, init);
	const uint8_t *p = buf;
	const size_t part = (size_t)8 << 20;
	if (n < 4 * part)
		return crc_serial(crc, p, n);
	size_t nparts = (n + part - 1) / part;
	uint32_t parts[4096];
	size_t done = 0;
	while (done < nparts) {
		size_t batch = nparts - done < 4096 ? nparts - done : 4096;
		#pragma omp parallel for schedule(static)
		for (size_t i = 0; i < batch; i++) {
			size_t off = (done + i) * part;
			size_t len = n - off < part ? n - off : part;
			parts[i] = crc_serial(0, p + off, len);
		}
		for (size_t i = 0; i < batch; i++) {
			size_t off = (done + i) * part;
			size_t len = n - off < part ? n - off : part;
			crc = zipcrc_combine(crc, parts[i], len);
		}
		done += batch;
	}
	return crc;
}
