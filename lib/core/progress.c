#include "core/progress.h"
#include "core/err.h"

#include <math.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

double progress_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void progress_init_fp(progress *pg, FILE *fp, const char *label, progress_unit unit,
		      uint64_t total)
{
	memset(pg, 0, sizeof *pg);
	pg->fp = fp;
	pg->tty = isatty(fileno(fp));
	pg->width = 80;
	struct winsize ws;
	if (pg->tty && ioctl(fileno(fp), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
		pg->width = ws.ws_col;
	pg->label = label ? label : "";
	pg->unit = unit;
	atomic_init(&pg->done, 0);
	atomic_init(&pg->total, total);
	pg->start = progress_now();
	pg->interval = 0.1;
	/* The first draw waits one interval: jobs that finish at once draw nothing. */
	atomic_init(&pg->next_draw, pg->start + pg->interval);
	pthread_mutex_init(&pg->mu, NULL);
}

void progress_init(progress *pg, const char *label, progress_unit unit, uint64_t total)
{
	progress_init_fp(pg, stderr, label, unit, total);
}

void progress_set_noun(progress *pg, const char *noun)
{
	pg->noun = noun;
}

void progress_set_total(progress *pg, uint64_t total)
{
	atomic_store(&pg->total, total);
}

/* Three significant digits: 1.23, 12.3, 123. */
static int sig3(char *buf, size_t n, double x)
{
	if (x < 9.995)
		return snprintf(buf, n, "%.2f", x);
	if (x < 99.95)
		return snprintf(buf, n, "%.1f", x);
	return snprintf(buf, n, "%.0f", x);
}

static char *fmt_amount(char *buf, size_t n, double v, progress_unit unit, const char *noun,
			const char *per)
{
	static const char *const bin[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	static const char *const dec[] = {"", "k", "M", "G", "T", "P", "E"};
	if (!isfinite(v) || v < 0)
		v = 0;
	const double base = unit == PROGRESS_BYTES ? 1024 : 1000;
	/* Decimal amounts step up when they would round to 1000; binary ones at 1024. */
	const double limit = unit == PROGRESS_BYTES ? 1024 : 999.5;
	int i = 0;
	while (v >= limit && i < 6) {
		v /= base;
		i++;
	}
	char num[32];
	if (i == 0 && v == floor(v))
		snprintf(num, sizeof num, "%.0f", v);
	else
		sig3(num, sizeof num, v);
	if (unit == PROGRESS_BYTES)
		snprintf(buf, n, "%s %s%s", num, bin[i], per);
	else
		snprintf(buf, n, "%s%s %s%s", num, dec[i],
			 unit == PROGRESS_TOKENS ? "tok" : (noun ? noun : "items"), per);
	return buf;
}

char *progress_fmt_amount(char *buf, size_t n, double v, progress_unit unit, const char *noun)
{
	return fmt_amount(buf, n, v, unit, noun, "");
}

char *progress_fmt_rate(char *buf, size_t n, double per_s, progress_unit unit, const char *noun)
{
	return fmt_amount(buf, n, per_s, unit, noun, "/s");
}

char *progress_fmt_duration(char *buf, size_t n, double s)
{
	/* Beyond ~30 years an ETA means "never"; it also keeps llround in range. */
	if (!isfinite(s) || s < 0 || s >= 1e9) {
		snprintf(buf, n, "--");
		return buf;
	}
	long long t = llround(s);
	if (t < 60)
		snprintf(buf, n, "%llds", t);
	else if (t < 3600)
		snprintf(buf, n, "%lldm%02llds", t / 60, t % 60);
	else if (t < 86400)
		snprintf(buf, n, "%lldh%02lldm", t / 3600, t % 3600 / 60);
	else
		snprintf(buf, n, "%lldd%02lldh", t / 86400, t % 86400 / 3600);
	return buf;
}

char *progress_fmt_line(char *buf, size_t n, const progress *pg, uint64_t done, uint64_t total,
			double elapsed, int width)
{
	char amt[48], tot[48], rate[48], dur[32], tail[192];
	double r = elapsed > 0 ? (double)done / elapsed : 0;
	progress_fmt_amount(amt, sizeof amt, (double)done, pg->unit, pg->noun);
	progress_fmt_rate(rate, sizeof rate, r, pg->unit, pg->noun);
	if (total == 0) {
		progress_fmt_duration(dur, sizeof dur, elapsed);
		snprintf(buf, n, "%s %s  %s  %s", pg->label, amt, rate, dur);
	} else {
		uint64_t d = done < total ? done : total;
		int pct = (int)((double)d * 100.0 / (double)total);
		progress_fmt_amount(tot, sizeof tot, (double)total, pg->unit, pg->noun);
		progress_fmt_duration(dur, sizeof dur, r > 0 ? (double)(total - d) / r : -1);
		snprintf(tail, sizeof tail, "%s/%s  %s  ETA %s", amt, tot, rate, dur);
		/* "LABEL 100% [" + bar + "] " + tail */
		int bar = width - 1 - (int)strlen(pg->label) - 7 - 2 - (int)strlen(tail);
		if (bar > 50)
			bar = 50;
		if (bar < 10) {
			snprintf(buf, n, "%s %3d%% %s", pg->label, pct, tail);
		} else {
			char b[64];
			int fill = (int)((double)d * bar / (double)total);
			for (int i = 0; i < bar; i++)
				b[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
			b[bar] = '\0';
			snprintf(buf, n, "%s %3d%% [%s] %s", pg->label, pct, b, tail);
		}
	}
	/* Never wrap: a wrapped line cannot be redrawn with a carriage return. */
	if (width > 1 && strlen(buf) > (size_t)width - 1 && (size_t)width - 1 < n)
		buf[width - 1] = '\0';
	return buf;
}

char *progress_fmt_summary(char *buf, size_t n, const progress *pg, uint64_t done,
			   double elapsed)
{
	char amt[48], rate[48], dur[32];
	progress_fmt_amount(amt, sizeof amt, (double)done, pg->unit, pg->noun);
	progress_fmt_duration(dur, sizeof dur, elapsed);
	progress_fmt_rate(rate, sizeof rate, elapsed > 0 ? (double)done / elapsed : 0, pg->unit,
			  pg->noun);
	snprintf(buf, n, "%s: %s in %s, %s", pg->label, amt, dur, rate);
	return buf;
}

/* Called with mu held. */
static void draw(progress *pg, double now)
{
	char line[512];
	progress_fmt_line(line, sizeof line, pg, atomic_load(&pg->done), atomic_load(&pg->total),
			  now - pg->start, pg->width);
	/* \r, the line, then erase what a longer earlier line left. */
	fprintf(pg->fp, "\r%s\033[K", line);
	fflush(pg->fp);
	pg->drawn = 1;
}

static void maybe_draw(progress *pg)
{
	if (!pg->tty)
		return;
	double now = progress_now();
	if (now < atomic_load(&pg->next_draw))
		return;
	if (pthread_mutex_trylock(&pg->mu) != 0)
		return; /* another thread is drawing */
	if (now >= atomic_load(&pg->next_draw)) {
		atomic_store(&pg->next_draw, now + pg->interval);
		draw(pg, now);
	}
	pthread_mutex_unlock(&pg->mu);
}

void progress_add(progress *pg, uint64_t n)
{
	atomic_fetch_add(&pg->done, n);
	maybe_draw(pg);
}

void progress_set(progress *pg, uint64_t done)
{
	atomic_store(&pg->done, done);
	maybe_draw(pg);
}

void progress_finish(progress *pg, int summary)
{
	double now = progress_now();
	pthread_mutex_lock(&pg->mu);
	if (pg->drawn) {
		fputs("\r\033[K", pg->fp);
		pg->drawn = 0;
	}
	if (summary) {
		char line[512];
		progress_fmt_summary(line, sizeof line, pg, atomic_load(&pg->done), now - pg->start);
		fprintf(pg->fp, "%s: %s\n", titan_progname(), line);
	}
	fflush(pg->fp);
	pthread_mutex_unlock(&pg->mu);
	pthread_mutex_destroy(&pg->mu);
}
