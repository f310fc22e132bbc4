/* The check of an HF folder against the model it is loaded into, which
 * titan-train (checkpoint.initial_load_in_hf) and titan-ckpt-convert from-hf
 * --flavor share (dcp_hf_read with dcp_hf_model.model), and the folders the
 * end-to-end test (tests/ckpt/hf_check.sh) hands both programs.
 *
 *   test_hf_check               run the unit tests
 *   test_hf_check make DIR      write DIR/VARIANT for every variant below: a
 *                               Llama 3 debugmodel in HF's names, whole or
 *                               damaged as the variant says
 *
 * Weights are zeros: only names, types and shapes matter here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "dcp/dcp.h"
#include "model/family.h"
#include "model/model.h"

/* good: loads; i64, i32, u8, bool: layer 0's up_proj stored as that type;
 * nonorm: no model.norm.weight; transposed: up_proj (dim, ffn); norm2d:
 * model.norm.weight (16, 16); vocab: 1024 rows of embedding and lm_head,
 * not the flavor's 2048; flat: up_proj as one dimension. */
static const char *const variants[] = {"good", "i64", "i32", "u8", "bool", "nonorm",
				       "transposed", "norm2d", "vocab", "flat", NULL};

static backend *be;
static model *dbg; /* llama3 debugmodel, unbound: names and shapes */
static char tmpdir[256];

static int open_model(void)
{
	titan_err err;
	const model_family *f = model_family_find("llama3");
	const llama_args *a = f ? model_family_flavor(f, "debugmodel") : NULL;
	if (a == NULL || (be = backend_cpu_create(1, &err)) == NULL ||
	    (dbg = model_create_unbound(be, a, 0, &err)) == NULL)
		return -1;
	return 0;
}

static void close_model(void)
{
	model_free(dbg);
	if (be)
		backend_free(be);
}

/* DIR/model.safetensors: the model's weights in HF's names, damaged as
 * variant says. */
static int write_variant(const char *dir, const char *variant, titan_err *err)
{
	int nt = model_num_tensors(dbg);
	st_item *items = calloc((size_t)nt, sizeof *items);
	char **names = calloc((size_t)nt, sizeof *names);
	void **data = calloc((size_t)nt, sizeof *data);
	int rc = items && names && data ? 0 : err_set(err, "out of memory");
	size_t n = 0;
	for (int i = 0; rc == 0 && i < nt; i++) {
		const model_tensor *t = model_tensor_at(dbg, i);
		int kind;
		char *hn = dcp_hf_key_name(NULL, t->fqn, 1, &kind);
		if (hn == NULL) {
			rc = err_set(err, "%s: no HF name", t->fqn);
			break;
		}
		names[i] = hn;
		st_item *it = &items[n];
		it->name = hn;
		it->dtype = PTZ_BF16;
		it->ndim = t->ndim;
		memcpy(it->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
		int up0 = strcmp(hn, "model.layers.0.mlp.up_proj.weight") == 0;
		int norm = strcmp(hn, "model.norm.weight") == 0;
		int vocab = t->is_embedding || strcmp(hn, "lm_head.weight") == 0;
		if (norm && strcmp(variant, "nonorm") == 0)
			continue;
		if (up0 && strcmp(variant, "i64") == 0)
			it->dtype = PTZ_I64;
		if (up0 && strcmp(variant, "i32") == 0)
			it->dtype = PTZ_I32;
		if (up0 && strcmp(variant, "u8") == 0)
			it->dtype = PTZ_U8;
		if (up0 && strcmp(variant, "bool") == 0)
			it->dtype = PTZ_BOOL;
		if (up0 && strcmp(variant, "transposed") == 0) {
			it->shape[0] = t->shape[1];
			it->shape[1] = t->shape[0];
		}
		if (up0 && strcmp(variant, "flat") == 0) {
			it->ndim = 1;
			it->shape[0] = (int64_t)t->numel;
		}
		if (norm && strcmp(variant, "norm2d") == 0) {
			it->ndim = 2;
			it->shape[0] = it->shape[1] = 16;
		}
		if (vocab && strcmp(variant, "vocab") == 0)
			it->shape[0] = 1024;
		size_t numel = 1;
		for (int d = 0; d < it->ndim; d++)
			numel *= (size_t)it->shape[d];
		if ((data[i] = calloc(numel * ptz_dtype_size(it->dtype) + 1, 1)) == NULL)
			rc = err_set(err, "out of memory");
		it->data = data[i];
		n++;
	}
	char path[600];
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	if (rc == 0 && mkdir(dir, 0755) != 0)
		rc = err_errno(err, "%s", dir);
	static const char *const meta[] = {"format", "pt", NULL};
	if (rc == 0)
		rc = st_write(path, items, n, meta, err);
	for (int i = 0; i < nt; i++) {
		free(names ? names[i] : NULL);
		free(data ? data[i] : NULL);
	}
	free(items);
	free(names);
	free(data);
	return rc;
}

static int make_all(const char *dir)
{
	titan_err err;
	if (mkdir(dir, 0755) != 0) {
		perror(dir);
		return 1;
	}
	int rc = open_model();
	if (rc != 0)
		fprintf(stderr, "test_hf_check: cannot build llama3 debugmodel\n");
	for (int v = 0; rc == 0 && variants[v]; v++) {
		char sub[512];
		snprintf(sub, sizeof sub, "%s/%s", dir, variants[v]);
		rc = write_variant(sub, variants[v], &err);
		if (rc != 0)
			fprintf(stderr, "test_hf_check: %s\n", err.msg);
	}
	close_model();
	return rc == 0 ? 0 : 1;
}

/* ---- unit tests: dcp_hf_read checked against the model */

static int drop(void *ctx, const char *name, dcp_dtype dt, int ndim, const int64_t *shape,
		void *data, titan_err *err)
{
	(void)name, (void)dt, (void)ndim, (void)shape, (void)err;
	(*(int *)ctx)++;
	free(data);
	return 0;
}

/* Read variant v (written into tmpdir) against debugmodel; err.msg after. */
static int read_variant(const char *v, titan_err *err, char *dir, size_t cap)
{
	snprintf(dir, cap, "%s/%s", tmpdir, v);
	struct stat st;
	if (stat(dir, &st) != 0 && write_variant(dir, v, err) != 0)
		return -2;
	const model_family *f = model_family_find("llama3");
	const llama_args *a = model_family_flavor(f, "debugmodel");
	dcp_hf_model hm = {.n_heads = a->n_heads, .n_kv_heads = a->n_kv_heads, .dim = a->dim,
			   .n_layers = a->n_layers, .model = dbg};
	int count = 0;
	return dcp_hf_read(dir, &hm, PTZ_F32, drop, &count, err);
}

static void the_whole_model_is_read(void **state)
{
	(void)state;
	titan_err err;
	char dir[600];
	int rc = read_variant("good", &err, dir, sizeof dir);
	if (rc != 0)
		fail_msg("%s", err.msg);
}

static void integer_and_boolean_weights_are_refused_with_name_and_type(void **state)
{
	(void)state;
	const char *v[] = {"i64", "i32", "u8", "bool"}, *st[] = {"I64", "I32", "U8", "BOOL"};
	for (int i = 0; i < 4; i++) {
		titan_err err;
		char dir[600], want[800];
		assert_int_equal(read_variant(v[i], &err, dir, sizeof dir), -1);
		snprintf(want, sizeof want, "%s: model.layers.0.mlp.up_proj.weight is stored as %s, "
			 "not as a floating-point type", dir, st[i]);
		assert_string_equal(err.msg, want);
	}
}

static void a_missing_weight_is_named(void **state)
{
	(void)state;
	titan_err err;
	char dir[600], want[800];
	assert_int_equal(read_variant("nonorm", &err, dir, sizeof dir), -1);
	snprintf(want, sizeof want, "%s: no weight for norm.weight", dir);
	assert_string_equal(err.msg, want);
}

/* main printed "(16, 16), the model (2560)" for a 1-D model shape of (256). */
static void shape_mismatches_print_1d_and_2d_shapes_exactly(void **state)
{
	(void)state;
	const model_tensor *w3 = model_tensor_find(dbg, "layers.0.feed_forward.w3.weight");
	assert_non_null(w3);
	long long f = (long long)w3->shape[0], d = (long long)w3->shape[1];
	struct {
		const char *v;
		char msg[200];
	} c[4];
	c[0].v = "norm2d";
	snprintf(c[0].msg, sizeof c[0].msg, "norm.weight has shape (16, 16), the model (256)");
	c[1].v = "flat";
	snprintf(c[1].msg, sizeof c[1].msg,
		 "layers.0.feed_forward.w3.weight has shape (%lld), the model (%lld, %lld)", f * d, f, d);
	c[2].v = "transposed";
	snprintf(c[2].msg, sizeof c[2].msg,
		 "layers.0.feed_forward.w3.weight has shape (%lld, %lld), the model (%lld, %lld)", d, f,
		 f, d);
	c[3].v = "vocab";
	snprintf(c[3].msg, sizeof c[3].msg,
		 "output.weight has shape (1024, 256), the model (2048, 256)");
	for (int i = 0; i < 4; i++) {
		titan_err err;
		char dir[600], want[900];
		assert_int_equal(read_variant(c[i].v, &err, dir, sizeof dir), -1);
		snprintf(want, sizeof want, "%s: %s", dir, c[i].msg);
		assert_string_equal(err.msg, want);
	}
}

static int setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof tmpdir, "%s/titan-hfcheck-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	return mkdtemp(tmpdir) == NULL || open_model() != 0 ? -1 : 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	int rc = system(cmd);
	close_model();
	return rc == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "make") == 0)
		return make_all(argv[2]);
	if (argc > 1) {
		fprintf(stderr, "usage: test_hf_check [make DIR]\n");
		return 2;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_whole_model_is_read),
		cmocka_unit_test(integer_and_boolean_weights_are_refused_with_name_and_type),
		cmocka_unit_test(a_missing_weight_is_named),
		cmocka_unit_test(shape_mismatches_print_1d_and_2d_shapes_exactly),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
