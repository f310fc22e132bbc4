/* zipcrc.c: the zip CRC-32 (IEEE 802.3, reflected 0xEDB88320) through
 * libdeflate, whose kernels fold with carry-less multiplication where the
 * processor has it (PCLMULQDQ, VPCLMULQDQ, ARMv8's PMULL and CRC32) and use
 * tables elsewhere; a checkpoint load checks every byte it reads and must keep
 * up with the disk.  Buffers of many megabytes are split across threads and
 * the parts combined (the GF(2) matrix method). */
#include "ptzip/zipcrc.h"

#include <libdeflate.h>

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

/* libdeflate takes an unsigned int length: larger parts in turn. */
static uint32_t crc_part(uint32_t crc, const uint8_t *p, size_t n)
{
	const size_t most = (size_t)1 << 30;
	for (; n > most; p += most, n -= most)
		crc = libdeflate_crc32(crc, p, most);
	return libdeflate_crc32(crc, p, n);
}

uint32_t zipcrc(uint32_t crc, const void *buf, size_t n)
{
	const uint8_t *p = buf;
	const size_t part = (size_t)8 << 20;
	if (n < 4 * part)
		return crc_part(crc, p, n);
	size_t nparts = (n + part - 1) / part;
	uint32_t parts[4096];
	size_t done = 0;
	while (done < nparts) {
		size_t batch = nparts - done < 4096 ? nparts - done : 4096;
		#pragma omp parallel for schedule(static)
		for (size_t i = 0; i < batch; i++) {
			size_t off = (done + i) * part;
			size_t len = n - off < part ? n - off : part;
			parts[i] = crc_part(0, p + off, len);
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
