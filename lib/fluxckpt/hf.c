/* hf.c: FLUX.1's transformer weights as diffusers and Black Forest Labs name
 * them, to and from torchtitan 0.3.0's FluxModel state dict (fluxckpt.h). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/afile.h"
#include "core/json.h"
#include "fluxckpt/fluxckpt.h"
#include "safetensors/safetensors.h"

/* How a 0.3.0 tensor becomes diffusers': the same values (PLAIN), its two
 * halves of rows swapped (SWAP: the final layer's (shift, scale) is
 * diffusers' (scale, shift)), or a run of its rows (PART: consecutive
 * entries with the same titan name, in order, q k v [mlp]: hidden_size
 * rows each, the MLP's int(hidden_size * mlp_ratio)). */
enum { K_PLAIN, K_SWAP, K_PART };
typedef struct fkey {
	const char *tt, *hf;
	int kind;
} fkey;

#define WB(tt, hf, kind) {tt ".weight", hf ".weight", kind}, {tt ".bias", hf ".bias", kind}
#define PART3(tt, a, b, c, s)                                                   \
	{tt s, a s, K_PART}, {tt s, b s, K_PART}, {tt s, c s, K_PART}

/* 0.3.0's FluxStateDictAdapter: from_hf_map_direct and combination_plan. */
static const fkey diffusers_keys[] = {
	WB("img_in", "x_embedder", K_PLAIN),
	WB("time_in.in_layer", "time_text_embed.timestep_embedder.linear_1", K_PLAIN),
	WB("time_in.out_layer", "time_text_embed.timestep_embedder.linear_2", K_PLAIN),
	WB("vector_in.in_layer", "time_text_embed.text_embedder.linear_1", K_PLAIN),
	WB("vector_in.out_layer", "time_text_embed.text_embedder.linear_2", K_PLAIN),
	WB("txt_in", "context_embedder", K_PLAIN),
	WB("double_blocks.{}.img_mod.lin", "transformer_blocks.{}.norm1.linear", K_PLAIN),
	PART3("double_blocks.{}.img_attn.qkv", "transformer_blocks.{}.attn.to_q",
	      "transformer_blocks.{}.attn.to_k", "transformer_blocks.{}.attn.to_v", ".weight"),
	PART3("double_blocks.{}.img_attn.qkv", "transformer_blocks.{}.attn.to_q",
	      "transformer_blocks.{}.attn.to_k", "transformer_blocks.{}.attn.to_v", ".bias"),
	{"double_blocks.{}.img_attn.norm.query_norm.weight", "transformer_blocks.{}.attn.norm_q.weight",
	 K_PLAIN},
	{"double_blocks.{}.img_attn.norm.key_norm.weight", "transformer_blocks.{}.attn.norm_k.weight",
	 K_PLAIN},
	WB("double_blocks.{}.img_attn.proj", "transformer_blocks.{}.attn.to_out.0", K_PLAIN),
	WB("double_blocks.{}.img_mlp.0", "transformer_blocks.{}.ff.net.0.proj", K_PLAIN),
	WB("double_blocks.{}.img_mlp.2", "transformer_blocks.{}.ff.net.2", K_PLAIN),
	WB("double_blocks.{}.txt_mod.lin", "transformer_blocks.{}.norm1_context.linear", K_PLAIN),
	PART3("double_blocks.{}.txt_attn.qkv", "transformer_blocks.{}.attn.add_q_proj",
	      "transformer_blocks.{}.attn.add_k_proj", "transformer_blocks.{}.attn.add_v_proj",
	      ".weight"),
	PART3("double_blocks.{}.txt_attn.qkv", "transformer_blocks.{}.attn.add_q_proj",
	      "transformer_blocks.{}.attn.add_k_proj", "transformer_blocks.{}.attn.add_v_proj",
	      ".bias"),
	{"double_blocks.{}.txt_attn.norm.query_norm.weight",
	 "transformer_blocks.{}.attn.norm_added_q.weight", K_PLAIN},
	{"double_blocks.{}.txt_attn.norm.key_norm.weight",
	 "transformer_blocks.{}.attn.norm_added_k.weight", K_PLAIN},
	WB("double_blocks.{}.txt_attn.proj", "transformer_blocks.{}.attn.to_add_out", K_PLAIN),
	WB("double_blocks.{}.txt_mlp.0", "transformer_blocks.{}.ff_context.net.0.proj", K_PLAIN),
	WB("double_blocks.{}.txt_mlp.2", "transformer_blocks.{}.ff_context.net.2", K_PLAIN),
	PART3("single_blocks.{}.linear1", "single_transformer_blocks.{}.attn.to_q",
	      "single_transformer_blocks.{}.attn.to_k", "single_transformer_blocks.{}.attn.to_v",
	      ".weight"),
	{"single_blocks.{}.linear1.weight", "single_transformer_blocks.{}.proj_mlp.weight", K_PART},
	PART3("single_blocks.{}.linear1", "single_transformer_blocks.{}.attn.to_q",
	      "single_transformer_blocks.{}.attn.to_k", "single_transformer_blocks.{}.attn.to_v",
	      ".bias"),
	{"single_blocks.{}.linear1.bias", "single_transformer_blocks.{}.proj_mlp.bias", K_PART},
	WB("single_blocks.{}.linear2", "single_transformer_blocks.{}.proj_out", K_PLAIN),
	{"single_blocks.{}.norm.query_norm.weight", "single_transformer_blocks.{}.attn.norm_q.weight",
	 K_PLAIN},
	{"single_blocks.{}.norm.key_norm.weight", "single_transformer_blocks.{}.attn.norm_k.weight",
	 K_PLAIN},
	WB("single_blocks.{}.modulation.lin", "single_transformer_blocks.{}.norm.linear", K_PLAIN),
	WB("final_layer.linear", "proj_out", K_PLAIN),
	WB("final_layer.adaLN_modulation.1", "norm_out.linear", K_SWAP),
	{NULL, NULL, 0},
};

/* FLUX.1-dev's guidance embedder, which 0.3.0's FluxModel lacks. */
static int is_guidance(const char *name, int format)
{
	return !strncmp(name, format == FLUXCKPT_BFL ? "guidance_in." :
			"time_text_embed.guidance_embedder.",
			format == FLUXCKPT_BFL ? 12 : 34);
}

/* BFL's name of a 0.3.0 name (or back): the QK norms' .weight is .scale
 * (BFL's RMSNorm), all else the same.  buf holds the result. */
static const char *bfl_name(const char *name, int to_hf, char *buf, size_t cap)
{
	const char *from = to_hf ? "_norm.weight" : "_norm.scale";
	const char *to = to_hf ? "_norm.scale" : "_norm.weight";
	size_t n = strlen(name), f = strlen(from);
	if (n < f || strcmp(name + n - f, from) != 0 ||
	    !(strstr(name, ".norm.query_norm.") || strstr(name, ".norm.key_norm.")) ||
	    n - f + strlen(to) + 1 > cap)
		return name;
	snprintf(buf, cap, "%.*s%s", (int)(n - f), name, to);
	return buf;
}

/* The first diffusers entry for a 0.3.0 name, its numbers in nums. */
static const fkey *find_tt(const char *name, long *nums, int *nn)
{
	for (const fkey *k = diffusers_keys; k->tt; k++)
		if (dcp_hf_match(k->tt, name, nums, nn))
			return k;
	return NULL;
}

/* The rows of part i of a fused tensor of `rows` rows: q, k and v
 * hidden_size each, the rest (a single block's MLP) after them. */
static int64_t part_rows(const flux_config *c, int i)
{
	return i < 3 ? c->hidden_size : (int64_t)((double)c->hidden_size * c->mlp_ratio);
}

/* Swap the two halves of n bytes (n even) from src into dst. */
static void swap_halves(void *dst, const void *src, size_t n)
{
	memcpy(dst, (const char *)src + n / 2, n / 2);
	memcpy((char *)dst + n / 2, src, n / 2);
}

static size_t bytes_of(dcp_dtype dt, int ndim, const int64_t *shape)
{
	size_t n = ptz_dtype_size(dt);
	for (int d = 0; d < ndim; d++)
		n *= (size_t)shape[d];
	return n;
}

int fluxckpt_hf_export(const flux_config *c, int format, const char *name, dcp_dtype dtype,
		       int ndim, const int64_t *shape, const void *data, fluxckpt_hf_fn fn,
		       void *ctx, titan_err *err)
{
	if (format == FLUXCKPT_BFL) {
		char buf[160];
		return fn(ctx, bfl_name(name, 1, buf, sizeof buf), dtype, ndim, shape, data, err);
	}
	long nums[4];
	int nn;
	const fkey *k = find_tt(name, nums, &nn);
	if (k == NULL)
		return err_set(err, "%s: not a weight of torchtitan 0.3.0's FluxModel", name);
	size_t row = ndim > 0 && shape[0] > 0 ? bytes_of(dtype, ndim, shape) / (size_t)shape[0] : 0;
	int64_t at = 0;
	int rc = 0;
	for (int i = 0; rc == 0 && k[i].tt && !strcmp(k[i].tt, k->tt); i++) {
		char *hn = dcp_hf_format(k[i].hf, nums, nn);
		if (hn == NULL)
			return err_set(err, "out of memory");
		int64_t hs[DCP_MAX_DIM];
		memcpy(hs, shape, sizeof(int64_t) * (size_t)ndim);
		if (k->kind == K_PART) {
			hs[0] = part_rows(c, i);
			int last = !k[i + 1].tt || strcmp(k[i + 1].tt, k->tt);
			if (at + hs[0] > shape[0] || (last && at + hs[0] != shape[0]))
				rc = err_set(err, "%s: %lld rows, not q, k, v%s of hidden_size %lld", name,
					     (long long)shape[0], i == 3 || !last ? " and the MLP" : "",
					     (long long)c->hidden_size);
			else
				rc = fn(ctx, hn, dtype, ndim, hs, (const char *)data + (size_t)at * row,
					err);
			at += hs[0];
		} else if (k->kind == K_SWAP) {
			size_t n = bytes_of(dtype, ndim, shape);
			void *sw = ndim > 0 && shape[0] % 2 == 0 ? malloc(n + 1) : NULL;
			if (sw == NULL)
				rc = err_set(err, "%s: %s", name, ndim > 0 && shape[0] % 2 == 0
					     ? "out of memory" : "rows do not split into shift and scale");
			else {
				swap_halves(sw, data, n);
				rc = fn(ctx, hn, dtype, ndim, hs, sw, err);
			}
			free(sw);
		} else {
			rc = fn(ctx, hn, dtype, ndim, hs, data, err);
		}
		free(hn);
		if (k->kind != K_PART)
			break;
	}
	return rc;
}

/* Export ----------------------------------------------------------------- */

/* Keep a copy of each tensor an export hands on. */
static int keep_out(void *vctx, const char *name, dcp_dtype dt, int ndim, const int64_t *shape,
		    const void *data, titan_err *err)
{
	size_t nb = bytes_of(dt, ndim, shape);
	char *nm = strdup(name);
	void *copy = malloc(nb + 1);
	if (nm == NULL || copy == NULL) {
		free(nm);
		free(copy);
		return err_set(err, "out of memory");
	}
	memcpy(copy, data, nb);
	if (dcp_hf_out_push(vctx, nm, dt, ndim, shape, copy, err) == NULL) {
		free(nm);
		free(copy);
		return -1;
	}
	return 0;
}

/* diffusers' config.json of FluxTransformer2DModel for config c (its
 * from_pretrained needs one; 0.3.0's adapter writes none). */
static int write_config(const char *dir, const flux_config *c, titan_err *err)
{
	json_t *j = json_object(), *axes = json_array();
	for (int a = 0; a < 3; a++)
		json_array_append_new(axes, json_integer(c->axes_dim[a]));
	json_object_set_new(j, "_class_name", json_string("FluxTransformer2DModel"));
	json_object_set_new(j, "attention_head_dim", json_integer(c->hidden_size / c->num_heads));
	json_object_set_new(j, "axes_dims_rope", axes);
	json_object_set_new(j, "guidance_embeds", json_false());
	json_object_set_new(j, "in_channels", json_integer(c->in_channels));
	json_object_set_new(j, "joint_attention_dim", json_integer(c->context_in_dim));
	json_object_set_new(j, "num_attention_heads", json_integer(c->num_heads));
	json_object_set_new(j, "num_layers", json_integer(c->depth));
	json_object_set_new(j, "num_single_layers", json_integer(c->depth_single_blocks));
	json_object_set_new(j, "out_channels", json_integer(c->out_channels));
	json_object_set_new(j, "patch_size", json_integer(1));
	json_object_set_new(j, "pooled_projection_dim", json_integer(c->vec_in_dim));
	char *p = path_join(dir, "config.json");
	int rc = p ? tjson_dump_file(j, p, err) : err_set(err, "out of memory");
	free(p);
	json_decref(j);
	return rc;
}

/* A diffusers folder: the tensors of o in shards, and config.json. */
static int write_diffusers(const char *dir, const dcp_hf_out *o, uint64_t max_shard,
			   const flux_config *c, titan_err *err)
{
	static const char *const meta[] = {"format", "pt", NULL};
	if (st_write_sharded_as(dir, "diffusion_pytorch_model", o->items, o->n, max_shard, meta, err))
		return -1;
	return write_config(dir, c, err);
}

static int same_shape(int na, const int64_t *a, int nb, const int64_t *b)
{
	if (na != nb)
		return 0;
	for (int d = 0; d < na; d++)
		if (a[d] != b[d])
			return 0;
	return 1;
}

static void shape_err(titan_err *err, const char *path, const char *name, int na,
		      const int64_t *a, int nb, const int64_t *b)
{
	char x[96], y[96];
	dcp_shape_text(x, sizeof x, na, a);
	dcp_shape_text(y, sizeof y, nb, b);
	err_set(err, "%s: %s has shape %s, the model %s", path, name, x, y);
}

int fluxckpt_to_hf(const char *src, const char *out, const flux_config *c, int format,
		   dcp_dtype export_dtype, uint64_t max_shard, titan_err *err)
{
	if (format != FLUXCKPT_DIFFUSERS && format != FLUXCKPT_BFL)
		return err_set(err, "%s: the export's format is diffusers or bfl", out);
	size_t ol = strlen(out);
	if (format == FLUXCKPT_BFL && (ol < 12 || strcmp(out + ol - 12, ".safetensors") != 0))
		return err_set(err, "%s: BFL's layout is one .safetensors file", out);
	int np;
	flux_param *t = flux_param_table(c, &np, err);
	if (t == NULL)
		return -1;
	dcp_source *s;
	if (dcp_source_open(&s, src, err) != 0) {
		free(t);
		return -1;
	}
	dcp_hf_out o = {0};
	int rc = 0;
	/* nothing of the model's may be missing, nothing else be there */
	for (size_t i = 0; rc == 0 && i < dcp_source_count(s); i++) {
		const dcp_src_item *it = dcp_source_item(s, i);
		int known = 0;
		for (int k = 0; k < np && !known; k++)
			known = !strcmp(t[k].name, it->name);
		if (dcp_is_model_key(it->name) && !known)
			rc = err_set(err, "%s: %s is not a weight of the model (%s)", src, it->name,
				     c->name ? c->name : "its flavor");
	}
	for (int k = 0; rc == 0 && k < np; k++) {
		const dcp_src_item *it = dcp_source_find(s, t[k].name);
		if (it == NULL || it->kind != DCP_TENSOR) {
			rc = err_set(err, "%s: no tensor %s", src, t[k].name);
			break;
		}
		if (!same_shape(it->ndim, it->shape, t[k].ndim, t[k].shape)) {
			shape_err(err, src, it->name, it->ndim, it->shape, t[k].ndim, t[k].shape);
			rc = -1;
			break;
		}
		dcp_dtype dt = export_dtype != PTZ_NONE ? export_dtype : it->dtype;
		void *data = malloc(bytes_of(dt, it->ndim, it->shape) + 1);
		if (data == NULL)
			rc = err_set(err, "out of memory");
		else if ((rc = dcp_source_read(s, it, data, dt, err)) == 0)
			rc = fluxckpt_hf_export(c, format, it->name, dt, it->ndim, it->shape, data,
						keep_out, &o, err);
		free(data);
	}
	static const char *const meta[] = {"format", "pt", NULL};
	if (rc == 0 && format == FLUXCKPT_BFL)
		rc = st_write(out, o.items, o.n, meta, err);
	else if (rc == 0)
		rc = write_diffusers(out, &o, max_shard, c, err);
	dcp_hf_out_free(&o);
	dcp_source_close(s);
	free(t);
	return rc;
}

/* Import ----------------------------------------------------------------- */

/* path, or a diffusers pipeline's transformer/ folder (malloc'd). */
static char *transformer_dir(const char *path)
{
	struct stat st;
	size_t n = strlen(path) + 32;
	char *p = malloc(n);
	if (p == NULL)
		return NULL;
	snprintf(p, n, "%s/model_index.json", path);
	if (stat(p, &st) == 0)
		snprintf(p, n, "%s/transformer", path);
	else
		snprintf(p, n, "%s", path);
	return p;
}

static int format_of(const dcp_source *s, const char *path, titan_err *err)
{
	if (dcp_source_find(s, "x_embedder.weight"))
		return FLUXCKPT_DIFFUSERS;
	if (dcp_source_find(s, "img_in.weight"))
		return FLUXCKPT_BFL;
	return err_set(err, "%s: neither diffusers' x_embedder.weight nor BFL's img_in.weight: "
		       "not FLUX.1 transformer weights", path);
}

/* Open path (a pipeline's transformer/ when it is a pipeline). */
static int open_hf(const char *path, dcp_source **s, titan_err *err)
{
	char *dir = transformer_dir(path);
	if (dir == NULL)
		return err_set(err, "out of memory");
	int rc = dcp_source_open(s, dir, err);
	free(dir);
	return rc;
}

int fluxckpt_hf_format(const char *path, titan_err *err)
{
	dcp_source *s;
	if (open_hf(path, &s, err) != 0)
		return -1;
	int rc = format_of(s, path, err);
	dcp_source_close(s);
	return rc;
}

/* Read HF tensor `name` (it must have `rows` rows and the other dims of
 * want) into dst as dtype; mark it used. */
static int read_part(dcp_source *s, const char *path, const char *name, const flux_param *p,
		     int64_t rows, dcp_dtype dt, void *dst, unsigned char *used, titan_err *err)
{
	const dcp_src_item *it = dcp_source_find(s, name);
	if ((it == NULL || it->kind != DCP_TENSOR) && strcmp(name, p->name) != 0)
		return err_set(err, "%s: no tensor %s (for %s)", path, name, p->name);
	if (it == NULL || it->kind != DCP_TENSOR)
		return err_set(err, "%s: no tensor %s", path, name);
	int64_t want[DCP_MAX_DIM];
	memcpy(want, p->shape, sizeof(int64_t) * (size_t)p->ndim);
	want[0] = rows;
	if (!same_shape(it->ndim, it->shape, p->ndim, want)) {
		shape_err(err, path, name, it->ndim, it->shape, p->ndim, want);
		return -1;
	}
	if (it->dtype != PTZ_F32 && it->dtype != PTZ_BF16 && it->dtype != PTZ_F16 &&
	    it->dtype != PTZ_F64)
		return err_set(err, "%s: %s is stored as %s, not as a floating-point type", path, name,
			       ptz_dtype_st(it->dtype));
	used[it - dcp_source_item(s, 0)] = 1;
	return dcp_source_read(s, it, dst, dt, err);
}

/* The HF name of p's first (or only) tensor in format (malloc'd), its
 * table entry and numbers in *k, nums. */
static char *first_hf_name(const flux_param *p, int format, const fkey **k, long *nums, int *nn)
{
	char b[160];
	*k = NULL;
	if (format == FLUXCKPT_BFL)
		return strdup(bfl_name(p->name, 1, b, sizeof b));
	*k = find_tt(p->name, nums, nn);
	return *k ? dcp_hf_format((*k)->hf, nums, *nn) : NULL;
}

/* 0.3.0's tensor p from the source's one or several (a fused one's parts in
 * order, a swapped one swapped back), as *dtp into a new buffer (PTZ_NONE:
 * as its first HF tensor is stored; *dtp is set to it). */
static void *import_one(dcp_source *s, const char *path, const flux_config *c, int format,
			const flux_param *p, dcp_dtype *dtp, unsigned char *used, titan_err *err)
{
	if (*dtp == PTZ_NONE) {
		const fkey *k;
		long nums[4];
		int nn;
		char *hn = first_hf_name(p, format, &k, nums, &nn);
		const dcp_src_item *it = hn ? dcp_source_find(s, hn) : NULL;
		*dtp = it ? it->dtype : PTZ_F32; /* absent: read_part says so */
		free(hn);
	}
	dcp_dtype dt = *dtp;
	size_t nb = bytes_of(dt, p->ndim, p->shape);
	void *buf = malloc(nb + 1), *tmp = NULL;
	int rc = buf ? 0 : err_set(err, "out of memory");
	if (rc == 0 && format == FLUXCKPT_BFL) {
		char b[160];
		rc = read_part(s, path, bfl_name(p->name, 1, b, sizeof b), p, p->shape[0], dt, buf,
			       used, err);
	} else if (rc == 0) {
		long nums[4];
		int nn;
		const fkey *k = find_tt(p->name, nums, &nn);
		size_t row = nb / (size_t)p->shape[0];
		int64_t at = 0;
		if (k == NULL)
			rc = err_set(err, "%s: no diffusers name for %s", path, p->name);
		for (int i = 0; rc == 0 && k[i].tt && !strcmp(k[i].tt, k->tt); i++) {
			char *hn = dcp_hf_format(k[i].hf, nums, nn);
			int64_t rows = k->kind == K_PART ? part_rows(c, i) : p->shape[0];
			if (hn == NULL)
				rc = err_set(err, "out of memory");
			else if (at + rows > p->shape[0])
				rc = err_set(err, "%s: %s: its parts have more rows than the model's %s",
					     path, hn, p->name);
			else if (k->kind == K_SWAP && (tmp = malloc(nb + 1)) == NULL)
				rc = err_set(err, "out of memory");
			else
				rc = read_part(s, path, hn, p, rows, dt,
					       tmp ? tmp : (char *)buf + (size_t)at * row, used, err);
			free(hn);
			at += rows;
			if (k->kind != K_PART)
				break;
		}
		if (rc == 0 && tmp != NULL)
			swap_halves(buf, tmp, nb);
	}
	free(tmp);
	if (rc != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

int fluxckpt_hf_read(const char *path, const flux_config *c, int format, dcp_dtype dtype,
		     fluxckpt_tt_fn fn, void *ctx, titan_err *err)
{
	int np;
	flux_param *t = flux_param_table(c, &np, err);
	dcp_source *s = NULL;
	if (t == NULL || open_hf(path, &s, err) != 0) {
		free(t);
		return -1;
	}
	int rc = format == FLUXCKPT_AUTO ? format_of(s, path, err) : format;
	if (rc > 0)
		format = rc;
	size_t n = dcp_source_count(s);
	unsigned char *used = calloc(n + 1, 1);
	rc = rc < 0 ? -1 : used ? 0 : err_set(err, "out of memory");
	for (int k = 0; rc == 0 && k < np; k++) {
		dcp_dtype dt = dtype;
		void *data = import_one(s, path, c, format, &t[k], &dt, used, err);
		rc = data ? fn(ctx, t[k].name, dt, t[k].ndim, t[k].shape, data, err) : -1;
	}
	int guidance = 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		const char *name = dcp_source_item(s, i)->name;
		if (used[i])
			continue;
		if (is_guidance(name, format))
			guidance++;
		else
			rc = err_set(err, "%s: %s is not a weight of torchtitan 0.3.0's FluxModel "
				     "(%s)", path, name, c->name ? c->name : "its flavor");
	}
	if (rc == 0 && guidance)
		titan_warn("%s: %d tensor%s of FLUX.1-dev's guidance embedder (%s*) left out: "
			   "torchtitan 0.3.0's FluxModel has none", path, guidance, guidance == 1 ? "" : "s",
			   format == FLUXCKPT_BFL ? "guidance_in." : "time_text_embed.guidance_embedder.");
	free(used);
	free(t);
	dcp_source_close(s);
	return rc;
}

int fluxckpt_from_hf(const char *path, const char *out, const flux_config *c, int format,
		     dcp_dtype dtype, titan_err *err)
{
	dcp_collect x = {0};
	int rc = fluxckpt_hf_read(path, c, format, dtype, dcp_collect_tensor, &x, err);
	if (rc == 0)
		rc = dcp_save(out, x.items, x.n, NULL, err);
	dcp_collect_free(&x);
	return rc;
}

/* Config inference ----------------------------------------------------------- */

/* Dim d of a tensor the source must have (0 when absent). */
static int64_t dim_of(const dcp_source *s, const char *name, int d)
{
	const dcp_src_item *it = dcp_source_find(s, name);
	return it && it->kind == DCP_TENSOR && it->ndim > d ? it->shape[d] : 0;
}

/* Blocks counted from 0 while fmt (one %d) names a tensor. */
static int64_t count_blocks(const dcp_source *s, const char *fmt)
{
	char name[160];
	int64_t n = 0;
	for (;; n++) {
		snprintf(name, sizeof name, fmt, (int)n);
		if (!dcp_source_find(s, name))
			return n;
	}
}

int fluxckpt_infer_config(const char *path, int format, flux_config *c, titan_err *err)
{
	dcp_source *s;
	if (open_hf(path, &s, err) != 0)
		return -1;
	if (format == FLUXCKPT_AUTO && dcp_source_find(s, "img_in.weight") &&
	    dcp_source_find(s, "double_blocks.0.img_attn.norm.query_norm.weight"))
		format = 0; /* 0.3.0's own names (a checkpoint) */
	else if (format == FLUXCKPT_AUTO && (format = format_of(s, path, err)) < 0) {
		dcp_source_close(s);
		return -1;
	}
	int d = format == FLUXCKPT_DIFFUSERS;
	memset(c, 0, sizeof *c);
	c->name = NULL;
	c->hidden_size = dim_of(s, d ? "x_embedder.weight" : "img_in.weight", 0);
	c->in_channels = dim_of(s, d ? "x_embedder.weight" : "img_in.weight", 1);
	c->context_in_dim = dim_of(s, d ? "context_embedder.weight" : "txt_in.weight", 1);
	c->vec_in_dim = dim_of(s, d ? "time_text_embed.text_embedder.linear_1.weight"
				    : "vector_in.in_layer.weight", 1);
	c->out_channels = dim_of(s, d ? "proj_out.weight" : "final_layer.linear.weight", 0);
	c->depth = count_blocks(s, d ? "transformer_blocks.%d.norm1.linear.weight"
				     : "double_blocks.%d.img_mod.lin.weight");
	c->depth_single_blocks = count_blocks(s, d ? "single_transformer_blocks.%d.norm.linear.weight"
						   : "single_blocks.%d.modulation.lin.weight");
	int64_t f = dim_of(s, d ? "transformer_blocks.0.ff.net.0.proj.weight"
				: "double_blocks.0.img_mlp.0.weight", 0);
	const char *qn = d ? "transformer_blocks.0.attn.norm_q.weight"
		       : format == FLUXCKPT_BFL ? "double_blocks.0.img_attn.norm.query_norm.scale"
						: "double_blocks.0.img_attn.norm.query_norm.weight";
	int64_t hd = dim_of(s, qn, 0);
	dcp_source_close(s);
	if (c->hidden_size <= 0 || f <= 0 || hd <= 0 || c->hidden_size % hd != 0)
		return err_set(err, "%s: the model's sizes cannot be read from its tensors (hidden %lld, "
			       "MLP %lld, head dim %lld): give --flavor", path,
			       (long long)c->hidden_size, (long long)f, (long long)hd);
	c->num_heads = c->hidden_size / hd;
	/* int(hidden_size * mlp_ratio) must give the MLP's rows back */
	c->mlp_ratio = (double)f / (double)c->hidden_size;
	while ((int64_t)((double)c->hidden_size * c->mlp_ratio) < f)
		c->mlp_ratio = nextafter(c->mlp_ratio, INFINITY);
	c->axes_dim[0] = hd; /* no weight says how RoPE splits the head; no conversion needs it */
	c->theta = 10000;
	c->qkv_bias = 1;
	return flux_config_check(c, err) ? err_prefix(err, "%s", path) : 0;
}

/* The trainer's HF paths ----------------------------------------------------- */

typedef struct into_model {
	const flux_model *m;
	float *w; /* host image of the weights */
} into_model;

static int put_weight(void *vctx, const char *name, dcp_dtype dt, int ndim, const int64_t *shape,
		      void *data, titan_err *err)
{
	into_model *x = vctx;
	(void)ndim;
	(void)shape; /* fluxckpt_hf_read gives the model's */
	for (int i = 0; i < flux_param_count(x->m); i++)
		if (!strcmp(flux_param_at(x->m, i)->name, name)) {
			ptz_convert(x->w + fluxckpt_offset(x->m, i), PTZ_F32, data, dt,
				    (size_t)flux_param_at(x->m, i)->numel);
			free(data);
			return 0;
		}
	free(data);
	return err_set(err, "%s: not a weight of the model", name);
}

int fluxckpt_load_hf(const char *path, flux_model *m, int format, titan_err *err)
{
	into_model x = {.m = m, .w = malloc((size_t)flux_model_numel(m) * sizeof(float) + 1)};
	if (x.w == NULL)
		return err_set(err, "out of memory");
	backend *be = flux_model_backend(m);
	int rc = fluxckpt_hf_read(path, flux_model_config(m), format, PTZ_NONE, put_weight, &x, err);
	if (rc == 0)
		rc = backend_upload(be, BE_F32, flux_param_at(m, 0)->w, x.w, flux_model_numel(m), err) ||
		     be->ops->sync(be, err);
	free(x.w);
	return rc;
}

int fluxckpt_save_hf(const char *dir, const flux_model *m, dcp_dtype export_dtype,
		     const char *index_json, titan_err *err)
{
	dcp_dtype dt = export_dtype == PTZ_NONE ? PTZ_F32 : export_dtype;
	int64_t n = flux_model_numel(m);
	backend *be = flux_model_backend(m);
	float *w = malloc((size_t)n * sizeof(float) + 1);
	void *cast = dt != PTZ_F32 ? malloc((size_t)n * ptz_dtype_size(dt) + 1) : w;
	int rc = w && cast ? 0 : err_set(err, "out of memory");
	if (rc == 0)
		rc = backend_download(be, BE_F32, w, flux_param_at(m, 0)->w, n, err) ||
		     be->ops->sync(be, err);
	if (rc == 0 && cast != w)
		ptz_convert(cast, dt, w, PTZ_F32, (size_t)n);
	dcp_hf_out o = {0};
	size_t es = ptz_dtype_size(dt);
	for (int i = 0; rc == 0 && i < flux_param_count(m); i++) {
		const flux_param *p = flux_param_at(m, i);
		rc = fluxckpt_hf_export(flux_model_config(m), FLUXCKPT_DIFFUSERS, p->name, dt, p->ndim,
					p->shape, (char *)cast + (size_t)fluxckpt_offset(m, i) * es,
					keep_out, &o, err);
	}
	if (rc == 0)
		rc = dcp_hf_write(dir, o.items, o.n, index_json, err);
	dcp_hf_out_free(&o);
	if (cast != w)
		free(cast);
	free(w);
	return rc;
}
