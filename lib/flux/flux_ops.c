/* flux_ops.c: flux_ops.h's host-side pieces of a step: small tables of the
 * batch's times and positions, and the noisy input. */
#include <math.h>
#include <stddef.h>

#include "core/bf16.h"
#include "flux/flux_ops.h"

void fx_timestep_embedding(float *out, const float *t, int64_t b, int64_t dim)
{
	int64_t half = dim / 2;
	/* torch: -math.log(max_period) * arange(half) / half in float32 (the
	 * Python scalar rounded to float32 by the multiply) */
	float neg_log = (float)-log(10000.0);
	for (int64_t i = 0; i < b; i++) {
		float tt = 1000.0f * t[i];
		for (int64_t j = 0; j < half; j++) {
			float f = expf((float)j * neg_log / (float)half);
			float a = tt * f;
			out[i * dim + j] = cosf(a);
			out[i * dim + half + j] = sinf(a);
		}
	}
}

void fx_rope_table(float *cs, const float *ids, int64_t n, const int64_t axes_dim[3],
		   double theta)
{
	int64_t pairs = (axes_dim[0] + axes_dim[1] + axes_dim[2]) / 2;
	for (int64_t r = 0; r < n; r++) {
		float *row = cs + r * pairs * 2;
		for (int a = 0, p0 = 0; a < 3; p0 += (int)(axes_dim[a] / 2), a++)
			for (int64_t p = 0; p < axes_dim[a] / 2; p++) {
				/* rope(): omega = 1 / theta ** (arange(0, dim, 2) / dim), float32 */
				float sc = (float)(2 * p) / (float)axes_dim[a];
				float om = 1.0f / powf((float)theta, sc);
				float ang = ids[r * 3 + a] * om;
				row[2 * (p0 + p)] = cosf(ang);
				row[2 * (p0 + p) + 1] = sinf(ang);
			}
	}
}

void fx_timestep_embedding_bf16(float *out, const float *t, int64_t b, int64_t dim)
{
	for (int64_t i = 0; i < b; i++) {
		float tt = bf16_round(1000.0f * bf16_round(t[i]));
		int64_t half = dim / 2;
		float neg_log = (float)-log(10000.0);
		for (int64_t j = 0; j < half; j++) {
			float a = tt * expf((float)j * neg_log / (float)half);
			out[i * dim + j] = bf16_round(cosf(a));
			out[i * dim + half + j] = bf16_round(sinf(a));
		}
	}
}

void fx_rope_table_bf16(float *cs, const float *ids, int64_t n, const int64_t axes_dim[3],
			double theta)
{
	int64_t pairs = (axes_dim[0] + axes_dim[1] + axes_dim[2]) / 2;
	float base = bf16_round((float)theta);
	for (int64_t r = 0; r < n; r++) {
		float *row = cs + r * pairs * 2;
		for (int a = 0, p0 = 0; a < 3; p0 += (int)(axes_dim[a] / 2), a++)
			for (int64_t p = 0; p < axes_dim[a] / 2; p++) {
				float sc = bf16_round((float)(2 * p) / (float)axes_dim[a]);
				float om = bf16_round(1.0f / bf16_round(powf(base, sc)));
				float ang = bf16_round(bf16_round(ids[r * 3 + a]) * om);
				row[2 * (p0 + p)] = bf16_round(cosf(ang));
				row[2 * (p0 + p) + 1] = bf16_round(sinf(ang));
			}
	}
}

void fx_noisy(float *img, const float *x, const float *noise, const float *t, int64_t b,
	      int64_t n, int64_t d)
{
	for (int64_t i = 0; i < b; i++) {
		float s = t[i], one_minus = 1.0f - s;
		for (int64_t j = i * n * d; j < (i + 1) * n * d; j++)
			img[j] = one_minus * x[j] + s * noise[j];
	}
}
