#include "core/crc32c.h"
#include "core/cpu_isa.h"

#include <pthread.h>
#include <string.h>

/* The hardware CRC32C, where there is one: the SSE4.2 crc32 instruction on
 * x86-64 (level v2), the ARMv8 crc32c instructions on aarch64 (level crc).
 * HW_TARGET compiles a function for it; crc_u64 and crc_u8 extend a register
 * over 8 bytes and over one. */
#if defined(__x86_64__)
#include <nmmintrin.h>
#define CRC_HW 1
#define CRC_HW_LEVEL CPU_V2
#define HW_TARGET __attribute__((target("sse4.2")))
#define crc_u64(c, v) _mm_crc32_u64((c), (v))
#define crc_u8(c, b) _mm_crc32_u8((c), (b))
#elif defined(__aarch64__)
#include <arm_acle.h>
#define CRC_HW 1
#define CRC_HW_LEVEL CPU_CRC
#define HW_TARGET __attribute__((target("+crc")))
#define crc_u64(c, v) __crc32cd((uint32_t)(c), (v))
#define crc_u8(c, b) __crc32cb((c), (b))
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

#if defined(CRC_HW)
/* The crc32 instruction has a latency of 3 cycles and a throughput of 1, so one
 * dependent chain uses a third of it.  Long buffers are cut into three
 * interleaved streams of STREAM bytes, each from register 0, and joined after:
 * a CRC register is linear, so the register after A B C is
 * shift(a, 2 STREAM) ^ shift(b, STREAM) ^ c, where shift(r, n) is r after n zero
 * bytes.  shift by STREAM is itself linear in r: four 256-entry tables. */
#define STREAM 4096
static uint32_t shift_table[4][256];
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

HW_TARGET static uint32_t zeros_hw(uint32_t r, size_t n)
{
	uint64_t c = r;
	for (size_t i = 0; i < n / 8; i++)
		c = crc_u64(c, 0);
	return (uint32_t)c;
}

static void build_shift_table(void)
{
	uint32_t basis[32];
	for (int b = 0; b < 32; b++)
		basis[b] = zeros_hw(1u << b, STREAM);
	for (int k = 0; k < 4; k++)
		for (uint32_t v = 0; v < 256; v++) {
			uint32_t x = 0;
			for (int b = 0; b < 8; b++)
				if (v >> b & 1)
					x ^= basis[8 * k + b];
			shift_table[k][v] = x;
		}
}

static uint32_t shift_stream(uint32_t r)
{
	return shift_table[0][r & 0xff] ^ shift_table[1][(r >> 8) & 0xff] ^
	       shift_table[2][(r >> 16) & 0xff] ^ shift_table[3][r >> 24];
}

HW_TARGET static uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t n)
{
	const unsigned char *p = buf;
	uint64_t c = ~crc;
	if (n >= 3 * STREAM)
		pthread_once(&shift_once, build_shift_table);
	while (n >= 3 * STREAM) {
		uint64_t c1 = 0, c2 = 0;
		for (size_t i = 0; i < STREAM; i += 8) {
			uint64_t a, b, d;
			memcpy(&a, p + i, 8);
			memcpy(&b, p + STREAM + i, 8);
			memcpy(&d, p + 2 * STREAM + i, 8);
			c = crc_u64(c, a);
			c1 = crc_u64(c1, b);
			c2 = crc_u64(c2, d);
		}
		c = shift_stream(shift_stream((uint32_t)c) ^ (uint32_t)c1) ^ (uint32_t)c2;
		p += 3 * STREAM;
		n -= 3 * STREAM;
	}
	while (n >= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		c = crc_u64(c, v);
		p += 8;
		n -= 8;
	}
	uint32_t c32 = (uint32_t)c;
	while (n--)
		c32 = crc_u8(c32, *p++);
	return ~c32;
}

/* core/cpu_isa's levels include the instruction (x86-64-v2 has SSE4.2; crc
 * is HWCAP_CRC32), so its detection is the one to ask. */
int crc32c_hw_available(void)
{
	return cpu_isa_native() >= CRC_HW_LEVEL;
}

uint32_t crc32c(uint32_t crc, const void *buf, size_t n)
{
	/* the level in force (TITAN_CPU_ISA=baseline runs the table) */
	return cpu_isa_level() >= CRC_HW_LEVEL ? crc32c_hw(crc, buf, n) : crc32c_sw(crc, buf, n);
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
