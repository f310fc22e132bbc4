/* titan-bench attention: the backend's causal attention forward and backward
 * with a model's heads, and with --docs the block-causal attention of packed
 * documents (torchtitan 0.3.0's mask) beside it, in TFLOP/s and as a
 * percentage of the ceiling.  FLOPs counted as flash-attention counts them,
 * over the (query, key) pairs the mask leaves (model_attn_pairs_row, exact):
 * forward 2 matmuls (q k^T and p v) of 2 hd each per pair and head; backward
 * 2.5x the forward (5 matmuls: q k^T again, dv, dp, dq, dk). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "model/flavor.h"
#include "model/model.h"
#include "prof/prof.h"

typedef struct attn_run {
	backend *be;
	be_attn at;
	void *q, *k, *v, *out, *dout, *dq, *dk, *dv;
	float *lse;
} attn_run;

static void run_fwd(void *p)
{
	attn_run *r = p;
	PROF_T0(t);
	r->be->ops->attention_fwd(r->be, r->out, r->lse, r->q, r->k, r->v, &r->at);
	PROF_OP(t, "attention_fwd", PA_I("b", r->at.b), PA_I("t", r->at.tq), PA_I("h", r->at.h),
		PA_I("hkv", r->at.hkv), PA_I("hd", r->at.hd), PA_S("dtype", be_dtype_name(r->at.qkv)));
}

static void run_bwd(void *p)
{
	attn_run *r = p;
	PROF_T0(t);
	r->be->ops->attention_bwd(r->be, r->dq, r->dk, r->dv, r->dout, r->q, r->k, r->v, r->out,
				  r->lse, &r->at);
	PROF_OP(t, "attention_bwd", PA_I("b", r->at.b), PA_I("t", r->at.tq), PA_I("h", r->at.h),
		PA_I("hkv", r->at.hkv), PA_I("hd", r->at.hd), PA_S("dtype", be_dtype_name(r->at.qkv)));
}

/* The sizes: a model preset with --batch and --seq, or "B,T,H,HKV,HD". */
static int attn_shape(const bench_args *a, be_attn *at, char *name, size_t n, titan_err *e)
{
	const struct llama_args *f = bench_flavor(a->attn);
	long long b = a->batch, t = a->seq, h, hkv, hd;
	if (f != NULL) {
		h = f->n_heads;
		hkv = f->n_kv_heads;
		hd = flavor_head_dim(f);
		snprintf(name, n, "%s", f->name);
	} else {
		int used = 0;
		if (sscanf(a->attn, "%lld,%lld,%lld,%lld,%lld%n", &b, &t, &h, &hkv, &hd, &used) != 5 ||
		    a->attn[used] != '\0' || b < 1 || t < 1 || h < 1 || hkv < 1 || hd < 1 ||
		    h % hkv != 0 || b * t > (1 << 24) || h > 1024 || hd > 1024)
			return err_set(e, "--attention-shape: '%s': expected a model (llama3-8b, "
				       "debugmodel, ...) or B,T,H,HKV,HD with HKV dividing H", a->attn);
		snprintf(name, n, "custom");
	}
	*at = (be_attn){.b = b, .tq = t, .tk = t, .h = h, .hkv = hkv, .hd = hd, .hdv = hd,
			.causal = 1, .qkv = BE_F32, .out = BE_F32, .dout = BE_F32, .grad = BE_F32};
	return 0;
}

/* The attention dtypes the bench knows; a backend lacking one says so. */
static const struct {
	const char *name;
	be_dtype t;
} DTYPES[] = {{"fp32", BE_F32}, {"bf16", BE_BF16}};

/* Each row cut into n documents of t / n positions (the last takes the rest):
 * the (b, t) doc array of be_attn (each position's document start) on the
 * backend, and the rows' 0.3.0 positions on the host for the pair count. */
static int make_docs(backend *be, attn_run *r, int64_t n, int32_t **dev, int32_t **pos,
		     titan_err *e)
{
	be_attn *at = &r->at;
	size_t cells = (size_t)(at->b * at->tq);
	int32_t *doc = malloc(cells * sizeof *doc);
	*pos = malloc(cells * sizeof **pos);
	int host = doc != NULL && *pos != NULL;
	*dev = host ? be->ops->alloc(be, cells * sizeof *doc, e) : NULL;
	if (*dev == NULL) {
		free(doc);
		free(*pos);
		*pos = NULL;
		return host ? -1 : err_set(e, "out of memory for the documents");
	}
	int64_t len = at->tq / n;
	for (int64_t bi = 0; bi < at->b; bi++)
		for (int64_t p = 0; p < at->tq; p++) {
			int64_t start = p / len < n ? p / len * len : (n - 1) * len;
			doc[bi * at->tq + p] = (int32_t)start;
			(*pos)[bi * at->tq + p] = (int32_t)(p - start);
		}
	be->ops->copy(be, *dev, doc, cells * sizeof *doc, BACKEND_H2D);
	free(doc);
	at->doc = *dev;
	at->doc_t = at->tq;
	return 0;
}

/* Allocate r's tensors in at's element type, time one pass (dir 0 forward,
 * 1 backward, 2 both) and free them; seconds per pass in t[], or -1 with the
 * backend's fault or an allocation failure in e. */
static int time_passes(backend *be, attn_run *r, double min_s, double t[2], titan_err *e)
{
	be_attn *at = &r->at;
	size_t nq = (size_t)(at->b * at->tq * at->h * at->hd);
	size_t nk = (size_t)(at->b * at->tk * at->hkv * at->hd);
	size_t nl = (size_t)(at->b * at->h * at->tq), es = be_dtype_size(at->qkv);
	void **bufs[] = {&r->q, &r->out, &r->dout, &r->dq, &r->k, &r->v, &r->dk, &r->dv,
			 (void **)&r->lse};
	size_t sizes[] = {nq * es, nq * es, nq * es, nq * es, nk * es, nk * es, nk * es, nk * es,
			  nl * sizeof(float)};
	int rc = 0;
	float scale;
	for (int i = 0; i < 9; i++)
		*bufs[i] = NULL;
	for (int i = 0; i < 9 && rc == 0; i++) {
		be_dtype bt = i == 8 ? BE_F32 : at->qkv;
		*bufs[i] = bench_operand(be, bt, sizes[i] / be_dtype_size(bt), 1.0f, (uint64_t)i + 1,
					 &scale, e);
		rc = *bufs[i] == NULL ? -1 : 0;
	}
	for (int dir = 0; dir < 2 && rc == 0; dir++)
		if ((t[dir] = bench_time(dir ? run_bwd : run_fwd, r, min_s, be, e)) < 0)
			rc = -1;
	for (int i = 0; i < 9; i++)
		bench_release(be, *bufs[i], sizes[i]);
	return rc;
}

/* r's rows, the causal mask's or the documents' (pos, the rows' positions). */
static int measure(backend *be, const bench_args *a, attn_run *r, const int32_t *pos, report *rep,
		   const char *model, titan_err *e)
{
	be_attn *at = &r->at;
	double pairs = 0;
	for (int64_t bi = 0; bi < at->b; bi++)
		pairs += (double)model_attn_pairs_row(at->tq, 0, 0, pos ? pos + bi * at->tq : NULL);
	double fwd_flops = 4.0 * (double)at->h * (double)at->hd * pairs;
	char mask[48];
	snprintf(mask, sizeof mask, pos ? "docs %lld" : "causal", (long long)a->docs);
	for (size_t d = 0; d < sizeof DTYPES / sizeof DTYPES[0]; d++) {
		if (!bench_listed(a->dtypes, DTYPES[d].name))
			continue;
		/* Probe on a tiny shape first: a missing element type is a row of
		 * "not available", not a failure. */
		attn_run probe = *r;
		double t[2];
		titan_err pe = {0};
		probe.at = (be_attn){.b = 1, .tq = 16, .tk = 16, .h = 2, .hkv = 1, .hd = 16,
				     .hdv = 16, .causal = 1, .qkv = DTYPES[d].t, .out = DTYPES[d].t,
				     .dout = DTYPES[d].t, .grad = DTYPES[d].t};
		if (time_passes(be, &probe, 0, t, &pe)) {
			report_unavailable(rep, DTYPES[d].name, pe.msg);
			continue;
		}
		at->qkv = at->out = at->dout = at->grad = DTYPES[d].t;
		if (time_passes(be, r, a->seconds, t, e))
			return -1;
		for (int dir = 0; dir < 2; dir++) {
			double fl = dir ? 2.5 * fwd_flops : fwd_flops;
			char shape[96];
			snprintf(shape, sizeof shape, "%" PRId64 "x%" PRId64 " h%" PRId64 "/%" PRId64
				 " hd%" PRId64, at->b, at->tq, at->h, at->hkv, at->hd);
			json_t *row = report_row(rep);
			rset(row, "model", json_string(model));
			rset(row, "shape", json_string(shape));
			rset(row, "mask", json_string(mask));
			rset(row, "pairs", json_real(pairs));
			rset(row, "pass", json_string(dir ? "backward" : "forward"));
			rset(row, "dtype", json_string(DTYPES[d].name));
			rset(row, "ms", json_real(t[dir] * 1e3));
			rset(row, "tflops", json_real(fl / t[dir] / 1e12));
		}
	}
	return 0;
}

int bench_attention(const bench_args *a, titan_err *e)
{
	attn_run r;
	char model[64];
	memset(&r, 0, sizeof r);
	if (attn_shape(a, &r.at, model, sizeof model, e) ||
	    bench_check_list(a->dtypes, "fp32,bf16", e))
		return BENCH_USAGE;
	if (a->docs > r.at.tq) {
		err_set(e, "--docs %lld: more documents than the %lld positions of a row",
			(long long)a->docs, (long long)r.at.tq);
		return BENCH_USAGE;
	}
	report rep;
	if (report_init(&rep, "attention", a, e))
		return -1;
	backend *be = backend_cpu_create(a->threads, e);
	if (be == NULL) {
		report_free(&rep);
		return -1;
	}
	r.be = be;
	bench_ceiling_begin(&rep, be->threads);
	int rc = measure(be, a, &r, NULL, &rep, model, e);
	int32_t *doc = NULL, *pos = NULL;
	if (rc == 0 && a->docs > 0) {
		rc = make_docs(be, &r, a->docs, &doc, &pos, e);
		if (rc == 0)
			rc = measure(be, a, &r, pos, &rep, model, e);
		if (doc)
			be->ops->free(be, doc);
		free(pos);
	}
	if (rc == 0)
		bench_ceiling_end(&rep, be->threads);
	report_unavailable(&rep, "cuda", bench_cuda_unavailable());
	report_note(&rep, "causal GQA on the %s backend%s; FLOPs: forward 4 hd per head and "
		    "(query, key) pair the mask leaves (causal: t (t + 1) / 2 a row; documents: "
		    "L (L + 1) / 2 each), backward 2.5x forward; median of runs lasting at least "
		    "%.2f s", be->ops->name, a->docs > 0 ? ", and block-causal over --docs "
		    "documents of equal length a row" : "", a->seconds);
	static const report_col cols[] = {
		{"model", "model", NULL}, {"shape", "shape", NULL}, {"mask", "mask", NULL},
		{"pass", "pass", NULL},
		{"dtype", "dtype", NULL}, {"ms", "ms", "%.3f"}, {"tflops", "TFLOP/s", "%.4f"},
		{"pct_ceiling", "% ceiling", "%.1f"},
	};
	if (rc == 0)
		rc = report_emit(&rep, cols, sizeof cols / sizeof cols[0], a->json, e);
	backend_free(be);
	report_free(&rep);
	return rc;
}
