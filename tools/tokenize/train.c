/* "titan-tokenize train": count words over the inputs, train ByteLevel BPE
 * (lib/bpetrain), write tokenizer.json and tokenizer_config.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpetrain/bpetrain.h"
#include "core/cli.h"
#include "tokenize.h"

enum {
	OPT_VOCAB = 256, OPT_MINFREQ, OPT_SPECIAL, OPT_PRETOK, OPT_BOS_TOKEN, OPT_EOS_TOKEN,
	OPT_ADD_BOS, OPT_NO_ADD_BOS, OPT_ADD_EOS, OPT_NO_ADD_EOS, OPT_FIELD, OPT_SPLIT,
	OPT_SKIP_BAD, OPT_QUIET,
};

static const cli_option options[] = {
	{"vocab-size", 0, CLI_ARG, OPT_VOCAB, "N", "vocabulary size, specials and 256 bytes included"},
	{"min-frequency", 0, CLI_ARG, OPT_MINFREQ, "K", "merge only pairs seen at least K times (0)"},
	{"special", 0, CLI_ARG, OPT_SPECIAL, "TOKEN", "a special token (repeat; ids 0.. in order)"},
	{"pre-tokenizer", 0, CLI_ARG, OPT_PRETOK, "NAME", "llama3 (default) or gpt2"},
	{"bos-token", 0, CLI_ARG, OPT_BOS_TOKEN, "TOKEN", "BOS (default: the first special)"},
	{"eos-token", 0, CLI_ARG, OPT_EOS_TOKEN, "TOKEN", "EOS (default: the second special)"},
	{"add-bos", 0, CLI_NO_ARG, OPT_ADD_BOS, NULL, "documents get BOS by default (the default)"},
	{"no-add-bos", 0, CLI_NO_ARG, OPT_NO_ADD_BOS, NULL, "documents get no BOS by default"},
	{"add-eos", 0, CLI_NO_ARG, OPT_ADD_EOS, NULL, "documents get EOS by default"},
	{"no-add-eos", 0, CLI_NO_ARG, OPT_NO_ADD_EOS, NULL, "documents get no EOS (the default)"},
	{"out", 'o', CLI_ARG, 'o', "DIR", "folder for tokenizer.json (default .)"},
	{"format", 'f', CLI_ARG, 'f', "FMT", "inputs: jsonl (default) or text"},
	{"field", 0, CLI_ARG, OPT_FIELD, "NAME", "JSONL field holding the text (default text)"},
	{"split", 0, CLI_ARG, OPT_SPLIT, "HOW", "plain text documents: file (default), blank, line"},
	{"skip-bad", 0, CLI_NO_ARG, OPT_SKIP_BAD, NULL, "skip and count malformed lines"},
	{"quiet", 'q', CLI_NO_ARG, OPT_QUIET, NULL, "no summary"},
	{NULL, 0, 0, 0, NULL, NULL},
};

static const cli_spec spec = {
	.prog = "titan-tokenize train",
	.synopsis = "--vocab-size N [options] [FILE...]",
	.summary = "Train a ByteLevel BPE tokenizer (like HF tokenizers' BpeTrainer).",
	.opts = options,
	.epilog = "Default specials: <|begin_of_text|> <|end_of_text|>.  Inputs default to stdin.\n",
};

typedef struct train_args {
	bpetrain_opts bo;
	const char *specials[256];
	const char *out;
	textin_opts in;
	int quiet;
	char **files;
	int n_files;
} train_args;

static void parse(int argc, char **argv, train_args *a)
{
	cli_state st;
	cli_begin(&st, &spec);
	*a = (train_args){.out = "."};
	a->bo.add_bos = 1;
	a->bo.specials = a->specials;
	int bos_set = 0, eos_set = 0, c;
	while ((c = cli_next(&st, argc, argv)) != -1) {
		const char *s = st.arg;
		switch (c) {
		case OPT_VOCAB: a->bo.vocab_size = (size_t)cli_int(&spec, "--vocab-size", s, 1, 1 << 30); break;
		case OPT_MINFREQ: a->bo.min_frequency = (uint64_t)cli_int(&spec, "--min-frequency", s, 0, INT64_MAX); break;
		case OPT_SPECIAL:
			if (a->bo.n_specials == 256)
				cli_usage_error(&spec, "at most 256 --special tokens");
			a->specials[a->bo.n_specials++] = s;
			break;
		case OPT_PRETOK:
			if (strcmp(s, "llama3") == 0)
				a->bo.pretok = BPETRAIN_LLAMA3;
			else if (strcmp(s, "gpt2") == 0)
				a->bo.pretok = BPETRAIN_GPT2;
			else
				cli_usage_error(&spec, "--pre-tokenizer must be llama3 or gpt2, not '%s'", s);
			break;
		case OPT_BOS_TOKEN: a->bo.bos = s; bos_set = 1; break;
		case OPT_EOS_TOKEN: a->bo.eos = s; eos_set = 1; break;
		case OPT_ADD_BOS: a->bo.add_bos = 1; break;
		case OPT_NO_ADD_BOS: a->bo.add_bos = 0; break;
		case OPT_ADD_EOS: a->bo.add_eos = 1; break;
		case OPT_NO_ADD_EOS: a->bo.add_eos = 0; break;
		case 'o': a->out = s; break;
		case 'f':
			if (strcmp(s, "jsonl") == 0)
				a->in.format = TEXTIN_JSONL;
			else if (strcmp(s, "text") == 0)
				a->in.format = TEXTIN_TEXT;
			else
				cli_usage_error(&spec, "--format must be jsonl or text, not '%s'", s);
			break;
		case OPT_FIELD: a->in.field = s; break;
		case OPT_SPLIT:
			a->in.split = strcmp(s, "file") == 0 ? TEXTIN_SPLIT_FILE
				    : strcmp(s, "blank") == 0 ? TEXTIN_SPLIT_BLANK
				    : strcmp(s, "line") == 0 ? TEXTIN_SPLIT_LINE : -1;
			if (a->in.split < 0)
				cli_usage_error(&spec, "--split must be file, blank or line, not '%s'", s);
			break;
		case OPT_SKIP_BAD: a->in.skip_bad = 1; break;
		case OPT_QUIET: a->quiet = 1; break;
		default: cli_usage_error(&spec, "unhandled option");
		}
	}
	if (a->bo.vocab_size == 0)
		cli_usage_error(&spec, "--vocab-size N is required");
	if (a->bo.n_specials == 0) {
		a->specials[0] = "<|begin_of_text|>";
		a->specials[1] = "<|end_of_text|>";
		a->bo.n_specials = 2;
	}
	if (!bos_set)
		a->bo.bos = a->specials[0];
	if (!eos_set)
		a->bo.eos = a->bo.n_specials > 1 ? a->specials[1] : NULL;
	if (a->bo.add_bos && a->bo.bos == NULL)
		cli_usage_error(&spec, "--add-bos needs a BOS token");
	if (a->bo.add_eos && a->bo.eos == NULL)
		cli_usage_error(&spec, "--add-eos needs an EOS token");
	static char *dash[] = {"-"};
	a->files = st.optind < argc ? argv + st.optind : dash;
	a->n_files = st.optind < argc ? argc - st.optind : 1;
}

static int feed_file(bpetrain *b, const char *path, const textin_opts *in, uint64_t *docs,
		     uint64_t *bytes, uint64_t *skipped, titan_err *err)
{
	textin *t = textin_open(path, in, err);
	if (t == NULL)
		return -1;
	const char *doc;
	size_t len;
	int r;
	while ((r = textin_next(t, &doc, &len, err)) == 1) {
		if (bpetrain_feed(b, (const uint8_t *)doc, len, err) != 0) {
			err_prefix(err, "%s:%llu", textin_where(t), (unsigned long long)textin_line(t));
			r = -1;
			break;
		}
		(*docs)++;
		*bytes += len;
	}
	*skipped += textin_skipped(t);
	textin_close(t);
	return r;
}

int tkz_train_main(int argc, char **argv)
{
	train_args a;
	parse(argc, argv, &a);
	titan_err err;
	double t0 = tkz_now();
	bpetrain *b = bpetrain_new(&a.bo, &err);
	if (b == NULL)
		titan_die_err(&err);
	uint64_t docs = 0, bytes = 0, skipped = 0;
	for (int i = 0; i < a.n_files; i++)
		if (feed_file(b, a.files[i], &a.in, &docs, &bytes, &skipped, &err) != 0) {
			bpetrain_free(b);
			titan_die_err(&err);
		}
	double t1 = tkz_now();
	if (bpetrain_run(b, &err) != 0 || bpetrain_save(b, a.out, &err) != 0) {
		bpetrain_free(b);
		titan_die_err(&err);
	}
	if (!a.quiet) {
		fprintf(stderr, "%s: %llu documents, %.1f MB, %llu words (%zu distinct) counted in "
				"%.2f s\n", titan_progname(), (unsigned long long)docs, (double)bytes / 1e6,
			(unsigned long long)bpetrain_n_words(b), bpetrain_n_distinct(b), t1 - t0);
		fprintf(stderr, "%s: %zu merges, vocabulary %zu, in %.2f s; wrote %s/tokenizer.json\n",
			titan_progname(), bpetrain_n_merges(b), bpetrain_n_vocab(b), tkz_now() - t1, a.out);
		if (a.in.skip_bad)
			fprintf(stderr, "%s: skipped %llu malformed inputs\n", titan_progname(),
				(unsigned long long)skipped);
	}
	bpetrain_free(b);
	return TITAN_EXIT_OK;
}
