/* value.c: small Python values as torch.save streams, the form DCP stores
 * non-tensor state in (BytesStorageMetadata items). */
#include <stdlib.h>
#include <string.h>

#include "dcp/dcp_priv.h"

static const char *const value_globals[] = {"collections OrderedDict", "_codecs encode", NULL};
static const pk_allow value_allow = {value_globals};

int dcp_value_save(const pk_val *v, uint8_t **out, size_t *n, titan_err *err)
{
	ptz_writer w;
	if (ptz_writer_init(&w, NULL, "archive", err))
		return -1;
	if (ptz_save_value(&w, v, err)) {
		ptz_writer_free(&w);
		return -1;
	}
	*out = w.mem;
	*n = (size_t)w.pos;
	w.mem = NULL;
	ptz_writer_free(&w);
	return 0;
}

/* Build one value in a scratch arena and save it. */
static int save_one(pk_arena *a, pk_val *v, uint8_t **out, size_t *n, titan_err *err)
{
	int rc = v ? dcp_value_save(v, out, n, err) : err_set(err, "out of memory");
	pk_free(a);
	return rc;
}

int dcp_value_int(int64_t v, uint8_t **out, size_t *n, titan_err *err)
{
	pk_arena *a = pk_arena_new();
	return a ? save_one(a, pk_int(a, v), out, n, err) : err_set(err, "out of memory");
}

int dcp_value_float(double v, uint8_t **out, size_t *n, titan_err *err)
{
	pk_arena *a = pk_arena_new();
	return a ? save_one(a, pk_float(a, v), out, n, err) : err_set(err, "out of memory");
}

int dcp_value_bool(int v, uint8_t **out, size_t *n, titan_err *err)
{
	pk_arena *a = pk_arena_new();
	return a ? save_one(a, pk_bool(a, v), out, n, err) : err_set(err, "out of memory");
}

int dcp_value_none(uint8_t **out, size_t *n, titan_err *err)
{
	pk_arena *a = pk_arena_new();
	return a ? save_one(a, pk_new(a, PK_NONE), out, n, err) : err_set(err, "out of memory");
}

int dcp_value_str(const char *s, uint8_t **out, size_t *n, titan_err *err)
{
	pk_arena *a = pk_arena_new();
	return a ? save_one(a, pk_str(a, s), out, n, err) : err_set(err, "out of memory");
}

int dcp_value_pybytes(const void *p, size_t len, uint8_t **out, size_t *n, titan_err *err)
{
	pk_arena *a = pk_arena_new();
	return a ? save_one(a, pk_bytes(a, p, len), out, n, err) : err_set(err, "out of memory");
}

int dcp_value_floats(const double *v, size_t len, int as_tuple, uint8_t **out, size_t *n,
		     titan_err *err)
{
	pk_arena *a = pk_arena_new();
	if (!a)
		return err_set(err, "out of memory");
	pk_val *seq = pk_new(a, as_tuple ? PK_TUPLE : PK_LIST);
	for (size_t i = 0; seq && i < len; i++)
		if (pk_append(a, seq, pk_float(a, v[i])))
			seq = NULL;
	return save_one(a, seq, out, n, err);
}

int dcp_value_load(const uint8_t *p, size_t n, pk_val **out, pk_arena **arena, titan_err *err)
{
	*arena = NULL;
	ptz_reader z;
	if (ptz_open(&z, p, n, err))
		return -1;
	const ptz_entry *e = ptz_find(&z, "data.pkl");
	int rc = e ? pk_load(p + e->data_off, (size_t)e->size, &value_allow, out, arena, err)
		   : err_set(err, "torch.save stream without data.pkl");
	ptz_close(&z);
	return rc;
}

int dcp_value_get_int(const uint8_t *p, size_t n, int64_t *v, titan_err *err)
{
	pk_val *x;
	pk_arena *a;
	int rc = dcp_value_load(p, n, &x, &a, err);
	if (rc == 0 && x->kind != PK_INT && x->kind != PK_BOOL)
		rc = err_set(err, "value is not an int");
	if (rc == 0)
		*v = x->i;
	pk_free(a);
	return rc;
}

int dcp_value_get_float(const uint8_t *p, size_t n, double *v, titan_err *err)
{
	pk_val *x;
	pk_arena *a;
	int rc = dcp_value_load(p, n, &x, &a, err);
	if (rc == 0 && x->kind != PK_FLOAT && x->kind != PK_INT)
		rc = err_set(err, "value is not a float");
	if (rc == 0)
		*v = x->kind == PK_FLOAT ? x->f : (double)x->i;
	pk_free(a);
	return rc;
}

int dcp_value_get_pybytes(const uint8_t *p, size_t n, uint8_t **out, size_t *len, titan_err *err)
{
	pk_val *x;
	pk_arena *a;
	int rc = dcp_value_load(p, n, &x, &a, err);
	if (rc == 0 && x->kind != PK_BYTES)
		rc = err_set(err, "value is not bytes");
	else if (rc == 0 && (*out = malloc(x->len + 1)) == NULL)
		rc = err_set(err, "out of memory");
	if (rc == 0) {
		memcpy(*out, x->s, x->len);
		*len = x->len;
	}
	pk_free(a);
	return rc;
}

const char *const dcp_adamw_group_keys[DCP_ADAMW_GROUP_KEYS] = {
	"lr", "eps", "weight_decay", "initial_lr", "amsgrad", "maximize", "foreach",
	"capturable", "differentiable", "fused", "decoupled_weight_decay", "betas",
};

int dcp_adamw_group_values(const dcp_adamw_group *g, uint8_t **vals, size_t *lens, titan_err *err)
{
	memset(vals, 0, DCP_ADAMW_GROUP_KEYS * sizeof *vals);
	double betas[2] = {g->beta1, g->beta2};
	double fv[4] = {g->lr, g->eps, g->weight_decay, g->initial_lr};
	int rc = 0;
	for (int k = 0; k < 4 && rc == 0; k++)
		rc = dcp_value_float(fv[k], &vals[k], &lens[k], err);
	/* amsgrad, maximize, foreach (None), capturable, differentiable, fused
	 * (None): torch's defaults, as torchtitan builds the optimizer */
	for (int k = 4; k < 10 && rc == 0; k++)
		rc = k == 6 || k == 9 ? dcp_value_none(&vals[k], &lens[k], err)
				      : dcp_value_bool(0, &vals[k], &lens[k], err);
	if (rc == 0)
		rc = dcp_value_bool(!g->adam, &vals[10], &lens[10], err);
	if (rc == 0)
		rc = dcp_value_floats(betas, 2, 1, &vals[11], &lens[11], err);
	if (rc != 0)
		for (int k = 0; k < DCP_ADAMW_GROUP_KEYS; k++) {
			free(vals[k]);
			vals[k] = NULL;
		}
	return rc;
}
