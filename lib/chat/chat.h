/* chat.h: chat conversations to token ids and label masks, as torchtitan
 * 0.3.0's ChatDataset (hf_datasets/text_datasets.py) makes them.
 *
 * The template: the tokenizer folder's chat_template.jinja when present, else
 * tokenizer_config.json's "chat_template" (0.3.0's order), rendered by
 * lib/jinja.  0.3.0 renders with `messages` (and add_generation_prompt)
 * alone, so a template reading bos_token fails there as here (Llama 3's:
 * "'bos_token' is undefined"); with CHAT_SPECIAL_TOKENS, bos_token and
 * eos_token (tokenizer_config.json's strings) are passed too, as HF's
 * apply_chat_template passes them.
 *
 * A conversation is 0.3.0's single turn, [user, assistant] (anything else is
 * refused, as 0.3.0 refuses it).  Per conversation (_tokenize_sample):
 *   full   = render(messages) with its trailing newlines cut;
 *   tokens = encode(full, add_bos=True, add_eos=False), then EOS appended
 *            unless it ends with EOS;
 *   prompt = render(messages[:1], add_generation_prompt=True), encoded alike;
 *   mask[i] = 1 (token i is a training target) for i >= len(prompt tokens):
 *            0.3.0's labels = tokens[1:] with labels[:len(prompt) - 1]
 *            ignored, so the first reply token is the first target.
 * The drop of conversations longer than seq_len + 1 tokens belongs to the
 * loader, which knows seq_len.
 *
 * encode(text, add_bos=True, add_eos=False) is torchtitan's
 * HuggingFaceTokenizer.encode: HF's post-processor template around the text
 * (BOS in front unless the template adds it). */
#ifndef TITAN_CHAT_H
#define TITAN_CHAT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "tok/tok.h"

enum { CHAT_SPECIAL_TOKENS = 1 }; /* chat_opts.flags */

typedef struct chat_opts {
	unsigned flags;
	const char *user_field;      /* with assistant_field: the conversation is
					{"role": "user", "content": line[user_field]},
					{"role": "assistant", ...[assistant_field]}
					(0.3.0's sft_debugmodel sample_processor); NULL:
					the line's "messages" array */
	const char *assistant_field;
} chat_opts;

typedef struct chat chat;

/* The chat template of the tokenizer at path (a tokenizer.json or its folder)
 * for t, which must have an EOS.  Fails naming the file when it has no
 * template or the template does not parse. */
chat *chat_load(const char *path, const tok *t, const chat_opts *o, titan_err *err);
void chat_free(chat *c);

/* One conversation (a JSON object of len bytes: one line of chat JSONL) to
 * ids and mask (one byte per id, 1 = target), appended to the empty ids and
 * *mask (malloc'd, grown as needed; *mask_cap its size).  Thread-safe on a
 * shared chat with a tok_enc per thread. */
int chat_encode(const chat *c, tok_enc *e, const char *line, size_t len, tok_ids *ids,
		uint8_t **mask, size_t *mask_cap, titan_err *err);

#endif
