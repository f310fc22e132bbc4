/* Attention by its definition (att_ref.h). */
#include "att_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* torchtitan's mask_mods, position by position: causal (kv <= q), its sliding
 * window (q - kv < w), the fixed block (q // c == kv // c), the document
 * (kv at or after the first position of q's document: with causal, q and kv
 * in one document). */
int att_ref_visible(const be_attn *a, int64_t bi, int64_t i, int64_t j)
{
	int64_t qp = a->q_pos0 + i, kp = a->k_pos0 + j;
	if (a->causal && kp > qp)
		return 0;
	if (a->window > 0 && qp - kp >= a->window)
		return 0;
	if (a->chunk > 0 && qp / a->chunk != kp / a->chunk)
		return 0;
	if (a->doc && kp < a->doc[bi * a->doc_t + qp])
		return 0;
	return 1;
}

static double dotd(const double *x, const double *y, int64_t n)
{
	double s = 0;
	for (int64_t i = 0; i < n; i++)
		s += x[i] * y[i];
	return s;
}

static double scale_of(const be_attn *a)
{
	return a->scale != 0 ? a->scale : 1 / sqrt((double)a->hd);
}

/* Row (bi, hi, i)'s scores s (tk; -inf where masked) and its log-sum-exp over
 * them and the sink (-inf when it has neither). */
static double row_scores(double *s, const double *q, const double *k, const double *sinks,
			 const be_attn *a, int64_t bi, int64_t hi, int64_t i)
{
	int64_t kv = hi / (a->h / a->hkv);
	const double *qi = q + ((bi * a->tq + i) * a->h + hi) * a->hd;
	double mx = sinks ? sinks[hi] : -INFINITY, sum = 0;
	for (int64_t j = 0; j < a->tk; j++) {
		s[j] = -INFINITY;
		if (att_ref_visible(a, bi, i, j))
			s[j] = scale_of(a) * dotd(qi, k + ((bi * a->tk + j) * a->hkv + kv) * a->hd, a->hd);
		mx = fmax(mx, s[j]);
	}
	if (isinf(mx))
		return -INFINITY;
	for (int64_t j = 0; j < a->tk; j++)
		sum += exp(s[j] - mx); /* 0 where masked */
	if (sinks)
		sum += exp(sinks[hi] - mx);
	return mx + log(sum);
}

void att_ref_fwd(double *out, double *lse, const double *q, const double *k, const double *v,
		 const double *sinks, const be_attn *a)
{
	double *s = malloc(sizeof(double) * (size_t)(a->tk + 1));
	if (!s)
		abort();
	int64_t rep = a->h / a->hkv;
	for (int64_t bi = 0; bi < a->b; bi++)
		for (int64_t hi = 0; hi < a->h; hi++)
			for (int64_t i = 0; i < a->tq; i++) {
				double l = row_scores(s, q, k, sinks, a, bi, hi, i);
				double *o = out + ((bi * a->tq + i) * a->h + hi) * a->hdv;
				lse[(bi * a->h + hi) * a->tq + i] = l;
				memset(o, 0, sizeof(double) * (size_t)a->hdv);
				for (int64_t j = 0; j < a->tk && !isinf(l); j++) {
					double p = exp(s[j] - l);
					const double *vj = v + ((bi * a->tk + j) * a->hkv + hi / rep) * a->hdv;
					for (int64_t d = 0; d < a->hdv; d++)
						o[d] += p * vj[d];
				}
			}
	free(s);
}

void att_ref_bwd(double *dq, double *dk, double *dv, double *dsinks, const double *dout,
		 const double *q, const double *k, const double *v, const double *out,
		 const double *sinks, const be_attn *a)
{
	int64_t rep = a->h / a->hkv, hd = a->hd, hdv = a->hdv;
	double sc = scale_of(a);
	double *s = malloc(sizeof(double) * (size_t)(a->tk + 1));  /* (tk) scores, then P */
	double *dp = malloc(sizeof(double) * (size_t)(a->tk + 1)); /* (tk) dout . v_j */
	if (!s || !dp)
		abort();
	memset(dq, 0, sizeof(double) * (size_t)(a->b * a->tq * a->h * hd));
	memset(dk, 0, sizeof(double) * (size_t)(a->b * a->tk * a->hkv * hd));
	memset(dv, 0, sizeof(double) * (size_t)(a->b * a->tk * a->hkv * hdv));
	if (dsinks)
		memset(dsinks, 0, sizeof(double) * (size_t)a->h);
	for (int64_t bi = 0; bi < a->b; bi++)
		for (int64_t hi = 0; hi < a->h; hi++)
			for (int64_t i = 0; i < a->tq; i++) {
				double l = row_scores(s, q, k, sinks, a, bi, hi, i);
				if (isinf(l))
					continue; /* no key, no sink: nothing depends on the row */
				int64_t qo = ((bi * a->tq + i) * a->h + hi) * hd;
				int64_t oo = ((bi * a->tq + i) * a->h + hi) * hdv;
				const double *go = dout + oo;
				double dsum = 0; /* rowsum(P dP) = rowsum(dout * out) */
				for (int64_t j = 0; j < a->tk; j++) {
					int64_t vo = ((bi * a->tk + j) * a->hkv + hi / rep) * hdv;
					s[j] = exp(s[j] - l);
					dp[j] = dotd(go, v + vo, hdv);
					dsum += s[j] * dp[j];
				}
				if (out)
					dsum = dotd(go, out + oo, hdv);
				if (dsinks)
					dsinks[hi] -= exp(sinks[hi] - l) * dsum;
				for (int64_t j = 0; j < a->tk; j++) {
					if (s[j] == 0)
						continue;
					int64_t ko = ((bi * a->tk + j) * a->hkv + hi / rep) * hd;
					int64_t vo = ((bi * a->tk + j) * a->hkv + hi / rep) * hdv;
					double ds = s[j] * (dp[j] - dsum);
					for (int64_t d = 0; d < hd; d++) {
						dq[qo + d] += sc * ds * k[ko + d];
						dk[ko + d] += sc * ds * q[qo + d];
					}
					for (int64_t d = 0; d < hdv; d++)
						dv[vo + d] += s[j] * go[d];
				}
			}
	free(s), free(dp);
}

void att_ref_doc_row(int32_t *row, int64_t t, const int64_t *starts, int n)
{
	int32_t cur = 0;
	for (int64_t p = 0, d = 0; p < t; p++) {
		while (d < n && starts[d] <= p)
			cur = (int32_t)starts[d++];
		row[p] = cur;
	}
}
