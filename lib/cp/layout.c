/* The sequence's chunks over the cp ranks (torch's _HeadTailLoadBalancer, or
 * none) and the tokens each rank holds. */
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
	if (strcmp(name, "ptrr") == 0)
		return err_set(e, "parallelism.context_parallel_load_balancer: 'ptrr' balances "
			       "FlexAttention's block masks, which titan's attention does not use; "
			       "use headtail or None");
	return err_set(e, "parallelism.context_parallel_load_balancer: '%s', expected headtail, "
		       "ptrr or None", name);
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
	if (cp < 1 || seq_len < 1)
		return err_set(e, "context parallel: %d ranks for %lld tokens", cp,
			       (long long)seq_len);
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
			 .chunk = seq_len / ((int64_t)cp * chunks)};
	return 0;
}

int cp_chunk_index(const cp_layout *l, int r, int k)
{
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

/* Copy rank r's chunks between full (b, seq_len) and local (b, T) arrays. */
static void move(const cp_layout *l, int r, char *full, char *local, int64_t b,
		 size_t elem, int to_local)
{
	int64_t T = cp_local_len(l);
	size_t n = (size_t)l->chunk * elem;
	for (int64_t bi = 0; bi < b; bi++)
		for (int k = 0; k < l->chunks; k++) {
			size_t fo = ((size_t)bi * (size_t)l->seq_len +
				     (size_t)cp_chunk_index(l, r, k) * (size_t)l->chunk) * elem;
			size_t lo = ((size_t)bi * (size_t)T + (size_t)k * (size_t)l->chunk) * elem;
			if (to_local)
				memcpy(local + lo, full + fo, n);
			else
				memcpy(full + fo, local + lo, n);
		}
}

void cp_shard(const cp_layout *l, int r, const void *full, void *local, int64_t b, size_t elem)
{
	move(l, r, (char *)full, local, b, elem, 1); /* reads full only */
}

void cp_unshard(const cp_layout *l, int r, const void *local, void *full, int64_t b, size_t elem)
{
	move(l, r, full, (char *)local, b, elem, 0); /* reads local only */
}
