/* RoPE's (cos, sin) table for every family's frequency scaling: Llama 3.1's
 * wavelength bands (Llama 3, Llama 4), YaRN's blend (DeepSeek V3, GPT-OSS). */
#include <math.h>

#include "model/flavor.h"

rope_scaling flavor_rope_scaling(const llama_args *a)
{
	rope_scaling s = a->rope;
	if (s.kind == ROPE_SCALE_NONE && a->rope_scale_factor > 0)
		s = (rope_scaling){.kind = ROPE_SCALE_LLAMA3, .factor = a->rope_scale_factor,
				   .low = 1, .high = 4, .orig = 8192};
	if (s.kind == ROPE_SCALE_YARN && s.beyond_orig && a->max_seq_len <= s.orig)
		s = (rope_scaling){.kind = ROPE_SCALE_NONE};
	return s;
}

/* torchtitan's llama3 apply_scaling: wavelengths above orig/low divided by the
 * factor, below orig/high kept, in between f' = (1 - s) f / factor + s f with
 * s = (orig / wavelen - low) / (high - low). */
static double llama3_freq(double f, const rope_scaling *s)
{
	double wavelen = 2 * M_PI / f;
	if (wavelen < s->orig / s->high)
		return f;
	if (wavelen > s->orig / s->low || s->high == s->low)
		return f / s->factor;
	double smooth = (s->orig / wavelen - s->low) / (s->high - s->low);
	return (1 - smooth) * f / s->factor + smooth * f;
}

/* The dim (of hd) whose frequency turns `rotations` times in orig positions. */
static double yarn_dim(double rotations, int64_t hd, double theta, double orig)
{
	return (double)hd * log(orig / (rotations * 2 * M_PI)) / (2 * log(theta));
}

/* YaRN (torchtitan's DeepSeek V3 and GPT-OSS precompute, HF's
 * _compute_yarn_parameters): pair p keeps f (extrapolation) below the dim of
 * beta_fast rotations, takes f / factor (interpolation) above the dim of
 * beta_slow, and a linear ramp between. */
static double yarn_freq(double f, int64_t p, int64_t hd, double theta, const rope_scaling *s)
{
	double lo = yarn_dim(s->high, hd, theta, s->orig), hi = yarn_dim(s->low, hd, theta, s->orig);
	if (s->truncate) {
		lo = floor(lo);
		hi = ceil(hi);
	}
	lo = fmax(lo, 0);
	hi = fmin(hi, (double)(hd - 1));
	if (lo == hi)
		hi += 0.001;
	double ramp = fmin(fmax(((double)p - lo) / (hi - lo), 0), 1);
	double extrapolate = 1 - ramp;
	return f / s->factor * (1 - extrapolate) + f * extrapolate;
}

void flavor_rope_table(const llama_args *a, double *cs, int64_t t, int64_t hd, int64_t pos0,
		       const int64_t *pos)
{
	rope_scaling s = flavor_rope_scaling(a);
	double mag = s.cs_scale > 0 ? s.cs_scale : 1;
	for (int64_t p = 0; p < hd / 2; p++) {
		double f = 1.0 / pow(a->rope_theta, (double)(2 * p) / (double)hd);
		if (s.kind == ROPE_SCALE_LLAMA3)
			f = llama3_freq(f, &s);
		else if (s.kind == ROPE_SCALE_YARN)
			f = yarn_freq(f, p, hd, a->rope_theta, &s);
		for (int64_t i = 0; i < t; i++) {
			double ang = (double)(pos ? pos[i] : pos0 + i) * f;
			cs[(i * (hd / 2) + p) * 2] = mag * cos(ang);
			cs[(i * (hd / 2) + p) * 2 + 1] = mag * sin(ang);
		}
	}
}
