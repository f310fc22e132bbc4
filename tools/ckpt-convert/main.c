/* titan-ckpt-convert: inspect, verify, reshard and convert checkpoints
 * (PyTorch DCP folders, torch.save files, safetensors, Hugging Face Llama). */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/cli.h"
#include "core/err.h"
#include "dcp/dcp.h"
#include "fluxckpt/fluxckpt.h"
#include "model/family.h"
#include "model/model.h"

#include "bench.h"

#include <dirent.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

enum {
	OPT_JSON = 256, OPT_MODEL_ONLY, OPT_EXPORT_DTYPE, OPT_CHUNKS, OPT_DIM, OPT_FLAVOR,
	OPT_MAX_SHARD, OPT_N_HEADS, OPT_N_KV_HEADS, OPT_TOL, OPT_VERBOSE, OPT_SIZE, OPT_ASYNC,
	OPT_MODEL, OPT_PHASE, OPT_NAMES, OPT_HEAD_DIM, OPT_MTP, OPT_FORMAT,
};

static const cli_option opts[] = {
	{"json", 0, CLI_NO_ARG, OPT_JSON, NULL, "info, diff: JSON on stdout"},
	{"model-only", 0, CLI_NO_ARG, OPT_MODEL_ONLY, NULL, "keep model weights only"},
	{"export-dtype", 0, CLI_ARG, OPT_EXPORT_DTYPE, "T", "cast float tensors (float32, bfloat16, float16)"},
	{"chunks", 0, CLI_ARG, OPT_CHUNKS, "N", "to DCP: split tensors into N rank files"},
	{"dim", 0, CLI_ARG, OPT_DIM, "D", "the dimension --chunks splits (default 0)"},
	{"model", 0, CLI_ARG, OPT_MODEL, "NAME", "to-hf, from-hf: model family (default llama3), or flux"},
	{"format", 0, CLI_ARG, OPT_FORMAT, "F", "flux: diffusers or bfl (to-hf: diffusers, bfl for a "
	 ".safetensors OUT; from-hf: from the keys)"},
	{"flavor", 0, CLI_ARG, OPT_FLAVOR, "F", "to-hf, from-hf: the family's flavor (debugmodel, 8B, ...)"},
	{"max-shard-size", 0, CLI_ARG, OPT_MAX_SHARD, "SIZE", "to-hf: bytes per shard (default 5G)"},
	{"num-mtp-layers", 0, CLI_ARG, OPT_MTP, "K", "from-hf: the flavor with K multi-token prediction "
	 "depths (DeepSeek V3's model.num_mtp_layers; default 0)"},
	{"n-heads", 0, CLI_ARG, OPT_N_HEADS, "N", "override the flavor's attention heads"},
	{"n-kv-heads", 0, CLI_ARG, OPT_N_KV_HEADS, "N", "override the flavor's kv heads"},
	{"tol", 0, CLI_ARG, OPT_TOL, "X", "diff: tolerated max abs difference (default 0)"},
	{"verbose", 'v', CLI_NO_ARG, OPT_VERBOSE, NULL, "progress on stderr"},
	{"size", 0, CLI_ARG, OPT_SIZE, "SIZE", "bench: bytes of state (default 1G)"},
	{"async", 0, CLI_NO_ARG, OPT_ASYNC, NULL, "bench: save on a background thread (after a copy)"},
	{"phase", 0, CLI_ARG, OPT_PHASE, "P", "bench: save, load (what a save left) or both (default)"},
	{"head-dim", 0, CLI_ARG, OPT_HEAD_DIM, "N", "the head dim of torchtitan 0.3.0's fused q/k/v "
	 "(qkv_linear.wqkv), to split its optimizer state into wq, wk, wv's or fuse it"},
	{"names", 0, CLI_ARG, OPT_NAMES, "V", "to DCP or a single file, from-hf: tensor names of torchtitan V "
	 "(0.2.2 or 0.3.0; default: the source's)"},
	{NULL, 0, 0, 0, NULL, NULL},
};

static const cli_spec spec = {
	"titan-ckpt-convert",
	"info PATH [--json]\n"
	"  verify DIR\n"
	"  dcp-to-single DIR OUT.pt|OUT.safetensors [--model-only] [--export-dtype T] [--names V]\n"
	"  single-to-dcp IN OUT [--chunks N [--dim D]] [--names V]\n"
	"  reshard DIR OUT --chunks N [--dim D] [--names V]\n"
	"  to-hf DIR OUT [--model NAME] --flavor F [--export-dtype T] [--max-shard-size SIZE]\n"
	"  from-hf HFDIR OUT [--model NAME] --flavor F [--export-dtype T] [--names V]\n"
	"          [--num-mtp-layers K]\n"
	"  to-hf|from-hf SRC OUT --model flux [--flavor F] [--format diffusers|bfl]\n"
	"          [--export-dtype T] [--max-shard-size SIZE]\n"
	"  diff A B [--tol X] [--json]\n"
	"  [mpirun -n N] bench DIR [--size SIZE] [--chunks N] [--async] [--phase P]",
	"Convert, reshard and check PyTorch distributed checkpoints.",
	opts,
	"PATH, A and B may be DCP folders, torch.save files, .safetensors files or\n"
	"Hugging Face folders.  See titan-ckpt-convert(1).",
};

typedef struct args {
	int json, model_only, chunks, dim, n_heads, n_kv_heads, verbose, mtp;
	dcp_dtype export_dtype;
	const char *model, *flavor;
	uint64_t max_shard;
	double tol;
	uint64_t size;
	int async, phase;
	int names; /* DCP_NAMES_* */
	int format; /* FLUXCKPT_*, -1 unset */
	int64_t head_dim;
} args;

static int cmd_info(const char *path, const args *a)
{
	titan_err err;
	dcp_source *s;
	/* as stored: a source reads under 0.2.2's names */
	if (dcp_source_open(&s, path, &err) || dcp_source_as_stored(s, &err))
		titan_die_err(&err);
	dcp_ckpt ck;
	int is_dcp = dcp_open(&ck, path, &err) == 0;
	json_t *arr = json_array();
	int64_t total = 0;
	for (size_t i = 0; i < dcp_source_count(s); i++) {
		const dcp_src_item *it = dcp_source_item(s, i);
		const dcp_entry *e = is_dcp ? dcp_find(&ck, it->name) : NULL;
		size_t nch = e ? e->n_chunks : 1;
		uint64_t bytes = 0;
		for (size_t k = 0; e && k < e->n_chunks; k++)
			bytes += e->chunks[k].length;
		if (!e && it->kind == DCP_TENSOR)
			bytes = (uint64_t)(ptz_dtype_size(it->dtype));
		if (!e && it->kind == DCP_TENSOR)
			for (int d = 0; d < it->ndim; d++)
				bytes *= (uint64_t)it->shape[d];
		total += (int64_t)bytes;
		if (a->json) {
			json_t *o = json_object(), *sh = json_array(), *chs = json_array();
			json_object_set_new(o, "name", json_string(it->name));
			json_object_set_new(o, "kind", json_string(it->kind == DCP_TENSOR ? "tensor" : "bytes"));
			if (it->kind == DCP_TENSOR) {
				json_object_set_new(o, "dtype", json_string(ptz_dtype_torch(it->dtype)));
				for (int d = 0; d < it->ndim; d++)
					json_array_append_new(sh, json_integer(it->shape[d]));
			}
			json_object_set_new(o, "shape", sh);
			for (size_t k = 0; e && e->kind == DCP_TENSOR && k < e->n_chunks; k++) {
				json_t *c = json_object(), *of = json_array(), *sz = json_array();
				for (int d = 0; d < e->ndim; d++) {
					json_array_append_new(of, json_integer(e->chunks[k].offsets[d]));
					json_array_append_new(sz, json_integer(e->chunks[k].sizes[d]));
				}
				json_object_set_new(c, "offsets", of);
				json_object_set_new(c, "sizes", sz);
				json_object_set_new(c, "file", json_string(e->chunks[k].file));
				json_object_set_new(c, "offset", json_integer((json_int_t)e->chunks[k].offset));
				json_object_set_new(c, "length", json_integer((json_int_t)e->chunks[k].length));
				json_array_append_new(chs, c);
			}
			json_object_set_new(o, "chunks", chs);
			json_object_set_new(o, "bytes", json_integer((json_int_t)bytes));
			json_array_append_new(arr, o);
		} else {
			char sh[160];
			dcp_shape_text(sh, sizeof sh, it->ndim, it->shape);
			printf("%-60s %-8s %-10s %-24s %4zu chunk%s %12" PRIu64 " bytes\n", it->name,
			       it->kind == DCP_TENSOR ? "tensor" : "bytes",
			       it->kind == DCP_TENSOR ? ptz_dtype_torch(it->dtype) : "-",
			       it->kind == DCP_TENSOR ? sh : "-", nch, nch == 1 ? " " : "s", bytes);
		}
	}
	if (a->json) {
		json_t *root = json_object();
		json_object_set_new(root, "path", json_string(path));
		json_object_set_new(root, "format", json_string(is_dcp ? "dcp" : "file"));
		if (is_dcp)
			json_object_set_new(root, "version", ck.version ? json_string(ck.version) : json_null());
		json_object_set_new(root, "items", arr);
		json_object_set_new(root, "total_bytes", json_integer(total));
		json_dumpf(root, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(root);
	} else {
		json_decref(arr);
		printf("%zu items, %" PRId64 " bytes%s%s\n", dcp_source_count(s), total,
		       is_dcp ? ", DCP version " : "", is_dcp ? (ck.version ? ck.version : "none (torch <= 2.3)") : "");
	}
	if (is_dcp)
		dcp_close(&ck);
	dcp_source_close(s);
	return 0;
}

static int cmd_verify(const char *dir)
{
	titan_err err;
	dcp_ckpt ck;
	if (dcp_open(&ck, dir, &err) || dcp_verify(&ck, &err))
		titan_die_err(&err);
	size_t chunks = 0;
	for (size_t i = 0; i < ck.n; i++)
		chunks += ck.entries[i].n_chunks;
	printf("%s: ok, %zu keys, %zu stored items\n", dir, ck.n, chunks);
	dcp_close(&ck);
	return 0;
}

static int diff_one(dcp_source *sa, dcp_source *sb, const dcp_src_item *x, const dcp_src_item *y,
		    double *mabs, double *mrel, titan_err *err)
{
	size_t n = 1;
	for (int d = 0; d < x->ndim; d++)
		n *= (size_t)x->shape[d];
	double *p = malloc((n ? n : 1) * sizeof *p), *q = malloc((n ? n : 1) * sizeof *q);
	int rc = p && q ? 0 : err_set(err, "out of memory");
	if (rc == 0)
		rc = dcp_source_read(sa, x, p, PTZ_F64, err) || dcp_source_read(sb, y, q, PTZ_F64, err);
	*mabs = *mrel = 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		double d = fabs(p[i] - q[i]);
		if (isnan(p[i]) != isnan(q[i]))
			d = INFINITY;
		else if (isnan(p[i]))
			d = 0;
		else if (p[i] == q[i])
			d = 0;
		double r = d == 0 ? 0 : d / fmax(fabs(p[i]), fabs(q[i]));
		*mabs = fmax(*mabs, d);
		*mrel = fmax(*mrel, r);
	}
	free(p);
	free(q);
	return rc;
}

static int cmd_diff(const char *pa, const char *pb, const args *a)
{
	titan_err err;
	dcp_source *sa, *sb;
	if (dcp_source_open(&sa, pa, &err) || dcp_source_open(&sb, pb, &err) ||
	    (a->head_dim && (dcp_source_set_head_dim(sa, a->head_dim, &err) ||
			     dcp_source_set_head_dim(sb, a->head_dim, &err))))
		titan_die_err(&err);
	int bad = 0;
	json_t *arr = json_array();
	for (size_t i = 0; i < dcp_source_count(sa); i++) {
		const dcp_src_item *x = dcp_source_item(sa, i), *y = dcp_source_find(sb, x->name);
		const char *status = "ok";
		double mabs = 0, mrel = 0;
		if (!y) {
			status = "only-in-A";
		} else if (x->kind != y->kind) {
			status = "kind-differs";
		} else if (x->kind == DCP_BYTES) {
			uint8_t *p, *q;
			size_t n, m;
			if (dcp_source_bytes(sa, x, &p, &n, &err) || dcp_source_bytes(sb, y, &q, &m, &err))
				titan_die_err(&err);
			/* Streams differ in their serialization ids; compare the values. */
			pk_val *u, *v;
			pk_arena *ua, *va;
			char ru[4096], rv[4096];
			if (dcp_value_load(p, n, &u, &ua, &err) || dcp_value_load(q, m, &v, &va, &err))
				titan_die_err(&err);
			pk_repr(u, ru, sizeof ru);
			pk_repr(v, rv, sizeof rv);
			if (strcmp(ru, rv))
				status = "value-differs";
			pk_free(ua);
			pk_free(va);
			free(p);
			free(q);
		} else if (x->ndim != y->ndim || memcmp(x->shape, y->shape, sizeof(int64_t) * (size_t)x->ndim)) {
			status = "shape-differs";
		} else {
			if (diff_one(sa, sb, x, y, &mabs, &mrel, &err))
				titan_die_err(&err);
			if (mabs > a->tol)
				status = "differs";
		}
		if (strcmp(status, "ok"))
			bad = 1;
		if (a->json) {
			json_t *o = json_object();
			json_object_set_new(o, "name", json_string(x->name));
			json_object_set_new(o, "status", json_string(status));
			json_object_set_new(o, "max_abs", json_real(mabs));
			json_object_set_new(o, "max_rel", json_real(mrel));
			json_array_append_new(arr, o);
		} else {
			printf("%-60s %-14s max_abs %.6g max_rel %.6g\n", x->name, status, mabs, mrel);
		}
	}
	for (size_t i = 0; i < dcp_source_count(sb); i++) {
		const dcp_src_item *y = dcp_source_item(sb, i);
		if (dcp_source_find(sa, y->name))
			continue;
		bad = 1;
		if (a->json) {
			json_t *o = json_object();
			json_object_set_new(o, "name", json_string(y->name));
			json_object_set_new(o, "status", json_string("only-in-B"));
			json_array_append_new(arr, o);
		} else {
			printf("%-60s only-in-B\n", y->name);
		}
	}
	if (a->json) {
		json_dumpf(arr, stdout, JSON_INDENT(2));
		putchar('\n');
	}
	json_decref(arr);
	dcp_source_close(sa);
	dcp_source_close(sb);
	return bad ? TITAN_EXIT_FAIL : 0;
}

static dcp_hf_model hf_model(const args *a)
{
	dcp_hf_model m;
	memset(&m, 0, sizeof m);
	const model_family *fam = model_family_find(a->model);
	if (!fam)
		cli_usage_error(&spec, "--model: no model family '%s' (see titan-train --list-flavors)",
				a->model);
	const llama_args *f = model_family_flavor(fam, a->flavor);
	if (!f)
		cli_usage_error(&spec, "--flavor: '%s' is not a flavor of %s", a->flavor, fam->name);
	static llama_args with_mtp; /* the flavor with the depths from-hf checks */
	if (a->mtp > 0 && strcmp(fam->name, "deepseek_v3") != 0)
		cli_usage_error(&spec, "--num-mtp-layers: multi-token prediction is deepseek_v3's "
				"(torchtitan 0.3.0), not %s's", fam->name);
	if (a->mtp > 0) {
		with_mtp = *f;
		with_mtp.mtp_layers = a->mtp;
		with_mtp.mtp_scale = 0.3; /* 0.3.0's MTPLoss default; no part of the weights */
		f = &with_mtp;
	}
	m.n_heads = a->n_heads ? a->n_heads : f->n_heads;
	m.n_kv_heads = a->n_kv_heads ? a->n_kv_heads : (a->n_heads ? a->n_heads : f->n_kv_heads);
	if (a->n_kv_heads)
		m.n_kv_heads = a->n_kv_heads;
	/* Dims come from the checkpoint; a named flavor's dim is checked unless
	 * the heads were overridden (a custom small model). */
	if (!a->n_heads) {
		m.dim = f->dim;
		m.n_layers = f->n_layers;
	}
	m.norm_eps = f->norm_eps;
	m.rope_theta = f->rope_theta;
	m.rope_scale_factor = f->rope_scale_factor;
	m.tied = f->tied_embeddings;
	m.max_seq_len = f->max_seq_len;
	m.keys = fam->hf_keys;
	m.args = f;
	m.config = fam->hf_config;
	m.ffn_hidden = flavor_ffn_hidden(f);
	m.top_k = f->moe.top_k;
	m.route_norm = f->moe.route_norm;
	return m;
}

/* Flux's to-hf and from-hf (lib/fluxckpt): the flavor's config, or the
 * sizes the source's tensors give. */
static int cmd_flux_hf(int to_hf, const char *src, const char *out, const args *a)
{
	titan_err err;
	flux_config c;
	if (a->flavor) {
		const flux_config *f = flux_flavor(a->flavor);
		if (!f) {
			char names[128];
			flux_flavor_names(names, sizeof names);
			cli_usage_error(&spec, "--flavor: '%s' is not a Flux flavor (%s)", a->flavor,
					names);
		}
		c = *f;
	} else if (fluxckpt_infer_config(src, to_hf ? FLUXCKPT_AUTO : a->format < 0 ? FLUXCKPT_AUTO
										       : a->format,
					 &c, &err) != 0) {
		titan_die_err(&err);
	}
	size_t l = strlen(out);
	int format = a->format >= 0 ? a->format
		   : to_hf ? (l > 12 && !strcmp(out + l - 12, ".safetensors") ? FLUXCKPT_BFL
									 : FLUXCKPT_DIFFUSERS)
			   : FLUXCKPT_AUTO;
	int rc = to_hf ? fluxckpt_to_hf(src, out, &c, format, a->export_dtype, a->max_shard, &err)
		       : fluxckpt_from_hf(src, out, &c, format, a->export_dtype, &err);
	if (rc)
		titan_die_err(&err);
	return 0;
}

static void need(int argc, int have, int want, const char *cmd)
{
	if (have != want)
		cli_usage_error(&spec, "%s takes %d operand%s", cmd, want - 1, want == 2 ? "" : "s");
	(void)argc;
}

int main(int argc, char **argv)
{
	cli_state st;
	cli_begin(&st, &spec);
	args a = {.max_shard = (uint64_t)5 << 30, .size = (uint64_t)1 << 30, .model = "llama3",
		  .format = -1};
	int c;
	while ((c = cli_next(&st, argc, argv)) != -1) {
		switch (c) {
		case OPT_JSON: a.json = 1; break;
		case OPT_MODEL_ONLY: a.model_only = 1; break;
		case OPT_EXPORT_DTYPE:
			a.export_dtype = ptz_dtype_parse(st.arg);
			if (a.export_dtype != PTZ_F32 && a.export_dtype != PTZ_BF16 &&
			    a.export_dtype != PTZ_F16 && a.export_dtype != PTZ_F64)
				cli_usage_error(&spec, "--export-dtype: '%s' is not a float type", st.arg);
			break;
		case OPT_CHUNKS: a.chunks = (int)cli_int(&spec, "--chunks", st.arg, 1, 65536); break;
		case OPT_DIM: a.dim = (int)cli_int(&spec, "--dim", st.arg, 0, DCP_MAX_DIM - 1); break;
		case OPT_FLAVOR: a.flavor = st.arg; break;
		case OPT_MODEL: a.model = st.arg; break;
		case OPT_FORMAT:
			a.format = !strcmp(st.arg, "diffusers") ? FLUXCKPT_DIFFUSERS
				 : !strcmp(st.arg, "bfl") ? FLUXCKPT_BFL : -2;
			if (a.format == -2)
				cli_usage_error(&spec, "--format: '%s' is not diffusers or bfl", st.arg);
			break;
		case OPT_MAX_SHARD: a.max_shard = cli_size(&spec, "--max-shard-size", st.arg); break;
		case OPT_MTP: a.mtp = (int)cli_int(&spec, "--num-mtp-layers", st.arg, 0, 16); break;
		case OPT_N_HEADS: a.n_heads = (int)cli_int(&spec, "--n-heads", st.arg, 1, 1 << 20); break;
		case OPT_HEAD_DIM: a.head_dim = cli_int(&spec, "--head-dim", st.arg, 1, 1 << 20); break;
		case OPT_N_KV_HEADS: a.n_kv_heads = (int)cli_int(&spec, "--n-kv-heads", st.arg, 1, 1 << 20); break;
		case OPT_TOL: a.tol = cli_double(&spec, "--tol", st.arg, 0, INFINITY); break;
		case OPT_VERBOSE: a.verbose = 1; break;
		case OPT_SIZE: a.size = cli_size(&spec, "--size", st.arg); break;
		case OPT_ASYNC: a.async = 1; break;
		case OPT_NAMES:
			a.names = !strcmp(st.arg, "0.2.2") ? DCP_NAMES_022
				: !strcmp(st.arg, "0.3.0") ? DCP_NAMES_030 : -1;
			if (a.names < 0)
				cli_usage_error(&spec, "--names: '%s' is not 0.2.2 or 0.3.0", st.arg);
			break;
		case OPT_PHASE:
			a.phase = !strcmp(st.arg, "save") ? BENCH_SAVE : !strcmp(st.arg, "load") ? BENCH_LOAD
				: !strcmp(st.arg, "both") ? BENCH_BOTH : -1;
			if (a.phase < 0)
				cli_usage_error(&spec, "--phase: '%s' is not save, load or both", st.arg);
			break;
		}
	}
	int nops = argc - st.optind;
	char **op = argv + st.optind;
	if (nops < 1)
		cli_usage_error(&spec, "missing command");
	const char *cmd = op[0];
	titan_err err;
	dcp_convert_opts co = {a.model_only, a.export_dtype, a.chunks, a.dim, a.verbose, a.names,
			       a.head_dim};
	if (!strcmp(cmd, "info")) {
		need(argc, nops, 2, cmd);
		return cli_stdout_status(cmd_info(op[1], &a));
	}
	if (!strcmp(cmd, "verify")) {
		need(argc, nops, 2, cmd);
		return cli_stdout_status(cmd_verify(op[1]));
	}
	if (!strcmp(cmd, "bench")) {
		need(argc, nops, 2, cmd);
		if (a.size < 4096)
			cli_usage_error(&spec, "--size must be at least 4K");
		bench_opts bo = {a.size, a.chunks, a.async, a.phase};
		return cli_stdout_status(ckpt_bench(op[1], &bo));
	}
	if (!strcmp(cmd, "diff")) {
		need(argc, nops, 3, cmd);
		return cli_stdout_status(cmd_diff(op[1], op[2], &a));
	}
	if (!strcmp(cmd, "dcp-to-single")) {
		need(argc, nops, 3, cmd);
		size_t l = strlen(op[2]), skipped = 0;
		int rc = l > 12 && !strcmp(op[2] + l - 12, ".safetensors")
				 ? dcp_convert_to_safetensors(op[1], op[2], &co, &skipped, &err)
				 : dcp_convert_to_torch(op[1], op[2], &co, &err);
		if (rc)
			titan_die_err(&err);
		if (skipped)
			titan_warn("%s: %zu non-tensor items left out (safetensors holds tensors only)", op[2], skipped);
		return 0;
	}
	if (!strcmp(cmd, "single-to-dcp") || !strcmp(cmd, "reshard")) {
		need(argc, nops, 3, cmd);
		if (!strcmp(cmd, "reshard") && !a.chunks)
			cli_usage_error(&spec, "reshard needs --chunks N");
		if (dcp_convert_to_dcp(op[1], op[2], &co, &err))
			titan_die_err(&err);
		return 0;
	}
	if ((!strcmp(cmd, "to-hf") || !strcmp(cmd, "from-hf")) && !strcmp(a.model, "flux")) {
		need(argc, nops, 3, cmd);
		return cmd_flux_hf(!strcmp(cmd, "to-hf"), op[1], op[2], &a);
	}
	if (a.format != -1)
		cli_usage_error(&spec, "--format is --model flux's");
	if (!strcmp(cmd, "to-hf") || !strcmp(cmd, "from-hf")) {
		need(argc, nops, 3, cmd);
		if (!a.flavor)
			cli_usage_error(&spec, "%s needs --flavor", cmd);
		dcp_hf_model m = hf_model(&a);
		/* A flavor taken as it is names every weight and its shape: from-hf
		 * then refuses what titan-train would (the same check, dcp_hf_read's);
		 * the model is built without storage. */
		backend *be = NULL;
		model *fm = NULL;
		int rc = 0;
		if (!strcmp(cmd, "from-hf") && !a.n_heads && !a.n_kv_heads) {
			be = backend_cpu_create(1, &err);
			fm = be ? model_create_unbound(be, m.args, 0, &err) : NULL;
			rc = fm ? 0 : -1;
			m.model = fm;
		}
		if (rc == 0)
			rc = !strcmp(cmd, "to-hf")
				     ? dcp_to_hf(op[1], op[2], &m, a.export_dtype, a.max_shard, &err)
				     : dcp_from_hf(op[1], op[2], &m, a.export_dtype, a.names, &err);
		model_free(fm);
		if (be)
			backend_free(be);
		if (rc)
			titan_die_err(&err);
		return 0;
	}
	cli_usage_error(&spec, "unknown command '%s'", cmd);
}
