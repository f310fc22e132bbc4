/* Private to titan-tokenize: the settings main() parsed and the three jobs. */
#ifndef TITAN_TOOLS_TOKENIZE_H
#define TITAN_TOOLS_TOKENIZE_H

#include <stdint.h>

#include "chat/chat.h"
#include "core/err.h"
#include "textin/textin.h"
#include "tok/tok.h"

typedef struct tkz_opts {
	const char *tokenizer; /* --tokenizer PATH */
	textin_opts in;        /* --format jsonl|text, --field, --split, --skip-bad */
	int ids;               /* token side is decimal ids text, not the binary stream */
	int decode;            /* --decode */
	int bos, eos;          /* 1 add, 0 do not, -1 the tokenizer's default */
	size_t pad_to;         /* --pad-to N: fixed-length encoder inputs (0: off) */
	int added;             /* enum tok_added */
	int threads;           /* -j N */
	int quiet;             /* no progress, no summary */
	const char *cache;     /* --cache DIR; NULL: the default (tok_cache_dir) */
	int no_cache;          /* --no-cache */
	int chat;              /* --chat: JSON conversations to ids and label masks */
	chat_opts chat_o;      /* --chat-fields, --chat-special-tokens */
	char **files;          /* inputs; {"-"} when none given */
	int n_files;
} tkz_opts;

/* Load the tokenizer (through the compiled cache unless --no-cache) and give
 * its fingerprint (SHA-256 of the file tok_load reads). */
int tkz_load(const tkz_opts *o, tok **t, uint8_t fingerprint[32], titan_err *err);

/* Text in, tokens out on stdout.  Returns an exit status. */
int tkz_encode(const tkz_opts *o);
/* Tokens in, text out on stdout.  Returns an exit status. */
int tkz_decode(const tkz_opts *o);
/* "titan-tokenize train ...": argv starts at "train".  Returns an exit status. */
int tkz_train_main(int argc, char **argv);

/* Wall-clock seconds since an arbitrary start. */
double tkz_now(void);

#endif
