/* titan-encode: images and captions in, Flux training records out.
 * See titan-encode(1) and titan-formats(5), FLUX RECORDS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/afile.h"
#include "core/cli.h"
#include "core/err.h"
#include "core/progress.h"
#include "encode.h"
#include "fluxin/fluxin.h"
#include "fluxrec/fluxrec.h"
#include "tok/tok.h"

enum {
	OPT_T5 = 256, OPT_CLIP, OPT_T5_TOK, OPT_CLIP_TOK, OPT_AE, OPT_AE_CONFIG, OPT_SIZE,
	OPT_T5_LEN, OPT_CLIP_LEN, OPT_CROP, OPT_SEED, OPT_DTYPE, OPT_MODEL_DTYPE, OPT_PIXELS,
	OPT_BATCH, OPT_THREADS, OPT_FORMAT, OPT_LIMIT, OPT_QUIET, OPT_OUT,
};

static const cli_option options[] = {
	{"t5", 0, CLI_ARG, OPT_T5, "DIR", "T5 encoder folder (config.json, safetensors)"},
	{"clip", 0, CLI_ARG, OPT_CLIP, "DIR", "CLIP text model folder"},
	{"t5-tokenizer", 0, CLI_ARG, OPT_T5_TOK, "PATH", "T5 tokenizer.json (default: in --t5)"},
	{"clip-tokenizer", 0, CLI_ARG, OPT_CLIP_TOK, "PATH", "CLIP tokenizer.json (default: in --clip)"},
	{"autoencoder", 0, CLI_ARG, OPT_AE, "FILE", "FLUX ae.safetensors: store its moments"},
	{"ae-config", 0, CLI_ARG, OPT_AE_CONFIG, "FILE", "the autoencoder's config (JSON)"},
	{"image-size", 0, CLI_ARG, OPT_SIZE, "N", "square side of the crops (default 256)"},
	{"t5-len", 0, CLI_ARG, OPT_T5_LEN, "N", "T5 tokens per caption (default 256)"},
	{"clip-len", 0, CLI_ARG, OPT_CLIP_LEN, "N", "CLIP tokens per caption (default 77)"},
	{"crop", 0, CLI_ARG, OPT_CROP, "HOW", "random (default, from --seed) or center"},
	{"seed", 0, CLI_ARG, OPT_SEED, "N", "the random crops' seed (default 0)"},
	{"dtype", 0, CLI_ARG, OPT_DTYPE, "T", "stored encodings: float32 (default) or bfloat16"},
	{"model-dtype", 0, CLI_ARG, OPT_MODEL_DTYPE, "T", "encoders' numerics: float32 or bfloat16"},
	{"pixels", 0, CLI_NO_ARG, OPT_PIXELS, NULL, "keep the RGB crops beside the moments"},
	{"format", 'f', CLI_ARG, OPT_FORMAT, "FMT", "inputs: wds (webdataset tar, default) or coco"},
	{"batch", 'b', CLI_ARG, OPT_BATCH, "N", "samples per encoder batch (default 8)"},
	{"threads", 'j', CLI_ARG, OPT_THREADS, "N", "threads (default: all cores)"},
	{"limit", 'n', CLI_ARG, OPT_LIMIT, "N", "stop after N input samples"},
	{"output", 'o', CLI_ARG, OPT_OUT, "FILE", "write FILE (atomically) instead of stdout"},
	{"quiet", 'q', CLI_NO_ARG, OPT_QUIET, NULL, "no progress, no summary, no skip lines"},
	{NULL, 0, 0, 0, NULL, NULL},
};

static const cli_spec spec = {
	.prog = "titan-encode",
	.synopsis = "--t5 DIR --clip DIR [--autoencoder FILE] [options] [FILE...]",
	.summary = "Encode image-caption samples (webdataset tars, COCO parquet) into Flux records.",
	.opts = options,
	.epilog = "Inputs default to stdin ('-'); the record stream goes to stdout, for titan-shard.\n",
};

typedef struct args {
	fluxin_opts fo;
	int format, batch, threads, quiet;
	uint64_t limit;
	const char *out;
	char **files;
	int n_files;
} args;

/* Counts for the summary; refusals come from the tar reader's callback. */
typedef struct tally {
	uint64_t read, records, refused;
	uint64_t skipped[FLUXIN_N_STATUS];
	int quiet;
	progress *pg;
} tally;

static uint32_t parse_dtype(const char *opt, const char *a)
{
	if (strcmp(a, "float32") == 0 || strcmp(a, "f32") == 0)
		return FLUXREC_F32;
	if (strcmp(a, "bfloat16") == 0 || strcmp(a, "bf16") == 0)
		return FLUXREC_BF16;
	cli_usage_error(&spec, "%s must be float32 or bfloat16, not '%s'", opt, a);
}

static void parse_args(int argc, char **argv, args *a)
{
	cli_state st;
	cli_begin(&st, &spec);
	*a = (args){.fo = {.crop_random = 1}, .batch = 8};
	fluxin_opts *o = &a->fo;
	int c;
	while ((c = cli_next(&st, argc, argv)) != -1) {
		const char *s = st.arg;
		switch (c) {
		case OPT_T5: o->t5 = s; break;
		case OPT_CLIP: o->clip = s; break;
		case OPT_T5_TOK: o->t5_tokenizer = s; break;
		case OPT_CLIP_TOK: o->clip_tokenizer = s; break;
		case OPT_AE: o->autoencoder = s; break;
		case OPT_AE_CONFIG: o->ae_config = s; break;
		case OPT_SIZE: o->image_size = (int)cli_int(&spec, "--image-size", s, 1, 1 << 14); break;
		case OPT_T5_LEN: o->t5_len = (int)cli_int(&spec, "--t5-len", s, 2, 1 << 14); break;
		case OPT_CLIP_LEN: o->clip_len = (int)cli_int(&spec, "--clip-len", s, 2, 1 << 14); break;
		case OPT_CROP:
			if (strcmp(s, "random") == 0 || strcmp(s, "center") == 0)
				o->crop_random = s[0] == 'r';
			else
				cli_usage_error(&spec, "--crop must be random or center, not '%s'", s);
			break;
		case OPT_SEED: o->seed = (uint64_t)cli_int(&spec, "--seed", s, 0, INT64_MAX); break;
		case OPT_DTYPE: o->dtype = parse_dtype("--dtype", s); break;
		case OPT_MODEL_DTYPE: o->model_dtype = parse_dtype("--model-dtype", s); break;
		case OPT_PIXELS: o->pixels = 1; break;
		case OPT_FORMAT:
			if (strcmp(s, "wds") == 0 || strcmp(s, "coco") == 0)
				a->format = s[0] == 'c' ? SRC_COCO : SRC_WDS;
			else
				cli_usage_error(&spec, "--format must be wds or coco, not '%s'", s);
			break;
		case OPT_BATCH: a->batch = (int)cli_int(&spec, "--batch", s, 1, 4096); break;
		case OPT_THREADS: a->threads = (int)cli_int(&spec, "--threads", s, 1, 1024); break;
		case OPT_LIMIT: a->limit = (uint64_t)cli_int(&spec, "--limit", s, 1, INT64_MAX); break;
		case OPT_OUT: a->out = s; break;
		case OPT_QUIET: a->quiet = 1; break;
		default: cli_usage_error(&spec, "unhandled option");
		}
	}
	if (o->t5 == NULL || o->clip == NULL)
		cli_usage_error(&spec, "--t5 DIR and --clip DIR are required");
	if (o->ae_config && !o->autoencoder)
		cli_usage_error(&spec, "--ae-config needs --autoencoder");
	static char *dash[] = {"-"};
	a->files = st.optind < argc ? argv + st.optind : dash;
	a->n_files = st.optind < argc ? argc - st.optind : 1;
	int stdin_uses = 0;
	for (int i = 0; i < a->n_files; i++)
		stdin_uses += strcmp(a->files[i], "-") == 0;
	if (stdin_uses > 1)
		cli_usage_error(&spec, "stdin ('-') given more than once");
	if (stdin_uses && isatty(0))
		cli_usage_error(&spec, "standard input is a terminal; pipe a webdataset tar "
				"(titan-hf-fetch --stdout) or name files");
	if (a->out == NULL && isatty(1))
		cli_usage_error(&spec, "standard output is a terminal; pipe it to titan-shard or "
				"use --output FILE");
}

/* A line on stderr that leaves the progress bar's line clean. */
static void note(tally *t, const char *msg)
{
	if (t->quiet)
		return;
	if (t->pg->drawn)
		fputs("\r\033[K", stderr);
	titan_warn("%s", msg);
}

static void on_refused(void *ctx, const char *msg)
{
	tally *t = ctx;
	t->refused++;
	char line[1200];
	snprintf(line, sizeof line, "refused: %s", msg);
	note(t, line);
}

/* The batch through the encoders; its records out in input order. */
static int flush(fluxin *f, slot *slots, int n, fluxin_sample *smp, uint8_t *recs, int *status,
		 titan_err *why, fluxrec_writer *w, tally *t, titan_err *err)
{
	for (int i = 0; i < n; i++)
		smp[i] = (fluxin_sample){.key = slots[i].key ? slots[i].key : "", .index = slots[i].index,
					 .image = slots[i].image, .image_bytes = slots[i].image_bytes,
					 .caption = slots[i].caption,
					 .caption_bytes = slots[i].caption_bytes};
	if (fluxin_encode(f, smp, n, recs, status, why, err) != 0)
		return -1;
	size_t rb = fluxin_header(f)->record_bytes;
	for (int i = 0; i < n; i++) {
		if (status[i] != FLUXIN_OK) {
			t->skipped[status[i]]++;
			char line[1200];
			snprintf(line, sizeof line, "skipped %s", why[i].msg);
			note(t, line);
			continue;
		}
		if (fluxrec_write(w, recs + (size_t)i * rb, err) != 0)
			return -1;
		t->records++;
	}
	progress_add(t->pg, (uint64_t)n);
	return 0;
}

/* Every input through the encoders into w. */
static int run(const args *a, fluxin *f, fluxrec_writer *w, tally *t, titan_err *err)
{
	int B = a->batch;
	slot *slots = calloc((size_t)B, sizeof *slots);
	fluxin_sample *smp = calloc((size_t)B, sizeof *smp);
	int *status = calloc((size_t)B, sizeof *status);
	titan_err *why = calloc((size_t)B, sizeof *why);
	uint8_t *recs = malloc((size_t)B * fluxin_header(f)->record_bytes);
	int rc = slots && smp && status && why && recs ? 0 : err_set(err, "out of memory");
	int n = 0;
	for (int i = 0; rc == 0 && i < a->n_files && (!a->limit || t->read < a->limit); i++) {
		source *src = source_open(a->files[i], a->format, on_refused, t, err);
		if (src == NULL) {
			rc = -1;
			break;
		}
		int r;
		while (rc == 0 && (!a->limit || t->read < a->limit) &&
		       (r = source_next(src, &slots[n], err)) != 0) {
			if (r < 0) {
				rc = -1;
				break;
			}
			slots[n++].index = t->read++;
			if (n == B) {
				rc = flush(f, slots, n, smp, recs, status, why, w, t, err);
				n = 0;
			}
		}
		source_close(src);
	}
	if (rc == 0 && n > 0)
		rc = flush(f, slots, n, smp, recs, status, why, w, t, err);
	for (int i = 0; slots && i < B; i++)
		slot_clear(&slots[i]);
	free(slots);
	free(smp);
	free(status);
	free(why);
	free(recs);
	return rc;
}

static void summary(const tally *t, fluxin *f, double secs, int wds)
{
	uint64_t skipped = 0;
	char parts[512] = "";
	for (int s = 1; s < FLUXIN_N_STATUS; s++) {
		skipped += t->skipped[s];
		if (t->skipped[s]) {
			size_t k = strlen(parts);
			snprintf(parts + k, sizeof parts - k, "%s%llu %s", k ? ", " : "",
				 (unsigned long long)t->skipped[s], fluxin_status_name(s));
		}
	}
	char refused[64] = "";
	if (wds)
		snprintf(refused, sizeof refused, ", %llu tar members refused",
			 (unsigned long long)t->refused);
	titan_warn("%llu samples read: %llu records, %llu skipped%s%s%s%s",
		   (unsigned long long)t->read, (unsigned long long)t->records,
		   (unsigned long long)skipped, skipped ? " (" : "", parts, skipped ? ")" : "",
		   refused);
	fluxin_times tm;
	fluxin_get_times(f, &tm);
	titan_warn("throughput: %.3f images/s (%llu samples in %.2f s; images and tokens %.2f s, "
		   "T5 %.2f s, CLIP %.2f s, autoencoder %.2f s)",
		   secs > 0 ? (double)t->read / secs : 0.0, (unsigned long long)t->read, secs,
		   tm.prepare, tm.t5, tm.clip, tm.ae);
}

int main(int argc, char **argv)
{
	titan_set_progname("titan-encode");
	args a;
	parse_args(argc, argv, &a);
	titan_err err;
	backend *be = backend_cpu_create(a.threads, &err);
	if (be == NULL)
		titan_die_err(&err);
	char cache[4096];
	a.fo.tok_cache = tok_cache_dir(cache, sizeof cache);
	fluxin *f = fluxin_open(be, &a.fo, &err);
	if (f == NULL)
		titan_die_err(&err);
	afile af;
	FILE *out = stdout;
	if (a.out && strcmp(a.out, "-") != 0) {
		if (afile_open(&af, a.out, &err) != 0)
			titan_die_err(&err);
		out = af.fp;
	}
	fluxrec_writer *w = fluxrec_writer_open(out, fluxin_header(f), &err);
	if (w == NULL)
		titan_die_err(&err);
	progress pg;
	progress_init(&pg, "encode", PROGRESS_ITEMS, a.limit);
	progress_set_noun(&pg, "images");
	if (a.quiet)
		pg.tty = 0;
	tally t = {.quiet = a.quiet, .pg = &pg};
	double t0 = progress_now();
	int rc = run(&a, f, w, &t, &err);
	progress_finish(&pg, 0);
	if (rc == 0)
		rc = fluxrec_writer_close(w, &err);
	else
		fluxrec_writer_abort(w); /* no trailer: readers see a truncated stream */
	if (out != stdout) {
		if (rc == 0)
			rc = afile_commit(&af, &err);
		else
			afile_abort(&af);
	}
	if (!a.quiet)
		summary(&t, f, progress_now() - t0, a.format == SRC_WDS);
	fluxin_free(f);
	backend_free(be);
	if (rc != 0)
		titan_die_err(&err);
	return out == stdout ? cli_stdout_status(TITAN_EXIT_OK) : TITAN_EXIT_OK;
}
