/* bench_core: figures for lib/core, printed one per line as "name value unit"
 * for scripts/bench/core.sh, which sets them beside the reference tools.
 *
 *   bench_core crc|sha256|pool|progress      built-in inputs
 *   bench_core sha256-file FILE | json FILE  a file's bytes (read from the page cache) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/crc32c.h"
#include "core/json.h"
#include "core/mfile.h"
#include "core/pool.h"
#include "core/progress.h"
#include "core/sha256.h"

/* Run body at least 3 times and for at least 0.5 s; the fastest call's
 * seconds (the least disturbed by other work on the machine). */
#define TIME_IT(secs, body)                                            \
	do {                                                           \
		double start_ = progress_now(), best_ = 1e300, t_;     \
		int n_ = 0;                                            \
		do {                                                   \
			double t0_ = progress_now();                   \
			body;                                          \
			t_ = progress_now();                           \
			if (t_ - t0_ < best_)                          \
				best_ = t_ - t0_;                      \
			n_++;                                          \
		} while (n_ < 3 || t_ - start_ < 0.5);                 \
		(secs) = best_;                                        \
	} while (0)

static unsigned char *random_bytes(size_t n)
{
	unsigned char *b = malloc(n);
	if (b == NULL) {
		fprintf(stderr, "bench_core: out of memory\n");
		exit(1);
	}
	uint64_t x = 42; /* fixed seed */
	for (size_t i = 0; i < n; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		b[i] = (unsigned char)(x >> 56);
	}
	return b;
}

static volatile uint32_t sink;

static void bench_crc(void)
{
	const size_t small = 1 << 20, big = 256u << 20;
	unsigned char *b = random_bytes(big);
	double s;
	TIME_IT(s, sink = crc32c(0, b, small));
	printf("crc32c_hw_cached %.2f GB/s\n", small / s / 1e9);
	TIME_IT(s, sink = crc32c_sw(0, b, small));
	printf("crc32c_table_cached %.2f GB/s\n", small / s / 1e9);
	TIME_IT(s, sink = crc32c(0, b, big));
	printf("crc32c_hw_memory %.2f GB/s\n", big / s / 1e9);
	printf("crc32c_hw_available %d flag\n", crc32c_hw_available());
	free(b);
}

static int bench_sha_buf(const unsigned char *b, size_t n, const char *name)
{
	uint8_t d[32];
	double s;
	titan_err err;
	int rc = 0;
	TIME_IT(s, rc |= sha256(b, n, d, &err));
	if (rc != 0) {
		fprintf(stderr, "bench_core: %s\n", err.msg);
		return 1;
	}
	printf("%s %.2f GB/s\n", name, n / s / 1e9);
	return 0;
}

static int bench_json(const char *path)
{
	titan_err err;
	mfile m;
	if (mfile_open(&m, path, &err) != 0) {
		fprintf(stderr, "bench_core: %s\n", err.msg);
		return 1;
	}
	size_t size = m.size;
	mfile_close(&m);
	double s;
	int bad = 0;
	TIME_IT(s, {
		json_t *v = tjson_load_file(path, 0, &err);
		bad |= v == NULL;
		json_decref(v);
	});
	if (bad) {
		fprintf(stderr, "bench_core: %s\n", err.msg);
		return 1;
	}
	printf("json_load %.4f s\n", s);
	printf("json_load_rate %.1f MB/s\n", size / s / 1e6);
	json_t *v = tjson_load_file(path, 0, &err);
	TIME_IT(s, {
		char *t = tjson_dump_str(v);
		bad |= t == NULL;
		free(t);
	});
	json_decref(v);
	printf("json_dump %.4f s\n", s);
	return bad;
}

static void tiny_job(void *item, void *ctx)
{
	(void)ctx;
	uint64_t *x = item;
	*x = *x * 2654435761u + 1;
}

static void bench_pool(void)
{
	enum { N = 200000 };
	static uint64_t items[N];
	pool *p = pool_create(2, NULL);
	pool_omap *m = pool_omap_create(p, 64, tiny_job, NULL, NULL);
	if (p == NULL || m == NULL) {
		fprintf(stderr, "bench_core: cannot start the pool\n");
		exit(1);
	}
	double t0 = progress_now();
	for (int i = 0; i < N; i++)
		pool_omap_push(m, &items[i]);
	while (pool_omap_pop(m) != NULL)
		;
	double s = progress_now() - t0;
	printf("pool_omap_per_item %.2f us\n", s / N * 1e6);
	pool_omap_destroy(m);
	pool_destroy(p);
}

static void bench_progress(void)
{
	FILE *fp = tmpfile();
	progress pg;
	progress_init_fp(&pg, fp, "bench", PROGRESS_TOKENS, 0);
	double s;
	TIME_IT(s, for (int i = 0; i < 1000; i++) progress_add(&pg, 1));
	progress_finish(&pg, 0);
	fclose(fp);
	printf("progress_add %.1f ns\n", s / 1000 * 1e9);
}

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "";
	if (strcmp(what, "crc") == 0) {
		bench_crc();
	} else if (strcmp(what, "sha256") == 0) {
		unsigned char *b = random_bytes(64u << 20);
		int rc = bench_sha_buf(b, 64u << 20, "sha256");
		free(b);
		return rc;
	} else if (strcmp(what, "sha256-file") == 0 && argc == 3) {
		titan_err err;
		mfile m;
		if (mfile_open(&m, argv[2], &err) != 0) {
			fprintf(stderr, "bench_core: %s\n", err.msg);
			return 1;
		}
		int rc = bench_sha_buf(m.data, m.size, "sha256_file");
		mfile_close(&m);
		return rc;
	} else if (strcmp(what, "json") == 0 && argc == 3) {
		return bench_json(argv[2]);
	} else if (strcmp(what, "pool") == 0) {
		bench_pool();
	} else if (strcmp(what, "progress") == 0) {
		bench_progress();
	} else {
		fprintf(stderr, "usage: bench_core crc|sha256|pool|progress|sha256-file FILE|json FILE\n");
		return 2;
	}
	return 0;
}
