/* zipcrc.c: the zip CRC-32 (IEEE 802.3, reflected 0xEDB88320), slicing by 8,
 * with big buffers split across threads and the parts combined (the GF(2)
 * matrix method), so a multi-GB tensor is not limited by one core.  On x86-64
 * with PCLMULQDQ (and core/cpu_isa at v2 or above, so that TITAN_CPU_ISA=
 * baseline forces the table), carry-less multiplication folds 64 bytes at a
 * time (Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ
 * Instruction"): several times the table's speed, which a checkpoint load
 * that checks every byte needs to keep up with the disk. */
#include "ptzip/zipcrc.h"

#include <pthread.h>

#include "core/cpu_isa.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

static uint32_t tab[8][256];
static int have_clmul; /* the processor has PCLMULQDQ; set once by init */
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
#if defined(__x86_64__)
	have_clmul = __builtin_cpu_supports("pclmul");
#endif
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

#if defined(__x86_64__)
/* Fold constants for the reflected polynomial, x^k mod P(x) bit-reflected
 * and shifted by one, as the paper defines them: k1 = x^(4*128+32),
 * k2 = x^(4*128-32) fold 512 bits at a time, k3 = x^(128+32) and
 * k4 = x^(128-32) fold 128 bits. */
#define K1 0x154442bd4ull
#define K2 0x1c6e41596ull
#define K3 0x1751997d0ull
#define K4 0x0ccaa009eull

__attribute__((target("pclmul,sse4.1"))) static __m128i fold(__m128i x, __m128i k, __m128i data)
{
	__m128i lo = _mm_clmulepi64_si128(x, k, 0x00), hi = _mm_clmulepi64_si128(x, k, 0x11);
	return _mm_xor_si128(_mm_xor_si128(lo, hi), data);
}

/* n >= 64.  The 128-bit remainder left after folding is, followed by the
 * rest of the data, congruent to the whole message: the table finishes with
 * it (as a 16-byte message from state 0) and the tail, so no Barrett
 * reduction is needed. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc_clmul(uint32_t crc, const uint8_t *p,
								   size_t n)
{
	const __m128i k12 = _mm_set_epi64x((long long)K2, (long long)K1);
	const __m128i k34 = _mm_set_epi64x((long long)K4, (long long)K3);
	__m128i x0 = _mm_loadu_si128((const __m128i *)p), x1 = _mm_loadu_si128((const __m128i *)p + 1);
	__m128i x2 = _mm_loadu_si128((const __m128i *)p + 2), x3 = _mm_loadu_si128((const __m128i *)p + 3);
	x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)~crc));
	p += 64;
	n -= 64;
	for (; n >= 64; p += 64, n -= 64) {
		x0 = fold(x0, k12, _mm_loadu_si128((const __m128i *)p));
		x1 = fold(x1, k12, _mm_loadu_si128((const __m128i *)p + 1));
		x2 = fold(x2, k12, _mm_loadu_si128((const __m128i *)p + 2));
		x3 = fold(x3, k12, _mm_loadu_si128((const __m128i *)p + 3));
	}
	__m128i x = fold(fold(fold(x0, k34, x1), k34, x2), k34, x3);
	for (; n >= 16; p += 16, n -= 16)
		x = fold(x, k34, _mm_loadu_si128((const __m128i *)p));
	uint8_t rem[16];
	_mm_storeu_si128((__m128i *)rem, x);
	/* crc_serial(c, ...) is ~raw(~c, ...): state 0 is c = ~0 */
	uint32_t c = crc_serial(~0u, rem, 16);
	return crc_serial(c, p, n);
}

#endif

/* The CRC of one thread's part: the folding version where it can run. */
static uint32_t crc_part(uint32_t crc, const uint8_t *p, size_t n)
{
#if defined(__x86_64__)
	if (n >= 64 && have_clmul && cpu_isa_level() >= CPU_V2)
		return crc_clmul(crc, p, n);
#endif
	return crc_serial(crc, p, n);
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
