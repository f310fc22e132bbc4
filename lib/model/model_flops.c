/* The work of a training step in FLOPs: the matmuls of the parameters and
 * attention's products over the (query, key) pairs its mask leaves, counted
 * exactly, beside torchtitan's count (every query against seq_len keys). */
#include "model/model_priv.h"

/* n queries at the start of a causal span of keys, each seeing itself and at
 * most window - 1 keys before it (0: no window): query i sees min(i + 1,
 * window). */
static int64_t triangle(int64_t n, int64_t window)
{
	if (window <= 0 || n <= window)
		return n * (n + 1) / 2;
	return window * (window + 1) / 2 + (n - window) * window;
}

int64_t model_attn_pairs_span(int64_t start, int64_t end, int64_t window, int64_t chunk)
{
	if (chunk <= 0)
		return triangle(end - start, window);
	/* chunks are fixed blocks of absolute positions: a query's keys start at
	 * the later of its document's and its chunk's first position */
	int64_t sum = 0;
	for (int64_t p = start; p < end;) {
		int64_t stop = (p / chunk + 1) * chunk;
		stop = stop < end ? stop : end;
		sum += triangle(stop - p, window);
		p = stop;
	}
	return sum;
}

int64_t model_attn_pairs_row(int64_t t, int64_t window, int64_t chunk, const int32_t *pos)
{
	if (pos == NULL)
		return model_attn_pairs_span(0, t, window, chunk);
	int64_t sum = 0, start = 0;
	for (int64_t i = 1; i <= t; i++)
		if (i == t || pos[i] == 0) {
			sum += model_attn_pairs_span(start, i, window, chunk);
			start = i;
		}
	return sum;
}

/* The matmuls' parameters, torchtitan's way: the active ones (routed experts
 * scaled by top_k / experts) less the embedding table, which is a lookup, not
 * a product; a table tied to the output is counted, since the output
 * projection multiplies by it (torchtitan 0.3.0's get_dense_model_nparams_and_flops). */
static double matmul_params(const model *m)
{
	const llama_args *a = &m->args;
	int64_t emb = a->tied_embeddings ? 0 : (int64_t)a->vocab_size * a->dim;
	return (double)(model_num_params_active(m) - emb);
}

/* 6 x heads x (qk + v head dims) per pair: two products per pair per head
 * (scores and values), forward and twice that in the backward, 2 FLOPs per
 * multiply-add; flash attention's recomputation is not counted. */
static double pair_flops(const model *m)
{
	return 6.0 * m->args.n_heads * (double)(m->head_dim + m->v_head_dim);
}

double model_flops_per_token(const model *m, int seq_len)
{
	return 6.0 * matmul_params(m) + m->args.n_layers * pair_flops(m) * (double)seq_len;
}

static int same_mask(const layer_kind *x, const layer_kind *y)
{
	return x->window == y->window && x->chunk == y->chunk;
}

double model_train_flops(const model *m, int64_t rows, int64_t t, const int32_t *positions)
{
	int n = m->args.n_layers;
	double pairs = 0;
	/* layers share few masks: each distinct one counted once, at its first
	 * layer, times the layers that have it */
	for (int l = 0; l < n; l++) {
		int first = 1, layers = 0;
		for (int j = 0; j < n; j++)
			if (same_mask(&m->kind[j], &m->kind[l])) {
				first &= j >= l;
				layers++;
			}
		if (!first)
			continue;
		double row_sum = 0;
		for (int64_t r = 0; r < rows; r++)
			row_sum += (double)model_attn_pairs_row(t, m->kind[l].window, m->kind[l].chunk,
								positions ? positions + r * t : NULL);
		pairs += layers * row_sum;
	}
	return 6.0 * matmul_params(m) * (double)(rows * t) + pair_flops(m) * pairs;
}
