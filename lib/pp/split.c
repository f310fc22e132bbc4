/* The stage split: how many (virtual) stages, which units each holds, which
 * rank holds each, as torchtitan's pipeline_llm and
 * generate_llm_fqn_per_model_part decide (v0.2.2), with their messages. */
#include <ctype.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "pp/pp.h"

/* The number of stages and stages per rank, from layers_per_stage or the
 * schedule's default. */
static int count_stages(const pp_split_args *a, int *n_stages, int *per_rank, titan_err *e)
{
	int single = pp_kind_single(a->kind);
	if (a->layers_per_stage <= 0) {
		*per_rank = single ? 1 : 2;
		*n_stages = a->pp * *per_rank;
		return 0;
	}
	int64_t eff = a->n_layers + a->first_less + a->last_less;
	int64_t nvs = (eff + a->layers_per_stage - 1) / a->layers_per_stage;
	char info[160];
	snprintf(info, sizeof info, "Model has %d layers with pipeline_parallel_layers_per_stage=%lld",
		 a->n_layers, (long long)a->layers_per_stage);
	if (nvs % a->pp)
		return err_set(e, "Number of virtual stages (%lld) must be divisible by pipeline "
			       "parallel size (%d). %s. Please adjust "
			       "pipeline_parallel_layers_per_stage to a value that results in a "
			       "number of stages divisible by %d.", (long long)nvs, a->pp, info, a->pp);
	int64_t spr = nvs / a->pp;
	if (single && spr != 1)
		return err_set(e, "Single stage schedule requires exactly 1 stage per rank, but got "
			       "%lld stages per rank. %s, resulting in num_virtual_stages=%lld "
			       "across %d PP ranks. Please increase "
			       "pipeline_parallel_layers_per_stage to %d or higher to achieve 1 "
			       "stage per rank.", (long long)spr, info, (long long)nvs, a->pp,
			       a->n_layers / a->pp);
	if (!single && spr < 2)
		return err_set(e, "Multi-stage schedule requires at least 2 stages per rank, but got "
			       "%lld stages per rank. %s, resulting in num_virtual_stages=%lld "
			       "across %d PP ranks. Please decrease "
			       "pipeline_parallel_layers_per_stage to achieve at least 2 stages "
			       "per rank.", (long long)spr, info, (long long)nvs, a->pp);
	*n_stages = (int)nvs;
	*per_rank = (int)spr;
	return 0;
}

/* generate_llm_fqn_per_model_part: the embedding weighs first_less layers and
 * the head last_less; the effective layers are shared out evenly, the first
 * stages taking one more when they do not divide. */
static int share_layers(const pp_split_args *a, pp_split *s, titan_err *e)
{
	int n = s->n_stages, L = a->n_layers;
	int64_t iw = a->first_less, ow = a->last_less;
	if (n == 1) {
		s->u0[0] = 0;
		s->u1[0] = L + 1;
		return 0;
	}
	int64_t eff = L + iw + ow;
	if (n > eff)
		return err_set(e, "Number of stages (%d) cannot be greater than effective layers "
			       "(%lld)", n, (long long)eff);
	int64_t per = eff / n, extra = eff % n;
	if (iw > per)
		return err_set(e, "input_weight (%lld) exceeds minimum layers per stage (%lld).",
			       (long long)iw, (long long)per);
	if (ow > per)
		return err_set(e, "output_weight (%lld) exceeds minimum layers per stage (%lld).",
			       (long long)ow, (long long)per);
	int next = 0; /* the next layer to place */
	for (int k = 0; k < n; k++) {
		int64_t take = per + (k < extra) - (k == 0 ? iw : 0) - (k == n - 1 ? ow : 0);
		int got = (int)(take < L - next ? take : L - next);
		got = got < 0 ? 0 : got;
		s->u0[k] = k == 0 ? 0 : next + 1;
		next += got;
		s->u1[k] = k == n - 1 ? L + 1 : next;
	}
	return 0;
}

/* A torchtitan module name as a unit: tok_embeddings 0, layers.N N + 1, norm
 * and output L + 1; -1 when the model has no such module. */
static int module_unit(const char *name, int L)
{
	if (strcmp(name, "tok_embeddings") == 0)
		return 0;
	if (strcmp(name, "norm") == 0 || strcmp(name, "output") == 0)
		return L + 1;
	/* "layers.N" as torch names a ModuleDict entry: digits, no leading 0 */
	if (strncmp(name, "layers.", 7) != 0 || !isdigit((unsigned char)name[7]) ||
	    (name[7] == '0' && name[8] != '\0') || strlen(name + 7) > 6)
		return -1;
	char *end;
	long v = strtol(name + 7, &end, 10);
	return *end == '\0' && v < L ? (int)v + 1 : -1;
}

static int from_parts(const pp_split_args *a, pp_split *s, titan_err *e)
{
	int L = a->n_layers, next = 0;
	for (int k = 0; k < a->n_parts; k++) {
		int lo = L + 2, hi = -1, n = a->part_len[k], norm = 0, out = 0;
		for (int j = 0; j < n; j++) {
			const char *m = a->parts[k][j];
			int u = module_unit(m, L);
			if (u < 0)
				return err_set(e, "parallelism.module_fqns_per_model_part: part %d: unknown "
					       "module '%s' (the model has tok_embeddings, layers.0 .. "
					       "layers.%d, norm, output)", k, m, L - 1);
			norm += strcmp(m, "norm") == 0;
			out += strcmp(m, "output") == 0;
			lo = u < lo ? u : lo;
			hi = u > hi ? u : hi;
		}
		if (n == 0)
			return err_set(e, "parallelism.module_fqns_per_model_part: part %d is empty", k);
		if (norm != out)
			return err_set(e, "parallelism.module_fqns_per_model_part: part %d has %s "
				       "without %s (titan's last unit is the final norm with the "
				       "output projection and the loss)", k, norm ? "norm" : "output",
				       norm ? "output" : "norm");
		if ((lo != next || hi - lo + 1 != n - (norm && out)) && k == 0)
			return err_set(e, "parallelism.module_fqns_per_model_part: part 0 is not a run "
				       "of modules from tok_embeddings (each part takes the next "
				       "modules in order, tok_embeddings, layers.0, ..., norm and "
				       "output, each once)");
		if (lo != next || hi - lo + 1 != n - (norm && out))
			return err_set(e, "parallelism.module_fqns_per_model_part: part %d is not the "
				       "run of modules after part %d's (each part takes the next "
				       "modules in order, tok_embeddings, layers.0, ..., norm and "
				       "output, each once)", k, k - 1);
		s->u0[k] = lo;
		s->u1[k] = hi;
		next = hi + 1;
	}
	if (next != L + 2)
		return err_set(e, "parallelism.module_fqns_per_model_part: the parts stop before %s",
			       next == L + 1 ? "norm and output" : "the last layer");
	return 0;
}

static int from_split_points(const pp_split_args *a, pp_split *s, titan_err *e)
{
	int L = a->n_layers, prev = 0;
	for (int k = 0; k < a->n_split_points; k++) {
		int u = module_unit(a->split_points[k], L);
		if (u <= prev)
			return err_set(e, "parallelism.pipeline_parallel_split_points: '%s' %s",
				       a->split_points[k], u < 0 ? "is not a module of the model"
				       : "does not come after the previous split point (each "
				       "starts a stage, in order)");
		s->u0[k] = prev;
		s->u1[k] = u - 1;
		prev = u;
	}
	s->u0[a->n_split_points] = prev;
	s->u1[a->n_split_points] = L + 1;
	return 0;
}

int pp_split_make(const pp_split_args *a, pp_split *s, titan_err *e)
{
	memset(s, 0, sizeof *s);
	if (a->pp < 1 || a->n_layers < 1)
		return err_set(e, "pipeline split: %d ranks, %d layers", a->pp, a->n_layers);
	if (a->n_parts > 0 && a->n_split_points > 0)
		return err_set(e, "parallelism: module_fqns_per_model_part and "
			       "pipeline_parallel_split_points are two ways to name the stages; set "
			       "one");
	int n = 0, spr = 0;
	if (count_stages(a, &n, &spr, e))
		return -1;
	if (a->n_parts > 0)
		n = a->n_parts;
	else if (a->n_split_points > 0)
		n = a->n_split_points + 1;
	if (n % a->pp)
		return err_set(e, "num_stages %d must be evenly divisible by pp_degree %d", n, a->pp);
	spr = n / a->pp;
	if (pp_kind_v(a->kind) && spr != 2)
		return err_set(e, "v schedules assume 2 stages per rank, got %d", spr);
	if (pp_kind_single(a->kind) && spr != 1)
		return err_set(e, "%s runs one stage per rank, but the stages named give %d per "
			       "rank", pp_kind_name(a->kind), spr);
	if (!pp_kind_single(a->kind) && spr < 2)
		return err_set(e, "%s runs at least 2 stages per rank, but the stages named give "
			       "%d per rank", pp_kind_name(a->kind), spr);
	s->n_stages = n;
	s->stages_per_rank = spr;
	s->pp = a->pp;
	s->v_style = pp_kind_v(a->kind);
	s->u0 = malloc((size_t)n * sizeof(int));
	s->u1 = malloc((size_t)n * sizeof(int));
	s->stage_rank = malloc((size_t)n * sizeof(int));
	if (s->u0 == NULL || s->u1 == NULL || s->stage_rank == NULL) {
		pp_split_free(s);
		return err_set(e, "pipeline split: out of memory");
	}
	int rc = a->n_parts > 0 ? from_parts(a, s, e)
		 : a->n_split_points > 0 ? from_split_points(a, s, e) : share_layers(a, s, e);
	if (rc) {
		pp_split_free(s);
		return -1;
	}
	for (int k = 0; k < n; k++)
		s->stage_rank[k] = pp_stage_rank(s->v_style, a->pp, n, k);
	return 0;
}

void pp_split_free(pp_split *s)
{
	free(s->u0);
	free(s->u1);
	free(s->stage_rank);
	memset(s, 0, sizeof *s);
}

int pp_split_rank_stages(const pp_split *s, int r, int *stages)
{
	int n = 0;
	for (int k = 0; k < s->n_stages; k++)
		if (s->stage_rank[k] == r)
			stages[n++] = k;
	return n;
}

int pp_microbatches(int64_t local_batch_size, int64_t microbatch_size, int n_stages,
		    int *n_mb, int *few, titan_err *e)
{
	if (microbatch_size < 1)
		return err_set(e, "parallelism.pipeline_parallel_microbatch_size: %lld, expected 1 "
			       "or more", (long long)microbatch_size);
	if (local_batch_size % microbatch_size)
		return err_set(e, "Batch size %lld must be divisible by microbatch_size %lld. Update "
			       "the config arguments for either batch_size or "
			       "pipeline_parallel_microbatch_size.", (long long)local_batch_size,
			       (long long)microbatch_size);
	if (local_batch_size / microbatch_size > INT_MAX)
		return err_set(e, "training.local_batch_size %lld / pipeline_parallel_microbatch_size "
			       "%lld: more than %d micro-batches", (long long)local_batch_size,
			       (long long)microbatch_size, INT_MAX);
	*n_mb = (int)(local_batch_size / microbatch_size);
	*few = *n_mb < n_stages;
	return 0;
}
