/* The registry of model families (families.def). */
#include <string.h>

#include "model/family.h"

#define FAMILY(name) extern const model_family name##_family;
#include "model/families.def"
#undef FAMILY

static const model_family *const families[] = {
#define FAMILY(name) &name##_family,
#include "model/families.def"
#undef FAMILY
};

#define N_FAMILIES ((int)(sizeof families / sizeof families[0]))

const model_family *model_family_at(int i)
{
	return i >= 0 && i < N_FAMILIES ? families[i] : NULL;
}

const model_family *model_family_find(const char *name)
{
	for (int i = 0; i < N_FAMILIES; i++)
		if (strcmp(families[i]->name, name) == 0)
			return families[i];
	return NULL;
}

const model_family *model_family_of(const llama_args *a)
{
	return a->family ? a->family : model_family_find("llama3");
}

const llama_args *model_family_flavor(const model_family *f, const char *name)
{
	for (const llama_args *a = f->flavors; a->name != NULL; a++)
		if (strcmp(a->name, name) == 0)
			return a;
	return NULL;
}

int model_family_moe_layer(const llama_args *a, int l)
{
	if (a->moe.experts <= 0)
		return 0;
	const model_family *f = model_family_of(a);
	if (f->moe_layer)
		return f->moe_layer(a, l);
	if (l < a->moe.dense_layers)
		return 0;
	return a->moe.interleave <= 1 || (l + 1) % a->moe.interleave == 0;
}
