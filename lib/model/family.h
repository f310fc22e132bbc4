/* family.h: model families, what torchtitan calls a TrainSpec: a name
 * (model.name), its flavors (model.flavor), and what the model, the parallel
 * plans and titan-ckpt-convert read from it.  The block every family runs is
 * the same pre-norm transformer block made of pieces (model_priv.h): an
 * attention and a feed-forward, chosen by the flavor's fields.
 *
 * Adding a family: a folder lib/<name>/ with one .c file that defines
 * `const model_family <name>_family`, and one line FAMILY(<name>) in
 * lib/model/families.def.  titan(7) walks through Qwen3 as the example. */
#ifndef TITAN_FAMILY_H
#define TITAN_FAMILY_H

#include "model/flavor.h"

struct dcp_hf_key;
struct dcp_hf_model;
struct json_t;

struct model_family {
	const char *name;          /* model.name: "llama3", "qwen3" */
	const char *description;   /* one line for --list-flavors */
	const llama_args *flavors; /* ends with an entry whose name is NULL */
	/* With tied embeddings, the shared table is initialised as the output
	 * projection (Qwen3's init_weights re-initialises output.weight after
	 * tying it), not as the embedding. */
	int tied_init_as_output;
	/* Hugging Face (titan-ckpt-convert to-hf / from-hf): the family's key
	 * table and config.json writer (lib/dcp/dcp.h's dcp_hf_key and
	 * dcp_hf_model.config); Llama's when NULL. */
	const struct dcp_hf_key *hf_keys;
	int (*hf_config)(struct json_t *c, const struct dcp_hf_model *m);
	/* Whether layer l's feed-forward is the mixture of experts (a->moe);
	 * NULL: every layer after moe.dense_layers whose (l + 1) is a multiple of
	 * moe.interleave (Qwen3-MoE: all; DeepSeek V3: after the dense ones;
	 * Llama 4: every interleave-th). */
	int (*moe_layer)(const llama_args *a, int l);
};

/* The registered family named name, or NULL. */
const model_family *model_family_find(const char *name);
/* Family i of the registry (in families.def's order), NULL past the end. */
const model_family *model_family_at(int i);
/* The family a model of these args belongs to (args without one: llama3). */
const model_family *model_family_of(const llama_args *a);
/* The flavor of family f named name, or NULL. */
const llama_args *model_family_flavor(const model_family *f, const char *name);
/* Whether layer l of a model of these args is a mixture-of-experts layer. */
int model_family_moe_layer(const llama_args *a, int l);

#endif
