#include "core/crc32c.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>
#endif

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void build_table(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
		table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

uint32_t crc32c_sw(uint32_t crc, const void *buf, size_t n)
{
	pthread_once(&table_once, build_table);
	const unsigned char *p = buf;
	crc = ~crc;
	while (n >= 8) {
		uint32_t lo, hi;
		memcpy(&lo, p, 4);
		memcpy(&hi, p + 4, 4);
		lo ^= crc; /* little-endian hosts only, as everywhere in titan */
		crc = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^
		      table[5][(lo >> 16) & 0xff] ^ table[4][lo >> 24] ^
		      table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
		      table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
		p += 8;
		n -= 8;
	}
	while (n--)
		crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
	return ~crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const void *buf,
							      size_t n)
{
	const unsigned char *p = buf;
	uint64_t c = ~crc;
	while (n >= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		c = _mm_crc32_u64(c, v);
		p += 8;
		n -= 8;
	}
	uint32_t c32 = (uint32_t)c;
	while (n--)
		c32 = _mm_crc32_u8(c32, *p++);
	return ~c32;
}

int crc32c_hw_available(void)
{
	unsigned a, b, c, d;
	if (!__get_cpuid(1, &a, &b, &c, &d))
		return 0;
	return (c & bit_SSE4_2) != 0;
}

uint32_t crc32c(uint32_t crc, const void *buf, size_t n)
{
	/* Atomic: threads may race to the first call (they store the same value). */
	static _Atomic int hw = -1;
	int h = atomic_load_explicit(&hw, memory_order_relaxed);
	if (h < 0) {
		h = crc32c_hw_available();
		atomic_store_explicit(&hw, h, memory_order_relaxed);
	}
	return h ? crc32c_hw(crc, buf, n) : crc32c_sw(crc, buf, n);
}
#else
int crc32c_hw_available(void)
{
	return 0;
}

uint32_t crc32c(uint32_t crc, const void *buf, size_t n)
{
	return crc32c_sw(crc, buf, n);
}
#endif

uint32_t crc32c_mask(uint32_t crc)
{
	return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
