/* Decoding: a token stream (or --ids lines) back to text, one document per
 * output line (--format text) or per JSON line (--format jsonl, exact). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sha256.h"
#include "tokstream/tokstream.h"
#include "tokenize.h"

typedef struct dec {
	const tok *tok;
	int jsonl;
	tok_buf bytes;
	textin_buf line;
	uint64_t docs, tokens;
} dec;

/* Drop the BOS / EOS the encoder added, then print the document. */
static int emit(dec *d, const uint32_t *ids, size_t n, int bos, int eos, titan_err *err)
{
	d->docs++;
	d->tokens += n;
	if (bos >= 0 && n > 0 && ids[0] == (uint32_t)bos) {
		ids++;
		n--;
	}
	if (eos >= 0 && n > 0 && ids[n - 1] == (uint32_t)eos)
		n--;
	d->bytes.n = 0;
	/* int32_t and uint32_t may alias (C17 6.5p7); ids are < vocab_size < 2^31. */
	if (tok_decode(d->tok, (const int32_t *)ids, n, &d->bytes, err) != 0)
		return -1;
	const char *s = d->bytes.n ? (const char *)d->bytes.p : "";
	if (d->jsonl) {
		d->line.n = 0;
		if (textin_buf_append(&d->line, "{\"text\":", 8) != 0 ||
		    textin_json_quote(&d->line, s, d->bytes.n) != 0 ||
		    textin_buf_append(&d->line, "}\n", 2) != 0)
			return err_set(err, "out of memory");
		if (fwrite(d->line.p, 1, d->line.n, stdout) != d->line.n)
			return err_errno(err, "stdout");
	} else if (fwrite(s, 1, d->bytes.n, stdout) != d->bytes.n || putchar('\n') == EOF)
		return err_errno(err, "stdout");
	return 0;
}

static int decode_stream(dec *d, FILE *fp, const char *name, const uint8_t fpr[32],
			 titan_err *err)
{
	tokstream_reader *r = tokstream_reader_open(fp, name, err);
	if (r == NULL)
		return -1;
	const tokstream_header *h = tokstream_reader_header(r);
	int rc = 0;
	if (memcmp(h->fingerprint, fpr, 32) != 0) {
		char a[65], b[65];
		sha256_hex(h->fingerprint, a);
		sha256_hex(fpr, b);
		rc = err_set(err, "%s: made with another tokenizer (fingerprint %.16s..., "
				  "this tokenizer %.16s...)", name, a, b);
	}
	const uint32_t *ids;
	size_t n;
	int got;
	while (rc == 0 && (got = tokstream_read_doc(r, &ids, &n, err)) == 1) {
		h = tokstream_reader_header(r);
		rc = emit(d, ids, n, h->flags & TOKSTREAM_FLAG_BOS ? h->bos_id : -1,
			  h->flags & TOKSTREAM_FLAG_EOS ? h->eos_id : -1, err);
	}
	if (rc == 0 && got < 0)
		rc = -1;
	tokstream_reader_close(r);
	return rc;
}

/* Lines of decimal ids separated by spaces or tabs. */
static int decode_ids(dec *d, FILE *fp, const char *name, int bos, int eos, titan_err *err)
{
	char *line = NULL;
	size_t cap = 0, nids = 0, capids = 0;
	uint32_t *ids = NULL;
	ssize_t len;
	uint64_t lineno = 0;
	int64_t nv = tok_n_vocab(d->tok);
	int rc = 0;
	while (rc == 0 && (len = getline(&line, &cap, fp)) >= 0) {
		lineno++;
		nids = 0;
		char *p = line;
		for (;;) {
			while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
				p++;
			if (*p == '\0')
				break;
			char *end;
			errno = 0;
			unsigned long long v = strtoull(p, &end, 10);
			if (end == p || errno || *p == '-' || v >= (unsigned long long)nv ||
			    (*end && *end != ' ' && *end != '\t' && *end != '\r' && *end != '\n')) {
				rc = err_set(err, "%s:%llu: '%.20s' is not an id below %lld", name,
					     (unsigned long long)lineno, p, (long long)nv);
				break;
			}
			if (nids == capids) {
				capids = capids ? 2 * capids : 1024;
				uint32_t *q = realloc(ids, capids * sizeof *q);
				if (q == NULL) {
					rc = err_set(err, "out of memory");
					break;
				}
				ids = q;
			}
			ids[nids++] = (uint32_t)v;
			p = end;
		}
		if (rc == 0)
			rc = emit(d, ids, nids, bos, eos, err);
	}
	if (rc == 0 && ferror(fp))
		rc = err_errno(err, "%s", name);
	free(line);
	free(ids);
	return rc;
}

int tkz_decode(const tkz_opts *o)
{
	titan_err err;
	tok *t;
	uint8_t fpr[32];
	if (tkz_load(o, &t, fpr, &err) != 0)
		titan_die_err(&err);
	dec d = {.tok = t, .jsonl = o->in.format == TEXTIN_JSONL};
	int bos = (o->bos >= 0 ? o->bos : tok_default_add_bos(t)) ? tok_bos_id(t) : -1;
	int eos = (o->eos >= 0 ? o->eos : tok_default_add_eos(t)) ? tok_eos_id(t) : -1;
	double t0 = tkz_now();
	int rc = 0;
	for (int i = 0; rc == 0 && i < o->n_files; i++) {
		int is_stdin = strcmp(o->files[i], "-") == 0;
		const char *name = is_stdin ? "<stdin>" : o->files[i];
		FILE *fp = is_stdin ? stdin : fopen(o->files[i], "rb");
		if (fp == NULL) {
			rc = err_errno(&err, "%s", o->files[i]);
			break;
		}
		rc = o->ids ? decode_ids(&d, fp, name, bos, eos, &err)
			    : decode_stream(&d, fp, name, fpr, &err);
		if (!is_stdin)
			fclose(fp);
	}
	if (rc == 0 && fflush(stdout) != 0)
		rc = err_errno(&err, "stdout");
	tok_buf_free(&d.bytes);
	free(d.line.p);
	tok_free(t);
	if (rc != 0)
		titan_die_err(&err);
	if (!o->quiet)
		fprintf(stderr, "%s: decoded %llu documents, %llu tokens in %.2f s\n",
			titan_progname(), (unsigned long long)d.docs, (unsigned long long)d.tokens,
			tkz_now() - t0);
	return TITAN_EXIT_OK;
}
