/* Chat conversations to ids and label masks: see chat.h. */
#include "chat/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "jinja/jinja.h"

struct chat {
	jinja_tpl *tpl;
	const tok *t;
	int32_t bos, eos;
	int add_bos, post_eos;
	json_t *specials;      /* bos_token / eos_token strings, or NULL */
	chat_opts o;
	char *user_field, *assistant_field;
};

/* The folder of a tokenizer path. */
static void folder_of(const char *path, char *dir, size_t cap)
{
	struct stat st;
	snprintf(dir, cap, "%s", path);
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		return;
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	else
		snprintf(dir, cap, ".");
}

static char *read_file(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL)
		return NULL;
	char *buf = NULL;
	size_t cap = 0;
	*n = 0;
	for (;;) {
		if (*n + 4096 + 1 > cap) {
			cap = cap ? 2 * cap : 65536;
			char *b = realloc(buf, cap);
			if (b == NULL) {
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = b;
		}
		size_t k = fread(buf + *n, 1, cap - *n - 1, f);
		*n += k;
		if (k == 0)
			break;
	}
	int bad = ferror(f);
	fclose(f);
	if (bad) {
		free(buf);
		return NULL;
	}
	buf[*n] = '\0';
	return buf;
}

/* tokenizer_config.json's token entry: a string or {"content": ...}. */
static const char *token_string(json_t *v)
{
	if (json_is_object(v))
		v = json_object_get(v, "content");
	return json_string_value(v);
}

/* The template text (malloc'd) and, with specials, bos_token / eos_token. */
static char *template_text(chat *c, const char *dir, size_t *n, titan_err *err)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
	char *text = read_file(path, n);
	snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
	json_error_t je;
	/* its model_max_length may be past int64 (Llama 3's is 1e30) */
	json_t *cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je);
	if (cfg == NULL && text == NULL) {
		err_set(err, "%s: %s (and no chat_template.jinja beside it): the tokenizer has no "
			"chat template", path, je.text);
		return NULL;
	}
	if (text == NULL) {
		json_t *ct = json_object_get(cfg, "chat_template");
		if (json_is_string(ct)) {
			*n = json_string_length(ct);
			text = malloc(*n + 1);
			if (text)
				memcpy(text, json_string_value(ct), *n + 1);
		} else {
			err_set(err, "%s: %s", path, ct == NULL ? "no \"chat_template\" (and no "
				"chat_template.jinja beside it)" : "\"chat_template\" is not a string "
				"(a list of named templates is not supported)");
		}
	}
	if (text != NULL && (c->o.flags & CHAT_SPECIAL_TOKENS) && cfg != NULL) {
		const char *b = token_string(json_object_get(cfg, "bos_token"));
		const char *e = token_string(json_object_get(cfg, "eos_token"));
		c->specials = json_object();
		if (b)
			json_object_set_new(c->specials, "bos_token", json_string(b));
		if (e)
			json_object_set_new(c->specials, "eos_token", json_string(e));
	}
	json_decref(cfg);
	return text;
}

chat *chat_load(const char *path, const tok *t, const chat_opts *o, titan_err *err)
{
	chat *c = calloc(1, sizeof *c);
	if (c == NULL) {
		err_set(err, "out of memory");
		return NULL;
	}
	c->o = *o;
	c->t = t;
	c->bos = tok_bos_id(t);
	c->eos = tok_eos_id(t);
	c->add_bos = tok_default_add_bos(t);
	c->post_eos = tok_post_adds_eos(t);
	char dir[4096];
	folder_of(path, dir, sizeof dir);
	size_t n;
	char *text = NULL;
	if (c->eos < 0) {
		/* 0.3.0's ChatDataset refuses it too: the EOS ends every conversation */
		err_set(err, "%s: the tokenizer has no EOS token; chat data needs one", path);
	} else if ((o->user_field == NULL) != (o->assistant_field == NULL)) {
		err_set(err, "chat: a user field needs an assistant field and back");
	} else if ((text = template_text(c, dir, &n, err)) != NULL) {
		c->tpl = jinja_parse(text, n, err);
		if (c->tpl == NULL)
			err_prefix(err, "%s", dir);
	}
	if (o->user_field && (!(c->user_field = strdup(o->user_field)) ||
			      !(c->assistant_field = strdup(o->assistant_field)))) {
		err_set(err, "out of memory");
		jinja_free(c->tpl);
		c->tpl = NULL;
	}
	free(text);
	if (c->tpl == NULL) {
		chat_free(c);
		return NULL;
	}
	c->o.user_field = c->user_field;
	c->o.assistant_field = c->assistant_field;
	return c;
}

void chat_free(chat *c)
{
	if (c == NULL)
		return;
	jinja_free(c->tpl);
	json_decref(c->specials);
	free(c->user_field);
	free(c->assistant_field);
	free(c);
}

/* The conversation's messages: the line's "messages", or the two fields. */
static json_t *messages_of(const chat *c, json_t *line, titan_err *err)
{
	if (!json_is_object(line)) {
		err_set(err, "not a JSON object");
		return NULL;
	}
	if (c->o.user_field == NULL) {
		json_t *m = json_object_get(line, "messages");
		if (!json_is_array(m)) {
			err_set(err, "no \"messages\" array");
			return NULL;
		}
		return json_incref(m);
	}
	json_t *u = json_object_get(line, c->o.user_field);
	json_t *a = json_object_get(line, c->o.assistant_field);
	if (!json_is_string(u) || !json_is_string(a)) {
		err_set(err, "no string \"%s\" and \"%s\"", c->o.user_field, c->o.assistant_field);
		return NULL;
	}
	return json_pack("[{s:s,s:O},{s:s,s:O}]", "role", "user", "content", u, "role",
			 "assistant", "content", a);
}

/* 0.3.0's _validate_messages: a single turn, user then assistant. */
static int check_single_turn(json_t *m, titan_err *err)
{
	if (json_array_size(m) != 2)
		return err_set(err, "expected single-turn [user, assistant], got %zu messages",
			       json_array_size(m));
	static const char *const roles[] = {"user", "assistant"};
	static const char *const which[] = {"First", "Second"};
	for (int i = 0; i < 2; i++) {
		json_t *msg = json_array_get(m, (size_t)i);
		const char *r = json_string_value(json_object_get(msg, "role"));
		if (r == NULL || strcmp(r, roles[i]))
			return err_set(err, "%s message must be '%s', got '%s'", which[i], roles[i],
				       r ? r : "(no role)");
	}
	return 0;
}

/* render(vars) into *out (malloc'd). */
static int render(const chat *c, json_t *messages, int gen_prompt, char **out, size_t *n,
		  titan_err *err)
{
	json_t *vars = c->specials ? json_deep_copy(c->specials) : json_object();
	if (vars == NULL || json_object_set(vars, "messages", messages) != 0 ||
	    (gen_prompt && json_object_set_new(vars, "add_generation_prompt", json_true()) != 0)) {
		json_decref(vars);
		return err_set(err, "out of memory");
	}
	int rc = jinja_render(c->tpl, vars, out, n, err);
	json_decref(vars);
	return rc;
}

/* torchtitan's encode(text, add_bos=True, add_eos=False), appended to ids. */
static int encode(const chat *c, tok_enc *e, const char *text, size_t n, tok_ids *ids,
		  titan_err *err)
{
	if (c->add_bos && tok_ids_push(ids, c->bos, err) != 0)
		return -1;
	if (tok_encode(e, (const uint8_t *)text, n, ids, err) != 0)
		return -1;
	return c->post_eos ? tok_ids_push(ids, c->eos, err) : 0;
}

static int tokenize(const chat *c, tok_enc *e, json_t *m, tok_ids *ids, size_t *prompt_len,
		    titan_err *err)
{
	char *full = NULL, *prompt = NULL;
	size_t nf, np;
	json_t *first = json_pack("[O]", json_array_get(m, 0));
	tok_ids p = {0};
	int rc = first == NULL ? err_set(err, "out of memory") : 0;
	if (rc == 0)
		rc = render(c, m, 0, &full, &nf, err);
	while (rc == 0 && nf > 0 && full[nf - 1] == '\n') /* Python's rstrip("\n") */
		nf--;
	if (rc == 0)
		rc = encode(c, e, full, nf, ids, err);
	if (rc == 0 && (ids->n == 0 || ids->v[ids->n - 1] != c->eos))
		rc = tok_ids_push(ids, c->eos, err);
	if (rc == 0)
		rc = render(c, first, 1, &prompt, &np, err);
	if (rc == 0)
		rc = encode(c, e, prompt, np, &p, err);
	*prompt_len = p.n;
	tok_ids_free(&p);
	json_decref(first);
	free(full);
	free(prompt);
	return rc;
}

int chat_encode(const chat *c, tok_enc *e, const char *line, size_t len, tok_ids *ids,
		uint8_t **mask, size_t *mask_cap, titan_err *err)
{
	json_error_t je;
	json_t *root = json_loadb(line, len, 0, &je);
	if (root == NULL)
		return err_set(err, "col %d: %s", je.column, je.text);
	json_t *m = messages_of(c, root, err);
	size_t prompt_len = 0;
	int rc = m == NULL ? -1 : check_single_turn(m, err);
	if (rc == 0)
		rc = tokenize(c, e, m, ids, &prompt_len, err);
	json_decref(m);
	json_decref(root);
	if (rc != 0)
		return -1;
	if (ids->n > *mask_cap) {
		uint8_t *p = realloc(*mask, ids->n);
		if (p == NULL)
			return err_set(err, "out of memory");
		*mask = p;
		*mask_cap = ids->n;
	}
	/* labels[:prompt_len - 1] ignored: label j is token j + 1 */
	size_t first_target = prompt_len > 0 ? prompt_len : 1;
	for (size_t i = 0; i < ids->n; i++)
		(*mask)[i] = i >= first_target;
	return 0;
}
