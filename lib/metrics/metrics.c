#include "metrics/metrics.h"

#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

double metrics_flops_per_token(int64_t params_no_embedding, int n_layers, int n_heads,
			       int head_dim, int64_t seq_len)
{
	return 6.0 * (double)params_no_embedding +
	       6.0 * n_layers * n_heads * (2.0 * head_dim) * (double)seq_len;
}

void metrics_set_rates(metrics_step *s, double flops, double flops_tt, double seconds,
		       double peak)
{
	double rate = seconds > 0 ? flops / seconds : 0, rate_tt = seconds > 0 ? flops_tt / seconds : 0;
	s->tflops = rate / 1e12;
	s->tflops_tt = rate_tt / 1e12;
	s->mfu = peak > 0 ? 100.0 * rate / peak : 0;
	s->mfu_tt = peak > 0 ? 100.0 * rate_tt / peak : 0;
}

double metrics_device_peak_flops(const char *name)
{
	/* Order matters: more specific names first. */
	static const struct {
		const char *key;
		double flops;
	} table[] = {
		{"H100 PCIe", 756e12}, {"H100 NVL", 835e12}, {"H100", 989e12}, {"H200", 989e12},
		{"H20", 148e12},       {"A100", 312e12},     {"B200", 2.25e15}, {"L40S", 362e12},
		{"MI355X", 2500e12},   {"MI325X", 1300e12},  {"MI300X", 1300e12},
	};
	if (name == NULL)
		return 0;
	for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
		if (strstr(name, table[i].key) != NULL)
			return table[i].flops;
	return 0;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double metrics_cpu_peak_flops(void)
{
	static double cached;
	if (cached > 0)
		return cached;
	const char *env = getenv("TITAN_CPU_PEAK_FLOPS");
	if (env != NULL && atof(env) > 0)
		return cached = atof(env);
	/* 512^3 sgemms until 0.2 s have passed; the best single run is the rate
	 * (the first warms the caches and OpenBLAS's threads). */
	enum { N = 512 };
	float *a = malloc(sizeof(float) * N * N * 3);
	if (a == NULL)
		return cached = 1e9;
	for (size_t i = 0; i < (size_t)N * N * 3; i++)
		a[i] = (float)((i * 2654435761u) % 1000) * 1e-3f;
	float *b = a + N * N, *c = b + N * N;
	double best = 1e30, start = now_s();
	for (int rep = 0; rep < 50 && (rep < 3 || now_s() - start < 0.2); rep++) {
		double t0 = now_s();
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b, N,
			    0.0f, c, N);
		double dt = now_s() - t0;
		if (rep > 0 && dt < best)
			best = dt;
	}
	free(a);
	return cached = 2.0 * N * N * N / best;
}

void metrics_cpu_memory(double *gib, double *pct)
{
	struct rusage ru;
	double bytes = 0;
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		bytes = (double)ru.ru_maxrss * 1024.0; /* kilobytes on Linux */
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	double total = pages > 0 && psz > 0 ? (double)pages * (double)psz : 0;
	*gib = bytes / (1024.0 * 1024.0 * 1024.0);
	*pct = total > 0 ? 100.0 * bytes / total : 0;
}

int metrics_use_color(int fd, int disabled)
{
	if (disabled)
		return 0;
	const char *nc = getenv("NO_COLOR");
	if (nc != NULL && nc[0] != '\0')
		return 0;
	const char *term = getenv("TERM");
	if (term != NULL && strcmp(term, "dumb") == 0)
		return 0;
	return isatty(fd);
}

void metrics_commas(char *buf, size_t n, int64_t v)
{
	char digits[32];
	int neg = v < 0;
	uint64_t u = neg ? (uint64_t)(-(v + 1)) + 1 : (uint64_t)v;
	int len = snprintf(digits, sizeof digits, "%llu", (unsigned long long)u);
	char out[48];
	int k = 0;
	if (neg)
		out[k++] = '-';
	for (int i = 0; i < len; i++) {
		if (i > 0 && (len - i) % 3 == 0)
			out[k++] = ',';
		out[k++] = digits[i];
	}
	out[k] = '\0';
	snprintf(buf, n, "%s", out);
}

/* "{:,.2f}" */
static void commas_fixed2(char *buf, size_t n, double v)
{
	double r = round(fabs(v) * 100.0);
	int64_t whole = (int64_t)(r / 100.0);
	int cents = (int)(r - (double)whole * 100.0);
	char w[48];
	metrics_commas(w, sizeof w, whole);
	snprintf(buf, n, "%s%s.%02d", v < 0 && r > 0 ? "-" : "", w, cents);
}

/* torchtitan's Color: ANSI codes, including two 24-bit ones. */
#define C_RED "\033[31m"
#define C_GREEN "\033[32m"
#define C_YELLOW "\033[33m"
#define C_BLUE "\033[34m"
#define C_MAGENTA "\033[35m"
#define C_CYAN "\033[36m"
#define C_ORANGE "\033[38;2;180;60;0m"
#define C_TURQUOISE "\033[38;2;54;234;195m"
#define C_RESET "\033[39m"

void metrics_format_line(char *buf, size_t n, const metrics_step *s, int color)
{
	char tps[48], tf[48];
	metrics_commas(tps, sizeof tps, (int64_t)llround(s->tps));
	commas_fixed2(tf, sizeof tf, s->tflops);
#define C(x) (color ? (x) : "")
	snprintf(buf, n,
		 "%sstep: %2lld  %sloss: %8.5f  %sgrad_norm: %7.4f  %smemory: %5.2fGiB(%.2f%%)  "
		 "%stps: %s  %stflops: %s  %smfu: %.2f%%%s",
		 C(C_RED), (long long)s->step, C(C_GREEN), s->loss, C(C_ORANGE), s->grad_norm,
		 C(C_TURQUOISE), s->mem_gib, s->mem_pct, C(C_BLUE), tps, C(C_CYAN), tf,
		 C(C_MAGENTA), s->mfu, C(C_RESET));
#undef C
}

void metrics_format_validation_line(char *buf, size_t n, int64_t step, double loss, double mem_gib,
				    double mem_pct, int color)
{
#define C(x) (color ? (x) : "")
	snprintf(buf, n, "%svalidate step: %2lld  %sloss: %7.4f  %smemory: %5.2fGiB(%.2f%%)%s",
		 C(C_YELLOW), (long long)step, C(C_GREEN), loss, C(C_TURQUOISE), mem_gib, mem_pct,
		 C(C_RESET));
#undef C
}

void metrics_log_prefix(char *buf, size_t n)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	struct tm tm;
	time_t t = tv.tv_sec;
	localtime_r(&t, &tm);
	char date[32];
	strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S", &tm);
	snprintf(buf, n, "[titan] %s,%03d - root - INFO - ", date, (int)(tv.tv_usec / 1000));
}

void metrics_log(FILE *out, const char *fmt, ...)
{
	char prefix[96];
	metrics_log_prefix(prefix, sizeof prefix);
	fputs(prefix, out);
	va_list ap;
	va_start(ap, fmt);
	vfprintf(out, fmt, ap);
	va_end(ap);
	fputc('\n', out);
	fflush(out);
}

int metrics_jsonl_open(metrics_jsonl *j, const char *path, titan_err *err)
{
	j->fp = fopen(path, "a");
	if (j->fp == NULL)
		return err_errno(err, "%s", path);
	if ((j->path = strdup(path)) == NULL) {
		fclose(j->fp);
		j->fp = NULL;
		return err_set(err, "out of memory");
	}
	return 0;
}

/* JSON has no NaN or Infinity: write null for them. */
static void put_num(FILE *fp, const char *key, double v)
{
	if (isfinite(v))
		fprintf(fp, ",\"%s\":%.17g", key, v);
	else
		fprintf(fp, ",\"%s\":null", key);
}

static int finish_line(metrics_jsonl *j, titan_err *err)
{
	fputs("}\n", j->fp);
	if (fflush(j->fp) != 0 || ferror(j->fp))
		return err_errno(err, "%s: write", j->path);
	return 0;
}

int metrics_jsonl_step(metrics_jsonl *j, const metrics_step *s, double lr, int64_t ntokens,
		       double elapsed_s, titan_err *err)
{
	fprintf(j->fp, "{\"step\":%lld", (long long)s->step);
	put_num(j->fp, "loss", s->loss);
	put_num(j->fp, "grad_norm", s->grad_norm);
	put_num(j->fp, "lr", lr);
	fprintf(j->fp, ",\"n_tokens_seen\":%lld", (long long)ntokens);
	put_num(j->fp, "time_s", elapsed_s);
	put_num(j->fp, "tps", s->tps);
	put_num(j->fp, "tflops", s->tflops);
	put_num(j->fp, "mfu", s->mfu);
	put_num(j->fp, "tflops_torchtitan", s->tflops_tt);
	put_num(j->fp, "mfu_torchtitan", s->mfu_tt);
	put_num(j->fp, "memory_gib", s->mem_gib);
	return finish_line(j, err);
}

int metrics_jsonl_validation(metrics_jsonl *j, int64_t step, double loss, int64_t tokens,
			     titan_err *err)
{
	fprintf(j->fp, "{\"step\":%lld", (long long)step);
	put_num(j->fp, "validation_loss", loss);
	fprintf(j->fp, ",\"validation_tokens\":%lld", (long long)tokens);
	return finish_line(j, err);
}

int metrics_jsonl_close(metrics_jsonl *j, titan_err *err)
{
	int rc = 0;
	if (j->fp != NULL && fclose(j->fp) != 0)
		rc = err_errno(err, "%s: close", j->path);
	free(j->path);
	j->fp = NULL;
	j->path = NULL;
	return rc;
}
