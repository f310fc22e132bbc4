/* The sequence's chunks over the cp ranks (torch's _HeadTailLoadBalancer,
 * _PTRRLoadBalancer, or none) and the tokens each rank holds. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cp/cp.h"

int cp_balance_parse(const char *name, cp_balance *b, titan_err *e)
{
	if (name == NULL || strcasecmp(name, "none") == 0) {
		*b = CP_BALANCE_NONE;
		return 0;
	}
	if (strcmp(name, "headtail") == 0) {
		*b = CP_BALANCE_HEADTAIL;
		return 0;
	}
	if (strcmp(name, "ptrr") == 0) {
		*b = CP_BALANCE_PTRR;
		return 0;
	}
	return err_set(e, "parallelism.context_parallel_load_balancer: '%s', expected headtail, "
		       "ptrr or None", name);
}

int64_t cp_balance_multiple(const char *name)
{
	cp_balance b;
	titan_err ignored;
	if (cp_balance_parse(name, &b, &ignored) != 0)
		b = CP_BALANCE_HEADTAIL;
	return b == CP_BALANCE_NONE ? 1 : b == CP_BALANCE_PTRR ? CP_PTRR_BLOCK : 2;
}

int cp_balance_check(cp_balance b, int cp, int documents, titan_err *e)
{
	if (b == CP_BALANCE_PTRR && cp > 1 && !documents)
		return err_set(e, "parallelism.context_parallel_load_balancer 'ptrr' deals the "
			       "blocks of FlexAttention's document masks, which a torchtitan 0.3.0 run "
			       "has (--module/--config): this run's attention is plainly causal; use "
			       "headtail or None");
	return 0;
}

int cp_rotate_parse(const char *name, cp_rotate *r, titan_err *e)
{
	if (strcmp(name, "allgather") == 0)
		*r = CP_ROTATE_ALLGATHER;
	else if (strcmp(name, "alltoall") == 0)
		*r = CP_ROTATE_ALLTOALL;
	else
		return err_set(e, "parallelism.context_parallel_rotate_method: '%s', expected "
			       "allgather or alltoall", name);
	return 0;
}

int cp_layout_init(cp_layout *l, int64_t seq_len, int cp, cp_balance b, titan_err *e)
{
	return cp_layout_init_block(l, seq_len, cp, b, CP_PTRR_BLOCK, e);
}

int cp_layout_init_block(cp_layout *l, int64_t seq_len, int cp, cp_balance b, int64_t block,
			 titan_err *e)
{
	if (cp < 1 || seq_len < 1 || block < 1)
		return err_set(e, "context parallel: %d ranks for %lld tokens", cp,
			       (long long)seq_len);
	if (b == CP_BALANCE_PTRR) {
		if (seq_len % (block * cp))
			return err_set(e, "training.seq_len %lld is not divisible by %lld (FlexAttention's "
				       "block %lld x parallelism.context_parallel_degree %d: the ptrr "
				       "load balancer deals each rank as many whole blocks)",
				       (long long)seq_len, (long long)(block * cp), (long long)block, cp);
		*l = (cp_layout){.cp = cp, .chunks = (int)(seq_len / (block * cp)), .seq_len = seq_len,
				 .chunk = block, .balance = b};
		return 0;
	}
	int chunks = b == CP_BALANCE_HEADTAIL ? 2 : 1;
	if (seq_len % ((int64_t)cp * chunks)) {
		if (chunks == 2)
			return err_set(e, "training.seq_len %lld is not divisible by %d (2 x "
				       "parallelism.context_parallel_degree %d: the headtail load "
				       "balancer gives each rank two chunks)", (long long)seq_len,
				       2 * cp, cp);
		return err_set(e, "training.seq_len %lld is not divisible by "
			       "parallelism.context_parallel_degree %d", (long long)seq_len, cp);
	}
	*l = (cp_layout){.cp = cp, .chunks = chunks, .seq_len = seq_len,
			 .chunk = seq_len / ((int64_t)cp * chunks), .balance = b};
	return 0;
}

/* ptrr's deal for a row that is one document: block i's work is i + 1, so
 * the blocks go round the ranks from the last one down; round g (0 the
 * first) gives rank r block n-1-g cp-r (g even) or n-(g+1) cp+r (g odd), and
 * a rank's k-th block in sequence order is its round chunks-1-k's. */
static int ptrr_one_document(const cp_layout *l, int r, int k)
{
	int n = l->cp * l->chunks, g = l->chunks - 1 - k;
	return g % 2 == 0 ? n - 1 - g * l->cp - r : n - (g + 1) * l->cp + r;
}

int cp_chunk_index(const cp_layout *l, int r, int k)
{
	if (l->balance == CP_BALANCE_PTRR)
		return ptrr_one_document(l, r, k);
	return l->chunks == 1 ? r : k == 0 ? r : 2 * l->cp - 1 - r;
}

void cp_positions(const cp_layout *l, int r, int64_t *pos)
{
	for (int k = 0; k < l->chunks; k++) {
		int64_t first = cp_chunk_index(l, r, k) * l->chunk;
		for (int64_t i = 0; i < l->chunk; i++)
			pos[k * l->chunk + i] = first + i;
	}
}

typedef struct block_work {
	int64_t work;
	int block;
} block_work;

/* Most work first, ties in sequence order (torch sorts stably). */
static int by_work(const void *a, const void *b)
{
	const block_work *x = a, *y = b;
	if (x->work != y->work)
		return x->work > y->work ? -1 : 1;
	return (x->block > y->block) - (x->block < y->block);
}

static int ascending(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

/* torch's _PTRRLoadBalancer.ptrr_scheduling over the row's block mask: block
 * i's work is its non-empty key blocks, i - doc[i block] / block + 1 (its
 * first query's document reaches back furthest; the causal mask stops at
 * the diagonal). */
static void ptrr_map(const cp_layout *l, const int32_t *doc, block_work *w, int *map)
{
	int n = l->cp * l->chunks;
	for (int i = 0; i < n; i++)
		w[i] = (block_work){.work = i - doc[(int64_t)i * l->chunk] / l->chunk + 1, .block = i};
	qsort(w, (size_t)n, sizeof *w, by_work);
	for (int j = 0; j < n; j++) {
		int g = j / l->cp, at = j % l->cp, r = g % 2 == 0 ? at : l->cp - 1 - at;
		map[r * l->chunks + g] = w[j].block;
	}
	for (int r = 0; r < l->cp; r++)
		qsort(map + r * l->chunks, (size_t)l->chunks, sizeof *map, ascending);
}

static void fixed_map(const cp_layout *l, int *map)
{
	for (int r = 0; r < l->cp; r++)
		for (int k = 0; k < l->chunks; k++)
			map[r * l->chunks + k] = cp_chunk_index(l, r, k);
}

int cp_row_map(const cp_layout *l, const int32_t *doc, int *map, titan_err *e)
{
	if (doc == NULL || cp_layout_fixed(l)) {
		fixed_map(l, map);
		return 0;
	}
	block_work *w = malloc((size_t)cp_map_len(l) * sizeof *w);
	if (w == NULL)
		return err_set(e, "context parallel: out of memory for the ptrr layout");
	ptrr_map(l, doc, w, map);
	free(w);
	return 0;
}

int cp_row_maps(const cp_layout *l, const int32_t *positions, int64_t b, int *maps, titan_err *e)
{
	int n = cp_map_len(l);
	if (positions == NULL || cp_layout_fixed(l)) {
		for (int64_t bi = 0; bi < b; bi++)
			fixed_map(l, maps + bi * n);
		return 0;
	}
	int32_t *doc = malloc((size_t)l->seq_len * sizeof *doc);
	block_work *w = malloc((size_t)n * sizeof *w);
	if (doc == NULL || w == NULL) {
		free(doc), free(w);
		return err_set(e, "context parallel: out of memory for the ptrr layout");
	}
	for (int64_t bi = 0; bi < b; bi++) {
		const int32_t *pos = positions + bi * l->seq_len;
		for (int64_t i = 0; i < l->seq_len; i++)
			doc[i] = (int32_t)(i - pos[i]);
		ptrr_map(l, doc, w, maps + bi * n);
	}
	free(doc), free(w);
	return 0;
}

/* Copy rank r's chunks between full (b, seq_len) and local (b, T) arrays. */
static void move(const cp_layout *l, const int *maps, int r, char *full, char *local, int64_t b,
		 size_t elem, int to_local)
{
	int64_t T = cp_local_len(l);
	size_t n = (size_t)l->chunk * elem;
	for (int64_t bi = 0; bi < b; bi++)
		for (int k = 0; k < l->chunks; k++) {
			int at = maps ? maps[bi * cp_map_len(l) + r * l->chunks + k]
				      : cp_chunk_index(l, r, k);
			size_t fo = ((size_t)bi * (size_t)l->seq_len + (size_t)at * (size_t)l->chunk) *
				    elem;
			size_t lo = ((size_t)bi * (size_t)T + (size_t)k * (size_t)l->chunk) * elem;
			if (to_local)
				memcpy(local + lo, full + fo, n);
			else
				memcpy(full + fo, local + lo, n);
		}
}

void cp_shard_rows(const cp_layout *l, const int *maps, int r, const void *full, void *local,
		   int64_t b, size_t elem)
{
	move(l, maps, r, (char *)full, local, b, elem, 1); /* reads full only */
}

void cp_unshard_rows(const cp_layout *l, const int *maps, int r, const void *local, void *full,
		     int64_t b, size_t elem)
{
	move(l, maps, r, full, (char *)local, b, elem, 0); /* reads local only */
}

void cp_shard(const cp_layout *l, int r, const void *full, void *local, int64_t b, size_t elem)
{
	cp_shard_rows(l, NULL, r, full, local, b, elem);
}

void cp_unshard(const cp_layout *l, int r, const void *local, void *full, int64_t b, size_t elem)
{
	cp_unshard_rows(l, NULL, r, local, full, b, elem);
}
