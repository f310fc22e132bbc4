/* titan-shard: write a token stream into binary shards; inspect, verify and
 * read them back.  See titan-shard(1) and titan-formats(5). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cli.h"
#include "core/err.h"
#include "core/sha256.h"
#include "fluxrec/fluxrec.h"
#include "shard/shard.h"
#include "tokstream/tokstream.h"

enum { OPT_OUT = 'o', OPT_SHARD_TOKENS = 256, OPT_VAL_FRACTION, OPT_VAL_DOCS, OPT_COMPRESS,
       OPT_FRAME_TOKENS, OPT_JSON, OPT_SPLIT, OPT_QUIET, OPT_ACCEPT, OPT_WEIGHT, OPT_SEED,
       OPT_SHARD_RECORDS };

static const cli_option options[] = {
	{"out", 'o', CLI_ARG, OPT_OUT, "DIR", "write shards and manifest.json into DIR"},
	{"shard-tokens", 0, CLI_ARG, OPT_SHARD_TOKENS, "N", "tokens per shard (default 100M; K/M/G)"},
	{"shard-records", 0, CLI_ARG, OPT_SHARD_RECORDS, "N", "Flux records per shard (default: 1 GiB)"},
	{"val-fraction", 0, CLI_ARG, OPT_VAL_FRACTION, "F", "send this fraction of documents to val"},
	{"val-docs", 0, CLI_ARG, OPT_VAL_DOCS, "N", "send the first N documents to val"},
	{"compress", 0, CLI_ARG, OPT_COMPRESS, "zstd[:L]", "zstd seekable frames (level L, default 3)"},
	{"frame-tokens", 0, CLI_ARG, OPT_FRAME_TOKENS, "N", "tokens per zstd frame (default 16384)"},
	{"json", 0, CLI_NO_ARG, OPT_JSON, NULL, "info: print JSON"},
	{"split", 0, CLI_ARG, OPT_SPLIT, "S", "cat: only train or val (default: all, input order)"},
	{"quiet", 'q', CLI_NO_ARG, OPT_QUIET, NULL, "no progress on stderr"},
	{"weight", 0, CLI_ARG, OPT_WEIGHT, "W", "mix: the next source's weight (default 1 each)"},
	{"seed", 0, CLI_ARG, OPT_SEED, "N", "mix: the draws' seed (default 42, as torchtitan's)"},
	{NULL, 0, 0, 0, NULL, NULL},
};

static const cli_spec spec = {
	.prog = "titan-shard",
	.synopsis = "--out DIR [options] [FILE...]\n"
		    "       titan-shard info [--json] DIR|FILE\n"
		    "       titan-shard verify DIR|FILE\n"
		    "       titan-shard cat [--split train|val] DIR|FILE\n"
		    "       titan-shard mix --out DIR [--seed N] [--weight W] SRC [--weight W] SRC...",
	.summary = "Write a token stream or Flux records (stdin or FILEs) into shards for titan-train.",
	.opts = options,
	.epilog = "Rerunning with the same --out continues an interrupted run when the input\n"
		  "and options are the same, and refuses otherwise.\n",
};

typedef struct args {
	const char *out;
	shard_build_opts b;
	uint64_t shard_records;
	int token_only; /* an option that only token streams take */
	int have_val_fraction, json, split, quiet;
	double *weights; /* mix: the i-th --weight is the i-th source's */
	int n_weights;
	uint64_t seed;
} args;

static int parse_compress(const char *s)
{
	if (strcmp(s, "none") == 0)
		return 0;
	if (strcmp(s, "zstd") == 0)
		return 3;
	if (strncmp(s, "zstd:", 5) == 0)
		return (int)cli_int(&spec, "--compress", s + 5, 1, 19);
	cli_usage_error(&spec, "--compress: '%s' is not zstd, zstd:LEVEL or none", s);
}

static void warn_line(const char *msg)
{
	titan_warn("warning: %s", msg);
}

static int is_dir(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int info_file(const char *path, int json, titan_err *err)
{
	shard_file *f = shard_file_open(path, err);
	if (f == NULL)
		return -1;
	const shard_header *h = shard_file_header(f);
	char fp[65];
	sha256_hex(h->fingerprint, fp);
	uint64_t bytes = h->index_offset + h->index_bytes + h->mask_bytes;
	if (json) {
		json_t *o = json_pack("{s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:s, s:I, s:I, s:I, s:I, "
				      "s:I, s:s}", "file", path, "version", (int)h->version,
				      "tokens", (json_int_t)h->n_tokens, "docs", (json_int_t)h->n_docs,
				      "vocab_size", (json_int_t)h->vocab_size, "id_width",
				      (json_int_t)h->id_width, "bytes", (json_int_t)bytes, "compress",
				      h->flags & SHARD_ZSTD ? "zstd" : "none", "frame_tokens",
				      (json_int_t)h->frame_tokens, "header_crc",
				      (json_int_t)h->header_crc, "data_crc", (json_int_t)h->data_crc,
				      "index_crc", (json_int_t)h->index_crc, "bos_id",
				      (json_int_t)h->bos_id, "fingerprint", fp);
		json_object_set_new(o, "eos_id", json_integer(h->eos_id));
		json_object_set_new(o, "data_bytes", json_integer((json_int_t)h->data_bytes));
		if (h->flags & SHARD_MASK)
			json_object_set_new(o, "mask_crc", json_integer((json_int_t)h->mask_crc));
		json_dumpf(o, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(o);
	} else {
		printf("%s: titan shard version %u%s\n", path, h->version,
		       h->flags & SHARD_MASK ? " (label masks: SFT chat data)" : "");
		printf("tokens      %llu\ndocuments   %llu\n", (unsigned long long)h->n_tokens,
		       (unsigned long long)h->n_docs);
		printf("vocab       %u ids, %u bytes each, bos %d, eos %d\n", h->vocab_size,
		       h->id_width, h->bos_id, h->eos_id);
		printf("tokenizer   %s\n", fp);
		if (h->flags & SHARD_ZSTD)
			printf("storage     zstd seekable, %u tokens per frame, %llu bytes (%.2f "
			       "bytes/token)\n", h->frame_tokens, (unsigned long long)bytes,
			       h->n_tokens ? (double)h->data_bytes / (double)h->n_tokens : 0.0);
		else
			printf("storage     uncompressed, %llu bytes\n", (unsigned long long)bytes);
		printf("checksums   header 0x%08x data 0x%08x index 0x%08x", h->header_crc,
		       h->data_crc, h->index_crc);
		if (h->flags & SHARD_MASK)
			printf(" mask 0x%08x", h->mask_crc);
		putchar('\n');
	}
	shard_file_close(f);
	return 0;
}

static int info_dir(const char *dir, int json, titan_err *err)
{
	if (json) {
		char path[4096];
		snprintf(path, sizeof path, "%s/manifest.json", dir);
		shard_manifest m; /* parse first, so a bad manifest is an error */
		if (shard_manifest_read(dir, &m, err) != 0)
			return -1;
		shard_manifest_free(&m);
		json_error_t je;
		json_t *o = json_load_file(path, 0, &je);
		if (o == NULL)
			return err_set(err, "%s:%d: %s", path, je.line, je.text);
		json_dumpf(o, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(o);
		return 0;
	}
	shard_manifest m;
	if (shard_manifest_read(dir, &m, err) != 0)
		return -1;
	char fp[65];
	sha256_hex(m.stream.fingerprint, fp);
	printf("%s: titan shards, %s\n", dir, m.complete ? "complete" :
	       "INCOMPLETE (interrupted; rerun titan-shard with the same input to finish)");
	printf("tokenizer   %s\n", fp);
	printf("vocab       %u ids, %u bytes each, bos %d, eos %d\n", m.stream.vocab_size,
	       m.stream.id_width, m.stream.bos_id, m.stream.eos_id);
	printf("options     %llu tokens per shard, %s", (unsigned long long)m.shard_tokens,
	       m.zstd_level ? "zstd" : "uncompressed");
	if (m.zstd_level)
		printf(" level %d, %u tokens per frame", m.zstd_level, m.frame_tokens);
	if (m.val_docs)
		printf(", first %llu documents to val\n", (unsigned long long)m.val_docs);
	else
		printf(", val fraction %g\n", m.val_fraction);
	for (int s = 0; s < 2; s++) {
		uint64_t bytes = 0;
		for (size_t i = 0; i < m.split[s].n_shards; i++)
			bytes += m.split[s].shards[i].bytes;
		printf("%-11s %zu shards, %llu documents, %llu tokens, %llu bytes\n",
		       s == SHARD_TRAIN ? "train" : "val", m.split[s].n_shards,
		       (unsigned long long)m.split[s].docs, (unsigned long long)m.split[s].tokens,
		       (unsigned long long)bytes);
	}
	printf("input       %llu documents, %llu tokens, CRC-32C 0x%08x\n",
	       (unsigned long long)m.input_docs, (unsigned long long)m.input_tokens, m.input_crc);
	shard_manifest_free(&m);
	return 0;
}

static void info_mix(const char *dir, int json, titan_err *err)
{
	shard_mix m;
	if (shard_mix_read(dir, &m, err) != 0)
		titan_die_err(err);
	if (json) {
		char path[4096];
		snprintf(path, sizeof path, "%s/manifest.json", dir);
		json_error_t je;
		json_t *o = json_load_file(path, 0, &je);
		if (o == NULL)
			titan_die(TITAN_EXIT_FAIL, "%s:%d: %s", path, je.line, je.text);
		json_dumpf(o, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(o);
		shard_mix_free(&m);
		return;
	}
	char fp[65];
	sha256_hex(m.fingerprint, fp);
	double total = 0;
	for (size_t i = 0; i < m.n; i++)
		total += m.src[i].weight;
	printf("%s: titan mixture of %zu shard folders, seed %llu\n", dir, m.n,
	       (unsigned long long)m.seed);
	printf("tokenizer   %s\nvocab       %u ids\n", fp, m.vocab_size);
	for (size_t i = 0; i < m.n; i++) {
		const shard_mix_source *s = &m.src[i];
		shard_manifest sm;
		titan_err e2;
		int ok = shard_mix_source_manifest(&m, i, &sm, &e2) == 0;
		if (ok)
			shard_manifest_free(&sm);
		printf("source %-4zu weight %g (%.2f%% of windows), %llu train tokens, %llu "
		       "documents, %s%s\n", i + 1, s->weight, 100 * s->weight / total,
		       (unsigned long long)s->tokens, (unsigned long long)s->docs, s->path,
		       ok ? "" : " [changed or missing since mixed: see titan-shard verify]");
	}
	shard_mix_free(&m);
}

static int cmd_mix(args *a, int nsrc, char **src)
{
	if (a->out == NULL)
		cli_usage_error(&spec, "mix: missing --out DIR");
	if (nsrc == 0)
		cli_usage_error(&spec, "mix: name at least one shard folder");
	if (a->n_weights != 0 && a->n_weights != nsrc)
		cli_usage_error(&spec, "mix: %d --weight for %d sources (one before each source, "
				"or none for equal weights)", a->n_weights, nsrc);
	double *w = a->weights;
	if (a->n_weights == 0 && (w = malloc((size_t)nsrc * sizeof *w)) == NULL)
		titan_die(TITAN_EXIT_FAIL, "out of memory");
	for (int i = 0; a->n_weights == 0 && i < nsrc; i++)
		w[i] = 1;
	titan_err err;
	if (shard_mix_write(a->out, src, w, (size_t)nsrc, a->seed, &err) != 0)
		titan_die_err(&err);
	if (!a->quiet)
		titan_warn("%s: a mixture of %d shard folders, seed %llu", a->out, nsrc,
			   (unsigned long long)a->seed);
	if (w != a->weights)
		free(w);
	free(a->weights);
	return TITAN_EXIT_OK;
}

/* Several inputs read back to back as one stream (segments may follow each
 * other, see titan-formats(5)): a FILE that moves to the next file at EOF. */
typedef struct chain {
	char **files;
	int n, next;
	int fd; /* -1 between files */
	char pre[4]; /* the first bytes, read to tell the format, served first */
	size_t pre_n, pre_at;
} chain;

/* read(2), not fread: a pipe from a slow producer yields what it has, so
 * shards are committed as data arrives instead of once 1 MiB is buffered. */
static ssize_t chain_read(void *cookie, char *buf, size_t size)
{
	chain *c = cookie;
	if (c->pre_at < c->pre_n && size > 0) {
		size_t k = c->pre_n - c->pre_at < size ? c->pre_n - c->pre_at : size;
		memcpy(buf, c->pre + c->pre_at, k);
		c->pre_at += k;
		return (ssize_t)k;
	}
	for (;;) {
		if (c->fd < 0) {
			if (c->next == c->n)
				return 0;
			const char *f = c->files[c->next++];
			c->fd = strcmp(f, "-") ? open(f, O_RDONLY | O_CLOEXEC) : STDIN_FILENO;
			if (c->fd < 0)
				titan_die(TITAN_EXIT_FAIL, "%s: cannot open: %s", f, strerror(errno));
		}
		ssize_t got = read(c->fd, buf, size);
		if (got < 0 && errno == EINTR)
			continue;
		if (got != 0)
			return got;
		if (c->fd != STDIN_FILENO)
			close(c->fd);
		c->fd = -1;
	}
}

static int chain_close(void *cookie)
{
	chain *c = cookie;
	if (c->fd >= 0 && c->fd != STDIN_FILENO)
		close(c->fd);
	return 0;
}

/* The stream's first bytes into c->pre, to be read again. */
static void chain_peek(chain *c)
{
	while (c->pre_n < sizeof c->pre) {
		ssize_t got = chain_read(c, c->pre + c->pre_n, sizeof c->pre - c->pre_n);
		if (got <= 0)
			break;
		c->pre_n += (size_t)got;
	}
	c->pre_at = 0;
}

/* Whether path is a regular file starting with the Flux records' magic (a
 * FIFO is not opened: the token shard reader refuses it). */
static int is_fluxrec_file(const char *path)
{
	char m[4];
	struct stat st;
	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
		return 0;
	FILE *fp = fopen(path, "rb");
	int is = fp && fread(m, 1, 4, fp) == 4 && memcmp(m, FLUXREC_MAGIC, 4) == 0;
	if (fp)
		fclose(fp);
	return is;
}

static int build_records(args *a, FILE *fp, const char *name)
{
	if (a->token_only)
		cli_usage_error(&spec, "%s is a Flux record stream: --shard-tokens, --compress and "
				"--frame-tokens are for token streams (use --shard-records)", name);
	titan_err err;
	fluxrec_reader *r = fluxrec_reader_open(fp, name, &err);
	if (r == NULL)
		titan_die_err(&err);
	fluxrec_shard_opts o = {.out = a->out, .shard_records = a->shard_records,
				.val_fraction = a->b.val_fraction, .val_records = a->b.val_docs,
				.progress = !a->quiet && isatty(2)};
	fluxrec_shard_stats st;
	int rc = fluxrec_shard_build(r, &o, &st, &err);
	fluxrec_reader_close(r);
	fclose(fp);
	if (rc != 0)
		titan_die_err(&err);
	if (!a->quiet)
		titan_warn("%s: %llu Flux records written (%llu bytes)%s", a->out,
			   (unsigned long long)st.records, (unsigned long long)st.bytes_out,
			   st.resumed ? "; resumed an interrupted run" : "");
	return TITAN_EXIT_OK;
}

static int cmd_build(args *a, int nfiles, char **files)
{
	static char *dash[] = {"-"};
	if (nfiles == 0 && isatty(0))
		cli_usage_error(&spec, "standard input is a terminal; pipe a token stream from "
				"titan-tokenize or name a file");
	chain ch = {.files = nfiles ? files : dash, .n = nfiles ? nfiles : 1, .fd = -1};
	FILE *fp = fopencookie(&ch, "rb", (cookie_io_functions_t){.read = chain_read,
								  .close = chain_close});
	static char chainbuf[1u << 20];
	if (fp == NULL || setvbuf(fp, chainbuf, _IOFBF, sizeof chainbuf) != 0)
		titan_die(TITAN_EXIT_FAIL, "out of memory");
	const char *name = nfiles == 1 ? files[0] : nfiles == 0 ? "-" : "inputs";
	chain_peek(&ch);
	if (ch.pre_n == 4 && memcmp(ch.pre, FLUXREC_MAGIC, 4) == 0)
		return build_records(a, fp, name);
	if (a->shard_records)
		cli_usage_error(&spec, "--shard-records is for Flux record streams; %s is not one",
				name);
	titan_err err;
	tokstream_reader *r = tokstream_reader_open(fp, name, &err);
	if (r == NULL)
		titan_die_err(&err);
	shard_build_stats st;
	a->b.out = a->out;
	a->b.progress = !a->quiet && isatty(2);
	int rc = shard_build(r, &a->b, &st, &err);
	tokstream_reader_close(r);
	fclose(fp);
	if (rc != 0)
		titan_die_err(&err);
	if (!a->quiet)
		titan_warn("%s: %llu documents, %llu tokens written (%llu bytes)%s", a->out,
			   (unsigned long long)st.docs, (unsigned long long)st.tokens,
			   (unsigned long long)st.bytes_out,
			   st.resumed ? "; resumed an interrupted run" : "");
	return TITAN_EXIT_OK;
}

int main(int argc, char **argv)
{
	titan_set_progname("titan-shard");
	args a = {.split = -1, .seed = SHARD_MIX_DEFAULT_SEED};
	cli_state cs;
	cli_begin(&cs, &spec);
	int c;
	while ((c = cli_next(&cs, argc, argv)) != -1) {
		switch (c) {
		case OPT_OUT: a.out = cs.arg; break;
		case OPT_SHARD_TOKENS:
			/* 0 is what the library reads as "the default": say so instead. */
			if ((a.b.shard_tokens = cli_size(&spec, "--shard-tokens", cs.arg)) == 0)
				cli_usage_error(&spec, "--shard-tokens: must be at least 1");
			a.token_only = 1;
			break;
		case OPT_SHARD_RECORDS:
			if ((a.shard_records = cli_size(&spec, "--shard-records", cs.arg)) == 0)
				cli_usage_error(&spec, "--shard-records: must be at least 1");
			break;
		case OPT_VAL_FRACTION:
			a.b.val_fraction = cli_double(&spec, "--val-fraction", cs.arg, 0.0, 1.0);
			a.have_val_fraction = 1;
			break;
		case OPT_VAL_DOCS: a.b.val_docs = cli_size(&spec, "--val-docs", cs.arg); break;
		case OPT_COMPRESS:
			a.b.zstd_level = parse_compress(cs.arg);
			a.token_only |= a.b.zstd_level > 0;
			break;
		case OPT_FRAME_TOKENS:
			a.b.frame_tokens = (uint32_t)cli_int(&spec, "--frame-tokens", cs.arg, 1, 1 << 28);
			a.token_only = 1;
			break;
		case OPT_JSON: a.json = 1; break;
		case OPT_SPLIT:
			if (strcmp(cs.arg, "train") == 0)
				a.split = SHARD_TRAIN;
			else if (strcmp(cs.arg, "val") == 0)
				a.split = SHARD_VAL;
			else
				cli_usage_error(&spec, "--split: '%s' is not train or val", cs.arg);
			break;
		case OPT_QUIET: a.quiet = 1; break;
		case OPT_WEIGHT:
			a.weights = realloc(a.weights, (size_t)(a.n_weights + 1) * sizeof *a.weights);
			if (a.weights == NULL)
				titan_die(TITAN_EXIT_FAIL, "out of memory");
			/* negative and zero-sum weights are refused with the sources named */
			a.weights[a.n_weights++] = cli_double(&spec, "--weight", cs.arg, -1e300, 1e300);
			break;
		case OPT_SEED:
			a.seed = (uint64_t)cli_int(&spec, "--seed", cs.arg, 0, INT64_MAX);
			break;
		default: cli_usage_error(&spec, "unexpected option");
		}
	}
	int n = argc - cs.optind;
	char **ops = argv + cs.optind;
	const char *cmd = n > 0 ? ops[0] : "";
	titan_err err;
	if (strcmp(cmd, "info") == 0 || strcmp(cmd, "verify") == 0 || strcmp(cmd, "cat") == 0) {
		if (n != 2)
			cli_usage_error(&spec, "%s takes one DIR or FILE", cmd);
		const char *p = ops[1];
		int rc;
		int dir = is_dir(p), rec = dir ? fluxrec_dir_is(p) : is_fluxrec_file(p);
		if (rec && cmd[0] == 'c' && isatty(1))
			titan_die(TITAN_EXIT_USAGE, "cat: standard output is a terminal; redirect it "
				  "or pipe it to titan-shard");
		if (rec) {
			if (cmd[0] == 'i')
				rc = fluxrec_info(p, dir, a.json, stdout, &err);
			else if (cmd[0] == 'v')
				rc = dir ? fluxrec_verify_dir(p, warn_line, &err)
					 : fluxrec_verify_file(p, &err);
			else
				rc = dir ? fluxrec_cat_dir(p, a.split, stdout, &err)
					 : fluxrec_cat_file(p, stdout, &err);
			if (rc == 0 && cmd[0] == 'v')
				printf("%s: ok\n", p);
			if (rc == 0 && fflush(stdout) != 0)
				rc = err_errno(&err, "standard output");
		} else if (cmd[0] == 'i' && is_dir(p) && shard_dir_is_mix(p)) {
			info_mix(p, a.json, &err);
			rc = 0;
		} else if (cmd[0] == 'i') {
			rc = is_dir(p) ? info_dir(p, a.json, &err) : info_file(p, a.json, &err);
		} else if (cmd[0] == 'v') {
			if (is_dir(p) && shard_dir_is_mix(p)) {
				rc = shard_mix_verify(p, warn_line, &err);
			} else if (is_dir(p)) {
				rc = shard_verify_dir(p, warn_line, &err);
			} else {
				shard_file *f = shard_file_open(p, &err);
				rc = f ? shard_file_verify(f, &err) : -1;
				shard_file_close(f);
			}
			if (rc == 0)
				printf("%s: ok\n", p);
		} else {
			if (isatty(1))
				titan_die(TITAN_EXIT_USAGE, "cat: standard output is a terminal; "
					  "redirect it or pipe it to titan-tokenize --decode");
			rc = is_dir(p) ? shard_cat_dir(p, a.split, stdout, &err)
				       : shard_cat_file(p, stdout, &err);
			if (rc == 0 && fflush(stdout) != 0)
				rc = err_errno(&err, "standard output");
		}
		if (rc != 0)
			titan_die_err(&err);
		return cli_stdout_status(TITAN_EXIT_OK);
	}
	if (strcmp(cmd, "mix") == 0)
		return cmd_mix(&a, n - 1, ops + 1);
	if (a.n_weights)
		cli_usage_error(&spec, "--weight belongs to mix");
	if (a.out == NULL)
		cli_usage_error(&spec, "missing --out DIR (or a command: info, verify, cat, mix)");
	if (a.have_val_fraction && a.b.val_docs)
		cli_usage_error(&spec, "--val-fraction and --val-docs exclude each other");
	if (a.b.frame_tokens && !a.b.zstd_level)
		cli_usage_error(&spec, "--frame-tokens needs --compress zstd");
	return cmd_build(&a, n, ops);
}
