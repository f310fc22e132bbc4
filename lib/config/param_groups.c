/* optimizer.param_groups: torchtitan 0.3.0's ParamGroupConfig list in TOML. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/param_groups.h"

static const char *const optimizers[] = {"AdamW", "Adam", "DistMuon"};
static const char *const adjust_fns[] = {"original", "match_rms_adamw", "spectral_unclamped"};

/* The keyword arguments each optimizer takes (torch.optim.AdamW and Adam's
 * that change the update, DistMuon's __init__). */
static const struct kwarg {
	const char *name;
	unsigned bit;
	int muon; /* 0: AdamW and Adam's, 1: DistMuon's, 2: both */
} kwargs[] = {
	{"lr", CFG_PG_LR, 2},
	{"betas", CFG_PG_BETAS, 0},
	{"eps", CFG_PG_EPS, 2},
	{"weight_decay", CFG_PG_WEIGHT_DECAY, 2},
	{"momentum", CFG_PG_MOMENTUM, 1},
	{"nesterov", CFG_PG_NESTEROV, 1},
	{"ns_coefficients", CFG_PG_NS_COEFFICIENTS, 1},
	{"ns_steps", CFG_PG_NS_STEPS, 1},
	{"adjust_lr_fn", CFG_PG_ADJUST_LR_FN, 1},
};
#define N_KWARGS (sizeof kwargs / sizeof kwargs[0])

static int is_muon(const cfg_param_group *g)
{
	return g->optimizer_name && strcmp(g->optimizer_name, "DistMuon") == 0;
}

void config_param_group_values(const cfg_param_group *g, cfg_param_group_values *out)
{
	int muon = is_muon(g), adam = g->optimizer_name && !strcmp(g->optimizer_name, "Adam");
	cfg_param_group_values d = {
		.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = muon ? 1e-7 : 1e-8,
		.weight_decay = muon ? 0.1 : adam ? 0 : 1e-2, .momentum = 0.95, .nesterov = 1,
		.ns_coefficients = {3.4445, -4.7750, 2.0315}, .ns_steps = 5, .adjust_lr_fn = NULL};
	const cfg_param_group_values *v = &g->v;
	unsigned s = g->given;
#define TAKE(bit, f) if (s & (bit)) d.f = v->f
	TAKE(CFG_PG_LR, lr);
	TAKE(CFG_PG_EPS, eps);
	TAKE(CFG_PG_WEIGHT_DECAY, weight_decay);
	TAKE(CFG_PG_MOMENTUM, momentum);
	TAKE(CFG_PG_NESTEROV, nesterov);
	TAKE(CFG_PG_NS_STEPS, ns_steps);
	TAKE(CFG_PG_ADJUST_LR_FN, adjust_lr_fn);
#undef TAKE
	if (s & CFG_PG_BETAS)
		d.beta1 = v->beta1, d.beta2 = v->beta2;
	if (s & CFG_PG_NS_COEFFICIENTS)
		memcpy(d.ns_coefficients, v->ns_coefficients, sizeof d.ns_coefficients);
	*out = d;
}

static int number(const toml_value *v, double *f)
{
	if (v->kind == TOML_FLOAT)
		*f = v->f;
	else if (v->kind == TOML_INT)
		*f = (double)v->i;
	else
		return -1;
	return isfinite(*f) ? 0 : -1;
}

/* A list of n numbers (betas, ns_coefficients). */
static int numbers(const toml_value *v, double *f, int n)
{
	if (v->kind != TOML_ARRAY || v->n != n)
		return -1;
	for (int i = 0; i < n; i++)
		if (number(&v->items[i], &f[i]) != 0)
			return -1;
	return 0;
}

static int set_kwarg(cfg_param_group *g, const struct kwarg *k, const toml_value *v,
		     const char *what, titan_err *err)
{
	cfg_param_group_values *x = &g->v;
	int bad;
	switch (k->bit) {
	case CFG_PG_LR: bad = number(v, &x->lr); break;
	case CFG_PG_EPS: bad = number(v, &x->eps); break;
	case CFG_PG_WEIGHT_DECAY: bad = number(v, &x->weight_decay); break;
	case CFG_PG_MOMENTUM: bad = number(v, &x->momentum); break;
	case CFG_PG_BETAS: {
		double b[2];
		bad = numbers(v, b, 2);
		if (!bad)
			x->beta1 = b[0], x->beta2 = b[1];
		break;
	}
	case CFG_PG_NS_COEFFICIENTS: bad = numbers(v, x->ns_coefficients, 3); break;
	case CFG_PG_NESTEROV:
		bad = v->kind != TOML_BOOL;
		x->nesterov = v->b;
		break;
	case CFG_PG_NS_STEPS:
		bad = v->kind != TOML_INT;
		x->ns_steps = v->i;
		break;
	default: /* CFG_PG_ADJUST_LR_FN */
		bad = v->kind != TOML_STR;
		if (!bad) {
			free((char *)x->adjust_lr_fn);
			if (!(x->adjust_lr_fn = strdup(v->s)))
				return err_set(err, "out of memory");
		}
		break;
	}
	if (bad)
		return err_set(err, "%s: expected %s, found %s", what,
			       k->bit == CFG_PG_BETAS ? "a list of 2 numbers" :
			       k->bit == CFG_PG_NS_COEFFICIENTS ? "a list of 3 numbers" :
			       k->bit == CFG_PG_NESTEROV ? "a boolean" :
			       k->bit == CFG_PG_NS_STEPS ? "an integer" :
			       k->bit == CFG_PG_ADJUST_LR_FN ? "a string" : "a finite number",
			       toml_kind_name(v->kind));
	g->given |= k->bit;
	return 0;
}

static int set_str(char **dst, const toml_value *v, const char *what, titan_err *err)
{
	if (v->kind != TOML_STR)
		return err_set(err, "%s: expected a string, found %s", what, toml_kind_name(v->kind));
	free(*dst);
	if (!(*dst = strdup(v->s)))
		return err_set(err, "out of memory");
	return 0;
}

int pg_set(job_config *c, const char *rest, const toml_value *v, const char *where, int line,
	   titan_err *err)
{
	char *end;
	long i = strtol(rest, &end, 10);
	char what[256];
	snprintf(what, sizeof what, "%s: %s%s", where, PG_PREFIX, rest);
	if (end == rest || *end != '.' || i < 0 || i > c->optimizer.n_param_groups)
		return err_set(err, "%s: unknown key (optimizer.param_groups is an array of tables: "
			       "[[optimizer.param_groups]])", what);
	if (i == c->optimizer.n_param_groups) {
		cfg_param_group *g = realloc(c->optimizer.param_groups,
					     (size_t)(i + 1) * sizeof *g);
		if (!g)
			return err_set(err, "out of memory");
		c->optimizer.param_groups = g;
		memset(&g[i], 0, sizeof *g);
		g[i].line = line;
		c->optimizer.n_param_groups++;
	}
	cfg_param_group *g = &c->optimizer.param_groups[i];
	const char *key = end + 1;
	if (strcmp(key, "pattern") == 0)
		return set_str(&g->pattern, v, what, err);
	if (strcmp(key, "optimizer_name") == 0)
		return set_str(&g->optimizer_name, v, what, err);
	const char *kw = "optimizer_kwargs.";
	if (strncmp(key, kw, strlen(kw)) == 0)
		for (size_t k = 0; k < N_KWARGS; k++)
			if (strcmp(key + strlen(kw), kwargs[k].name) == 0)
				return set_kwarg(g, &kwargs[k], v, what, err);
	return err_set(err, "%s: unknown key (a group has pattern, optimizer_name and "
		       "optimizer_kwargs: lr, betas, eps, weight_decay; DistMuon's momentum, "
		       "nesterov, ns_coefficients, ns_steps, adjust_lr_fn)", what);
}

void pg_free(job_config *c)
{
	for (int i = 0; i < c->optimizer.n_param_groups; i++) {
		cfg_param_group *g = &c->optimizer.param_groups[i];
		free(g->pattern);
		free(g->optimizer_name);
		free((char *)g->v.adjust_lr_fn);
	}
	free(c->optimizer.param_groups);
	c->optimizer.param_groups = NULL;
	c->optimizer.n_param_groups = 0;
}

static int one_of(const char *s, const char *const *v, size_t n)
{
	for (size_t i = 0; s && i < n; i++)
		if (strcmp(s, v[i]) == 0)
			return 1;
	return 0;
}

static int validate_group(const cfg_param_group *g, int i, titan_err *err)
{
	char at[64];
	snprintf(at, sizeof at, "optimizer.param_groups[%d]", i);
	if (!g->pattern)
		return err_set(err, "%s: no pattern", at);
	if (!one_of(g->optimizer_name, optimizers, 3))
		return err_set(err, "%s: optimizer_name \"%s\": expected AdamW, Adam or DistMuon "
			       "(0.3.0's optimizers)", at, g->optimizer_name ? g->optimizer_name : "");
	int muon = is_muon(g);
	for (size_t k = 0; k < N_KWARGS; k++)
		if ((g->given & kwargs[k].bit) && kwargs[k].muon != 2 && kwargs[k].muon != muon)
			return err_set(err, "%s: optimizer_kwargs.%s: %s takes no %s", at,
				       kwargs[k].name, g->optimizer_name, kwargs[k].name);
	cfg_param_group_values v;
	config_param_group_values(g, &v);
	if (v.lr < 0 || v.eps < 0 || v.weight_decay < 0)
		return err_set(err, "%s: lr, eps and weight_decay must be >= 0", at);
	if (!muon && (v.beta1 < 0 || v.beta1 >= 1 || v.beta2 < 0 || v.beta2 >= 1))
		return err_set(err, "%s: betas must be in [0, 1)", at);
	if (muon && (v.momentum < 0 || v.momentum >= 1))
		return err_set(err, "%s: momentum %g: expected [0, 1)", at, v.momentum);
	if (muon && (v.ns_steps < 0 || v.ns_steps >= 100))
		return err_set(err, "%s: ns_steps %lld: expected 0..99 (DistMuon's bound)", at,
			       (long long)v.ns_steps);
	if (muon && v.adjust_lr_fn && !one_of(v.adjust_lr_fn, adjust_fns, 3))
		return err_set(err, "%s: adjust_lr_fn \"%s\": expected original, match_rms_adamw "
			       "or spectral_unclamped", at, v.adjust_lr_fn);
	return 0;
}

int pg_validate(const job_config *c, titan_err *err)
{
	for (int i = 0; i < c->optimizer.n_param_groups; i++)
		if (validate_group(&c->optimizer.param_groups[i], i, err) != 0)
			return -1;
	return 0;
}

void pg_print(const job_config *c, FILE *out)
{
	for (int i = 0; i < c->optimizer.n_param_groups; i++) {
		const cfg_param_group *g = &c->optimizer.param_groups[i];
		const cfg_param_group_values *v = &g->v;
		fputs("\n[[optimizer.param_groups]]\npattern = ", out);
		config_print_string(g->pattern ? g->pattern : "", out);
		fputs("\noptimizer_name = ", out);
		config_print_string(g->optimizer_name ? g->optimizer_name : "", out);
		fputs("\noptimizer_kwargs = {", out);
		const char *sep = "";
#define KW(bit, ...) if (g->given & (bit)) { fprintf(out, "%s", sep); fprintf(out, __VA_ARGS__); sep = ", "; }
		KW(CFG_PG_LR, "lr = %.17g", v->lr);
		KW(CFG_PG_BETAS, "betas = [%.17g, %.17g]", v->beta1, v->beta2);
		KW(CFG_PG_EPS, "eps = %.17g", v->eps);
		KW(CFG_PG_WEIGHT_DECAY, "weight_decay = %.17g", v->weight_decay);
		KW(CFG_PG_MOMENTUM, "momentum = %.17g", v->momentum);
		KW(CFG_PG_NESTEROV, "nesterov = %s", v->nesterov ? "true" : "false");
		KW(CFG_PG_NS_COEFFICIENTS, "ns_coefficients = [%.17g, %.17g, %.17g]",
		   v->ns_coefficients[0], v->ns_coefficients[1], v->ns_coefficients[2]);
		KW(CFG_PG_NS_STEPS, "ns_steps = %lld", (long long)v->ns_steps);
		if (g->given & CFG_PG_ADJUST_LR_FN) {
			fprintf(out, "%sadjust_lr_fn = ", sep);
			config_print_string(v->adjust_lr_fn, out);
		}
#undef KW
		fputs("}\n", out);
	}
}
