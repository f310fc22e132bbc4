/* torchtitan 0.3.0's data loader state (a pickle) and titan's position. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader/loader.h"
#include "pickle/pickle.h"

/* The key of titan's own record in the pickle; 0.3.0's StatefulDataLoader
 * reads its keys by name and passes over any other. */
#define TITAN_KEY "titan_loader_state"

/* Why a titan position is not one of 0.3.0's loader (NULL when it is). */
static const char *unmapped(const loader *l, const loader_state *s, int dp_degree)
{
	if (s->split != LOADER_TRAIN)
		return "a validation loader's state";
	if (loader_mix_sources(l) > 0)
		return "a mixture of shard folders (0.3.0's InterleavedDataset state, its random "
		       "generator's and every source's, is not written)";
	if (s->sft_dp)
		return "SFT packing: titan keeps its own position, not 0.3.0's ChatDataset buffers";
	if (!s->documents)
		return "titan's loader packs windows of seq_len + 1 tokens here, not 0.3.0's "
		       "documents (a run without --module)";
	if (s->shuffle)
		return "titan's loader shuffles the windows";
	if (dp_degree != 1)
		return "at a dp degree above 1 titan's ranks take turns over one stream of "
		       "windows, while 0.3.0 gives each rank its own contiguous block of the "
		       "documents (split_dataset_by_node)";
	if (s->windows > loader_windows(l))
		return "past the first epoch: 0.3.0 reshuffles the documents in every later "
		       "epoch and carries the partial last window over, titan does not";
	return NULL;
}

static int put(pk_arena *a, pk_val *dict, const char *key, pk_val *v)
{
	return v == NULL || pk_dict_set(a, dict, pk_str(a, key), v) != 0 ? -1 : 0;
}

/* HuggingFaceTextDataset.state_dict() after `windows` windows of seq_len
 * pairs: the documents up to the one holding the last pair emitted are read
 * (sample_idx), and the rest of that one's pairs are in the buffers with
 * their positions in it. */
static int dataset_state(const loader *l, const loader_state *s, pk_arena *a, pk_val **out,
			 titan_err *err)
{
	pk_val *in = pk_new(a, PK_LIST), *lab = pk_new(a, PK_LIST), *pos = pk_new(a, PK_LIST);
	uint64_t sample_idx = 0;
	loader_doc doc = {0};
	int rc = in && lab && pos ? 0 : err_set(err, "out of memory");
	if (rc == 0 && s->windows > 0) {
		uint64_t emitted = s->windows * (uint64_t)s->seq_len, d;
		rc = loader_doc_of_pair(l, emitted - 1, &d, err) || loader_doc_read(l, d, &doc, err);
		sample_idx = d + 1;
		for (uint64_t j = emitted - doc.pairs_before; rc == 0 && j + 1 < doc.n; j++)
			if (pk_append(a, in, pk_int(a, doc.tokens[j])) ||
			    pk_append(a, lab, pk_int(a, doc.tokens[j + 1])) ||
			    pk_append(a, pos, pk_int(a, (int64_t)j)))
				rc = err_set(err, "out of memory");
		free(doc.tokens);
	}
	pk_val *ds = rc == 0 ? pk_new(a, PK_DICT) : NULL;
	if (rc == 0 && (ds == NULL || put(a, ds, "inputs_buffer", in) ||
			put(a, ds, "labels_buffer", lab) || put(a, ds, "positions_buffer", pos) ||
			put(a, ds, "sample_idx", pk_int(a, (int64_t)sample_idx)) ||
			put(a, ds, "epoch", pk_int(a, 0))))
		rc = err_set(err, "out of memory");
	*out = ds;
	return rc;
}

/* _StatefulSingleProcessDataLoaderIter.state_dict() over the dataset's state
 * ds: an IterableDataset's batches counted, its sampler a constant one. */
static int loader_keys(pk_arena *a, pk_val *root, pk_val *ds, uint64_t batches, int64_t rows)
{
	pk_val *sampler = pk_new(a, PK_DICT), *fetcher = pk_new(a, PK_DICT);
	return sampler == NULL || fetcher == NULL ||
	       put(a, sampler, "samples_yielded", pk_int(a, (int64_t)batches * rows)) ||
	       put(a, fetcher, "dataset_iter_state", pk_new(a, PK_NONE)) ||
	       put(a, fetcher, "fetcher_ended", pk_bool(a, 0)) ||
	       put(a, root, "_index_sampler_state", pk_new(a, PK_NONE)) ||
	       put(a, root, "_sampler_iter_state", sampler) ||
	       put(a, root, "_sampler_iter_yielded", pk_int(a, (int64_t)batches)) ||
	       put(a, root, "_num_yielded", pk_int(a, (int64_t)batches)) ||
	       put(a, root, "_IterableDataset_len_called", pk_new(a, PK_NONE)) ||
	       put(a, root, "_shared_seed", pk_new(a, PK_NONE)) ||
	       put(a, root, "fetcher_state", fetcher) || put(a, root, "dataset_state", ds) ||
	       put(a, root, "_iterator_finished", pk_bool(a, 0))
		       ? -1 : 0;
}

int loader_state_030_encode(const loader *l, const loader_state *s, int64_t local_batch,
			    int dp_degree, uint8_t **out, size_t *n, const char **why,
			    titan_err *err)
{
	*out = NULL;
	*why = unmapped(l, s, dp_degree);
	pk_arena *a = pk_arena_new();
	pk_val *root = a ? pk_new(a, PK_DICT) : NULL, *ds = NULL;
	int rc = root ? 0 : err_set(err, "out of memory");
	if (rc == 0 && *why == NULL) {
		rc = dataset_state(l, s, a, &ds, err);
		if (rc == 0 && loader_keys(a, root, ds, s->windows / (uint64_t)local_batch,
					   local_batch) != 0)
			rc = err_set(err, "out of memory");
	}
	uint8_t rec[LOADER_STATE_BYTES];
	loader_state_encode(s, rec);
	if (rc == 0 && put(a, root, TITAN_KEY, pk_bytes(a, rec, sizeof rec)) != 0)
		rc = err_set(err, "out of memory");
	pk_buf b = {0};
	if (rc == 0 && (rc = pk_dump(&b, root, 4, err)) == 0) {
		*out = b.p;
		*n = b.n;
	} else {
		free(b.p);
	}
	pk_free(a);
	return rc;
}

/* Decode ------------------------------------------------------------------ */

static int int_field(const pk_val *d, const char *key, int64_t *v, titan_err *err)
{
	const pk_val *x = pk_dict_get(d, key);
	if (x == NULL || x->kind != PK_INT || x->i < 0)
		return err_set(err, "dataset_state.%s is not a count", key);
	*v = x->i;
	return 0;
}

/* The three buffers: lists of ints of one length. */
static int buffers(const pk_val *ds, const pk_val *buf[3], titan_err *err)
{
	static const char *const names[3] = {"inputs_buffer", "labels_buffer",
					     "positions_buffer"};
	for (int k = 0; k < 3; k++) {
		buf[k] = pk_dict_get(ds, names[k]);
		if (buf[k] == NULL || buf[k]->kind != PK_LIST)
			return err_set(err, "dataset_state.%s is not a list", names[k]);
		if (buf[k]->n != buf[0]->n)
			return err_set(err, "dataset_state.%s holds %zu items, inputs_buffer %zu",
				       names[k], buf[k]->n, buf[0]->n);
		for (size_t i = 0; i < buf[k]->n; i++)
			if (buf[k]->items[i]->kind != PK_INT)
				return err_set(err, "dataset_state.%s[%zu] is not an int", names[k], i);
	}
	return 0;
}

/* The buffers are document d's last pairs (d = sample_idx - 1): titan's
 * position is the pairs before them. */
static int position_of(const loader *l, const loader_state *me, uint64_t sample_idx,
		       const pk_val *buf[3], uint64_t *windows, titan_err *err)
{
	size_t len = buf[0]->n;
	uint64_t docs = loader_doc_count(l);
	if (sample_idx > docs)
		return err_set(err, "dataset_state.sample_idx %llu is past the %llu documents of "
			       "the data (another data set?)", (unsigned long long)sample_idx,
			       (unsigned long long)docs);
	if (sample_idx == 0) {
		if (len > 0)
			return err_set(err, "dataset_state: %zu pairs buffered before any document "
				       "was read", len);
		*windows = 0;
		return 0;
	}
	loader_doc doc;
	if (loader_doc_read(l, sample_idx - 1, &doc, err) != 0)
		return -1;
	uint64_t pairs = doc.n > 0 ? doc.n - 1 : 0;
	int rc = 0;
	if (len > pairs)
		rc = err_set(err, "dataset_state: %zu pairs buffered, document %llu has %llu "
			     "(another data set?)", len, (unsigned long long)(sample_idx - 1),
			     (unsigned long long)pairs);
	uint64_t j = pairs - len;
	for (size_t i = 0; rc == 0 && i < len; i++) {
		int64_t want[3] = {doc.tokens[j + i], doc.tokens[j + i + 1], (int64_t)(j + i)};
		for (int k = 0; rc == 0 && k < 3; k++)
			if (buf[k]->items[i]->i != want[k])
				rc = err_set(err, "dataset_state.%s_buffer[%zu] is %lld, titan's "
					     "document %llu has %lld there (another data set or "
					     "document order?)",
					     k == 0 ? "inputs" : k == 1 ? "labels" : "positions", i,
					     (long long)buf[k]->items[i]->i,
					     (unsigned long long)(sample_idx - 1), (long long)want[k]);
	}
	uint64_t emitted = doc.pairs_before + j;
	free(doc.tokens);
	if (rc == 0 && emitted % (uint64_t)me->seq_len != 0)
		rc = err_set(err, "dataset_state: %llu pairs emitted, not windows of seq_len %lld "
			     "(0.3.0 ran with another seq_len?)", (unsigned long long)emitted,
			     (long long)me->seq_len);
	*windows = emitted / (uint64_t)me->seq_len;
	return rc;
}

/* 0.3.0's keys: 1 with why when they describe a loader titan's cannot be. */
static int from_030(const loader *l, const pk_val *root, int64_t world_size, loader_state *s,
		    char *why, size_t whycap, titan_err *err)
{
	const pk_val *ds = pk_dict_get(root, "dataset_state");
	const pk_val *buf[3];
	int64_t sample_idx = 0, epoch = 0;
	loader_state me;
	loader_state_get(l, &me);
	if (pk_dict_get(root, "_snapshot") != NULL)
		snprintf(why, whycap, "0.3.0's loader ran worker processes (num_workers > 0), each "
			 "over every document");
	else if (pk_dict_get(root, "_num_yielded") == NULL || ds == NULL || ds->kind != PK_DICT)
		snprintf(why, whycap, "a pickle without a data set's state (not a StatefulDataLoader's)");
	else if (pk_dict_get(ds, "data") != NULL)
		snprintf(why, whycap, "a streaming data set's state (HF datasets' shard positions, "
			 "not documents read)");
	else if (pk_dict_get(ds, "positions_buffer") == NULL)
		snprintf(why, whycap, "no positions_buffer: not 0.3.0's HuggingFaceTextDataset "
			 "(torchtitan 0.2.2's?)");
	else if (buffers(ds, buf, err) != 0 || int_field(ds, "sample_idx", &sample_idx, err) != 0 ||
		 (pk_dict_get(ds, "epoch") && int_field(ds, "epoch", &epoch, err) != 0))
		return -1;
	else if (world_size != 1)
		snprintf(why, whycap, "0.3.0 split the documents over %lld dp ranks "
			 "(split_dataset_by_node: a contiguous block each), titan's ranks read one "
			 "stream", (long long)world_size);
	else if (epoch > 0)
		snprintf(why, whycap, "0.3.0's loader is in epoch %lld, whose documents it "
			 "reshuffled (titan reads every epoch in the same order)", (long long)epoch);
	else if (!me.documents || me.shuffle || me.split != LOADER_TRAIN)
		snprintf(why, whycap, "titan's loader here %s", me.shuffle ? "shuffles" :
			 "packs windows, not 0.3.0's documents (a run without --module)");
	else {
		*s = me;
		snprintf(why, whycap, "torchtitan 0.3.0's: %lld documents read, %zu pairs buffered",
			 (long long)sample_idx, buf[0]->n);
		return position_of(l, &me, (uint64_t)sample_idx, buf, &s->windows, err);
	}
	return 1;
}

int loader_state_030_decode(const loader *l, const uint8_t *buf, size_t n, int64_t world_size,
			    loader_state *s, char *why, size_t whycap, titan_err *err)
{
	static const char *const none[] = {NULL};
	static const pk_allow plain = {none};
	pk_val *root;
	pk_arena *a = NULL;
	int rc = pk_load(buf, n, &plain, &root, &a, err);
	if (rc != 0) {
		err_prefix(err, "not a plain pickle of a data loader's state");
	} else if (root->kind != PK_DICT) {
		rc = err_set(err, "a pickle of a %s, not of a data loader's state (a dict)",
			     root->kind == PK_LIST ? "list" : "value");
	} else {
		const pk_val *rec = pk_dict_get(root, TITAN_KEY);
		snprintf(why, whycap, "titan's record in the pickle");
		if (rec != NULL) {
			rc = rec->kind == PK_BYTES ? loader_state_decode((const uint8_t *)rec->s,
									 rec->len, s, err)
						   : err_set(err, TITAN_KEY " is not bytes");
		} else if (loader_mix_sources(l) > 0) {
			snprintf(why, whycap, "titan's loader reads a mixture here, whose draws it "
				 "does not map from a 0.3.0 loader's state");
			rc = 1;
		} else {
			rc = from_030(l, root, world_size, s, why, whycap, err);
		}
	}
	pk_free(a);
	return rc;
}
