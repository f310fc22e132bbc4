/* torch_rng.h: torch's CPU generator (at::CPUGeneratorImpl) and the draws
 * torchtitan's Flux pipeline makes from it, bit for bit: the DataLoader's
 * base seed, randint for the crop, rand for prompt dropout and timesteps,
 * randn for noise and the autoencoder's posterior.
 *
 * The engine is core/mt19937 seeded as torch's mt19937(seed) is: init_genrand
 * over the seed's low 32 bits only, so torch.manual_seed(2**32 + 7) draws what
 * manual_seed(7) draws (initial_seed() still reports the 64 bits).
 * random() is one 32-bit output, random64() two (the first the high word).
 *
 * Each draw below is what torch 2.x does for a contiguous tensor of n
 * elements on the CPU, element 0 first:
 *   rand float32/bfloat16   per element random() & (2^24 - 1), times 2^-24,
 *                           as a float; bfloat16 rounds that to nearest even
 *                           and turns a 1.0 (from 1 - 2^-10 up) into 0.
 *   rand float64            random64() & (2^53 - 1), times 2^-53.
 *   randint(low, high)      (random() % range) + low for range = high - low
 *                           under 2^28, (random64() % range) + low from 2^28
 *                           on (torch's threshold, not 2^32).
 *   int64 random_()         random64() % 2^63 (the DataLoader's base seed).
 *   randn, n >= 16          normal_fill: float32 and float64 draw n uniforms
 *                           in place, Box-Muller each block of 16 (the first 8
 *                           as u1, the next 8 as u2), and when 16 does not
 *                           divide n draw 16 more uniforms for the last 16
 *                           elements (n + 16 draws, the last n % 16 of the
 *                           first n thrown away).  bfloat16 draws 16 per block
 *                           and 16 for the tail (16 * ceil(n / 16) draws):
 *                           randn_like of a bf16 tensor is another sequence.
 *   randn, n < 16           normal_distribution<double> per element: u1, u2
 *                           as rand float64, r = sqrt(-2 log1p(-u2)), returns
 *                           r cos(2 pi u1) and caches r sin(2 pi u1) in the
 *                           generator for the next such draw; manual_seed
 *                           clears the cache, the state bytes carry it.
 *
 * normal_fill's float Box-Muller is not the same on every machine: torch on
 * x86-64 with AVX2 or AVX-512 runs avx_mathfun's Cephes log and sincos (its
 * normal kernel is never dispatched at AVX-512) with the FMAs GCC contracted
 * into them, torch's DEFAULT capability
 * (aarch64, or ATEN_CPU_CAPABILITY=default) runs libm's logf/cosf/sinf.  The
 * generator says which to follow; TORCH_NORMAL_AVX2 is plain float C here and
 * gives its bits on any host, TORCH_NORMAL_DEFAULT calls this host's libm.
 * float64 and n < 16 use libm's double functions either way. */
#ifndef TITAN_TORCH_RNG_H
#define TITAN_TORCH_RNG_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/mt19937.h"

typedef enum torch_normal_kernel {
	TORCH_NORMAL_AVX2 = 0, /* torch on x86-64 with AVX2 (and AVX-512) */
	TORCH_NORMAL_DEFAULT,  /* torch's DEFAULT capability: aarch64, older x86 */
} torch_normal_kernel;

typedef struct torch_rng {
	mt19937 mt;
	uint64_t seed;      /* initial_seed() */
	int has_normal;     /* next_double_normal_sample_ is set */
	double normal;      /* its value */
	int has_float_normal; /* next_float_normal_sample_: no CPU kernel sets */
	float float_normal;   /* it, but the state bytes carry it */
	torch_normal_kernel kernel;
} torch_rng;

/* torch.manual_seed(seed); kernel chooses normal_fill's float Box-Muller. */
void torch_rng_seed(torch_rng *g, uint64_t seed, torch_normal_kernel kernel);

uint32_t torch_rng_random(torch_rng *g);
uint64_t torch_rng_random64(torch_rng *g);
/* torch.empty((), dtype=torch.int64).random_(): in [0, 2^63). */
int64_t torch_rng_int64(torch_rng *g);
/* torch.randint(low, high, (n,)) as int64; low < high, else -1 and nothing
 * drawn. */
int torch_rng_randint(torch_rng *g, int64_t low, int64_t high, int64_t *out, size_t n,
		      titan_err *err);
/* torch.rand((n,), dtype=...): bfloat16 as its 16 bits. */
void torch_rng_rand_f32(torch_rng *g, float *out, size_t n);
void torch_rng_rand_f64(torch_rng *g, double *out, size_t n);
void torch_rng_rand_bf16(torch_rng *g, uint16_t *out, size_t n);
/* torch.randn((n,), dtype=...) and randn_like of a contiguous tensor of n
 * elements. */
void torch_rng_randn_f32(torch_rng *g, float *out, size_t n);
void torch_rng_randn_f64(torch_rng *g, double *out, size_t n);
void torch_rng_randn_bf16(torch_rng *g, uint16_t *out, size_t n);

/* torch.get_rng_state()'s bytes (CPUGeneratorImplState, little-endian
 * x86-64/aarch64 layout), and set_rng_state.  A state's words and position
 * survive the round trip both ways; a state set from bytes keeps g's kernel.
 * set refuses a size other than TORCH_RNG_STATE_BYTES, an engine torch would
 * call invalid, and a position torch never reaches (left + next != 625 with
 * left > 1). */
#define TORCH_RNG_STATE_BYTES 5056
void torch_rng_get_state(const torch_rng *g, uint8_t out[TORCH_RNG_STATE_BYTES]);
int torch_rng_set_state(torch_rng *g, const uint8_t *in, size_t n, titan_err *err);

#endif
