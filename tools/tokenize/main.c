/* titan-tokenize: text in, token ids out (and back), and BPE training.
 * See titan-tokenize(1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/cli.h"
#include "core/err.h"
#include "core/sha256.h"
#include "tokenize.h"

enum {
	OPT_FIELD = 256, OPT_SPLIT, OPT_SKIP_BAD, OPT_BOS, OPT_NO_BOS, OPT_EOS, OPT_NO_EOS,
	OPT_DECODE, OPT_IDS, OPT_ADDED, OPT_QUIET, OPT_CACHE, OPT_NO_CACHE, OPT_CHAT,
	OPT_CHAT_FIELDS, OPT_CHAT_SPECIAL, OPT_PAD_TO,
};

static const cli_option options[] = {
	{"tokenizer", 't', CLI_ARG, 't', "PATH", "tokenizer.json, its folder, or a tiktoken file"},
	{"format", 'f', CLI_ARG, 'f', "FMT", "text side: jsonl (default) or text; 'ids' = --ids"},
	{"field", 0, CLI_ARG, OPT_FIELD, "NAME", "JSONL field holding the text (default text)"},
	{"split", 0, CLI_ARG, OPT_SPLIT, "HOW", "plain text documents: file (default), blank, line"},
	{"skip-bad", 0, CLI_NO_ARG, OPT_SKIP_BAD, NULL, "skip and count malformed lines"},
	{"ids", 0, CLI_NO_ARG, OPT_IDS, NULL, "tokens as decimal ids, a document per line"},
	{"decode", 'd', CLI_NO_ARG, OPT_DECODE, NULL, "turn tokens back into text"},
	{"bos", 0, CLI_NO_ARG, OPT_BOS, NULL, "start every document with BOS"},
	{"no-bos", 0, CLI_NO_ARG, OPT_NO_BOS, NULL, "do not add BOS"},
	{"eos", 0, CLI_NO_ARG, OPT_EOS, NULL, "end every document with EOS"},
	{"no-eos", 0, CLI_NO_ARG, OPT_NO_EOS, NULL, "do not add EOS"},
	{"pad-to", 0, CLI_ARG, OPT_PAD_TO, "N", "encoder input: specials, cut and padded to N tokens"},
	{"added-tokens", 0, CLI_ARG, OPT_ADDED, "HOW", "special tokens in text: extract or plain"},
	{"chat", 0, CLI_NO_ARG, OPT_CHAT, NULL, "JSONL conversations: chat template, ids + label masks"},
	{"chat-fields", 0, CLI_ARG, OPT_CHAT_FIELDS, "U,A", "--chat: user and assistant text fields"},
	{"chat-special-tokens", 0, CLI_NO_ARG, OPT_CHAT_SPECIAL, NULL,
	 "--chat: pass bos_token, eos_token (as HF does)"},
	{"jobs", 'j', CLI_ARG, 'j', "N", "encoding threads (default: all cores)"},
	{"cache", 0, CLI_ARG, OPT_CACHE, "DIR", "compiled tokenizers' folder (default: XDG cache)"},
	{"no-cache", 0, CLI_NO_ARG, OPT_NO_CACHE, NULL, "load the tokenizer from its source only"},
	{"quiet", 'q', CLI_NO_ARG, OPT_QUIET, NULL, "no progress, no summary"},
	{NULL, 0, 0, 0, NULL, NULL},
};

static const cli_spec spec = {
	.prog = "titan-tokenize",
	.synopsis = "--tokenizer PATH [options] [FILE...]\n"
		    "       titan-tokenize --decode --tokenizer PATH [options] [FILE...]\n"
		    "       titan-tokenize train --vocab-size N [options] FILE...",
	.summary = "Tokenize JSON Lines or text (any compression, tar, zip) into a token stream.",
	.opts = options,
	.epilog = "Inputs default to stdin ('-').  The token stream goes to stdout.\n",
};

double tkz_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int tkz_load(const tkz_opts *o, tok **t, uint8_t fingerprint[32], titan_err *err)
{
	char dir[4096];
	tok_opts to = {.added = o->added, .pretok = TOK_PRETOK_AUTO,
		       .cache_dir = o->no_cache ? NULL : o->cache ? o->cache : tok_cache_dir(dir, sizeof dir)};
	if (tok_load(t, o->tokenizer, &to, err) != 0)
		return -1;
	tok_fingerprint(*t, fingerprint);
	return 0;
}

static int parse_args(int argc, char **argv, tkz_opts *o)
{
	cli_state st;
	cli_begin(&st, &spec);
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	*o = (tkz_opts){.bos = -1, .eos = -1, .threads = cores > 0 ? (int)cores : 1};
	int c;
	while ((c = cli_next(&st, argc, argv)) != -1) {
		const char *a = st.arg;
		switch (c) {
		case 't': o->tokenizer = a; break;
		case 'f':
			if (strcmp(a, "jsonl") == 0)
				o->in.format = TEXTIN_JSONL;
			else if (strcmp(a, "text") == 0)
				o->in.format = TEXTIN_TEXT;
			else if (strcmp(a, "ids") == 0)
				o->ids = 1;
			else
				cli_usage_error(&spec, "--format must be jsonl, text or ids, not '%s'", a);
			break;
		case OPT_FIELD: o->in.field = a; break;
		case OPT_SPLIT:
			if (strcmp(a, "file") == 0)
				o->in.split = TEXTIN_SPLIT_FILE;
			else if (strcmp(a, "blank") == 0)
				o->in.split = TEXTIN_SPLIT_BLANK;
			else if (strcmp(a, "line") == 0)
				o->in.split = TEXTIN_SPLIT_LINE;
			else
				cli_usage_error(&spec, "--split must be file, blank or line, not '%s'", a);
			break;
		case OPT_SKIP_BAD: o->in.skip_bad = 1; break;
		case OPT_IDS: o->ids = 1; break;
		case OPT_DECODE: o->decode = 1; break;
		case OPT_BOS: o->bos = 1; break;
		case OPT_NO_BOS: o->bos = 0; break;
		case OPT_EOS: o->eos = 1; break;
		case OPT_NO_EOS: o->eos = 0; break;
		case OPT_ADDED:
			if (strcmp(a, "extract") == 0)
				o->added = TOK_ADDED_EXTRACT;
			else if (strcmp(a, "plain") == 0)
				o->added = TOK_ADDED_PLAIN;
			else
				cli_usage_error(&spec, "--added-tokens must be extract or plain, not '%s'", a);
			break;
		case 'j': o->threads = (int)cli_int(&spec, "--jobs", a, 1, 1024); break;
		case OPT_QUIET: o->quiet = 1; break;
		case OPT_CACHE: o->cache = a; break;
		case OPT_NO_CACHE: o->no_cache = 1; break;
		case OPT_CHAT: o->chat = 1; break;
		case OPT_CHAT_SPECIAL: o->chat_o.flags |= CHAT_SPECIAL_TOKENS; break;
		case OPT_CHAT_FIELDS: {
			static char buf[512];
			char *comma;
			snprintf(buf, sizeof buf, "%s", a);
			if ((comma = strchr(buf, ',')) == NULL || comma == buf || comma[1] == '\0' ||
			    strchr(comma + 1, ','))
				cli_usage_error(&spec, "--chat-fields wants USER,ASSISTANT, not '%s'", a);
			*comma = '\0';
			o->chat_o.user_field = buf;
			o->chat_o.assistant_field = comma + 1;
			break;
		}
		case OPT_PAD_TO: o->pad_to = (size_t)cli_int(&spec, "--pad-to", a, 1, 1 << 20); break;
		default: cli_usage_error(&spec, "unhandled option");
		}
	}
	if (o->tokenizer == NULL)
		cli_usage_error(&spec, "--tokenizer PATH is required");
	if (!o->chat && (o->chat_o.user_field || o->chat_o.flags))
		cli_usage_error(&spec, "--chat-fields and --chat-special-tokens need --chat");
	if (o->chat && (o->decode || o->ids || o->bos >= 0 || o->eos >= 0 || o->in.field ||
			o->in.format == TEXTIN_TEXT))
		cli_usage_error(&spec, "--chat takes JSON Lines and writes a token stream: not with "
				"--decode, --ids, --bos/--eos, --field or --format text");
	if (o->chat) { /* a conversation per line, parsed by lib/chat */
		o->in.format = TEXTIN_TEXT;
		o->in.split = TEXTIN_SPLIT_LINE;
	}
	if (o->pad_to && (o->bos >= 0 || o->eos >= 0 || o->decode))
		cli_usage_error(&spec, "--pad-to takes the special tokens from the tokenizer's "
				"post-processor: no --bos/--eos, and not with --decode");
	if (o->pad_to && o->chat)
		cli_usage_error(&spec, "--pad-to and --chat: encoder inputs are captions, not "
				"conversations");
	static char *dash[] = {"-"};
	o->files = st.optind < argc ? argv + st.optind : dash;
	o->n_files = st.optind < argc ? argc - st.optind : 1;
	int stdin_uses = 0;
	for (int i = 0; i < o->n_files; i++)
		stdin_uses += strcmp(o->files[i], "-") == 0;
	if (stdin_uses > 1)
		cli_usage_error(&spec, "stdin ('-') given more than once");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "train") == 0)
		return tkz_train_main(argc - 1, argv + 1);
	tkz_opts o;
	parse_args(argc, argv, &o);
	return o.decode ? tkz_decode(&o) : tkz_encode(&o);
}
