/* runtime.c: the process's timeout, first failure and watchdog thread. */
#include "comm/comm_priv.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How often the watchdog looks at the peers and the device work, and how
 * long it sleeps between progress calls while operations are in flight. */
#define WATCH_PERIOD_S 0.1
#define PROGRESS_SLEEP_NS 20000

struct comm_runtime {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int world_rank, world_size;
	_Atomic double timeout_s; /* read by every operation's start: no lock */
	atomic_int failed;
	char failure[900];        /* written once, before failed is set */
	comm *comms;              /* under mu */
	atomic_int unattended;
	void (*progress)(void);
	comm_peer *peers;
	int npeers;
	char host[256];
	pthread_t thread;
	int running;
	int stop;                 /* under mu */
};

double comm_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

comm_runtime *comm_rt_create(int world_rank, int world_size, double timeout_s, titan_err *e)
{
	comm_runtime *rt = calloc(1, sizeof *rt);
	if (rt == NULL) {
		err_set(e, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&rt->mu, NULL);
	pthread_cond_init(&rt->cv, NULL);
	rt->world_rank = world_rank;
	rt->world_size = world_size;
	atomic_init(&rt->timeout_s, timeout_s);
	return rt;
}

double comm_rt_timeout(comm_runtime *rt)
{
	return atomic_load(&rt->timeout_s);
}

void comm_rt_set_timeout(comm_runtime *rt, double timeout_s)
{
	atomic_store(&rt->timeout_s, timeout_s);
}

int comm_rt_fail(comm_runtime *rt, const char *fmt, ...)
{
	pthread_mutex_lock(&rt->mu);
	if (!atomic_load(&rt->failed)) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(rt->failure, sizeof rt->failure, fmt, ap);
		va_end(ap);
		atomic_store(&rt->failed, 1);
	}
	pthread_mutex_unlock(&rt->mu);
	return -1;
}

const char *comm_rt_failure(comm_runtime *rt)
{
	return atomic_load(&rt->failed) ? rt->failure : NULL;
}

void comm_rt_unattended(comm_runtime *rt, int delta)
{
	if (atomic_fetch_add(&rt->unattended, delta) == 0 && delta > 0) {
		pthread_mutex_lock(&rt->mu);
		pthread_cond_signal(&rt->cv);
		pthread_mutex_unlock(&rt->mu);
	}
}

void comm_rt_add(comm_runtime *rt, comm *c)
{
	pthread_mutex_lock(&rt->mu);
	c->next = rt->comms;
	rt->comms = c;
	pthread_mutex_unlock(&rt->mu);
}

void comm_rt_remove(comm_runtime *rt, comm *c)
{
	pthread_mutex_lock(&rt->mu);
	for (comm **p = &rt->comms; *p != NULL; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	pthread_mutex_unlock(&rt->mu);
}

void comm_rt_free_comms(comm_runtime *rt, comm *world)
{
	int world_listed = 0;
	for (;;) {
		pthread_mutex_lock(&rt->mu);
		comm *c = rt->comms;
		if (c != NULL)
			rt->comms = c->next;
		pthread_mutex_unlock(&rt->mu);
		if (c == NULL)
			break;
		world_listed |= c == world;
		c->ops->free(c);
		free(c);
	}
	if (!world_listed) {
		world->ops->free(world);
		free(world);
	}
}

/* The state letter of /proc/PID/stat ('R', 'S', 'T' stopped, 'Z' zombie,
 * ...), or 0 where there is no /proc. */
static char process_state(pid_t pid)
{
	char path[64], buf[256];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return 0;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *paren = strrchr(buf, ')'); /* "pid (comm) S ...", comm may hold spaces */
	return paren != NULL && paren[1] == ' ' ? paren[2] : 0;
}

/* Whether a process of this node has gone: no such pid, or a zombie not yet
 * reaped by the launcher (without /proc, kill() alone is trusted). */
static int process_gone(pid_t pid)
{
	if (kill(pid, 0) != 0 && errno == ESRCH)
		return 1;
	char st = process_state(pid);
	return st == 'Z' || st == 'X';
}

int comm_rt_stopped_peers(comm_runtime *rt, const int *members, int nmembers, char *buf,
			  size_t len)
{
	int found = 0;
	size_t k = 0;
	buf[0] = '\0';
	for (int i = 0; i < rt->npeers; i++) {
		int in = members == NULL;
		for (int j = 0; !in && j < nmembers; j++)
			in = members[j] == rt->peers[i].rank;
		char st = in ? process_state(rt->peers[i].pid) : 0;
		if (st != 'T' && st != 't')
			continue;
		int w = snprintf(buf + k, len - k, "%srank %d (pid %d on %s)", found ? ", " : "",
				 rt->peers[i].rank, (int)rt->peers[i].pid, rt->host);
		if (w < 0 || (size_t)w >= len - k)
			break;
		k += (size_t)w;
		found++;
	}
	return found;
}

static void watch_once(comm_runtime *rt)
{
	for (int i = 0; i < rt->npeers; i++)
		if (process_gone(rt->peers[i].pid))
			comm_rt_fail(rt, "rank %d (pid %d on %s) has died", rt->peers[i].rank,
				     (int)rt->peers[i].pid, rt->host);
	double now = comm_now();
	pthread_mutex_lock(&rt->mu);
	for (comm *c = rt->comms; c != NULL; c = c->next) {
		titan_err e;
		if (c->ops->watch != NULL && c->ops->watch(c, now, &e) != 0) {
			pthread_mutex_unlock(&rt->mu);
			comm_rt_fail(rt, "%s", e.msg);
			pthread_mutex_lock(&rt->mu);
			break;
		}
	}
	pthread_mutex_unlock(&rt->mu);
}

static void *watchdog(void *arg)
{
	comm_runtime *rt = arg;
	double next_watch = comm_now();
	pthread_mutex_lock(&rt->mu);
	while (!rt->stop) {
		double now = comm_now();
		if (now >= next_watch) {
			pthread_mutex_unlock(&rt->mu);
			watch_once(rt);
			pthread_mutex_lock(&rt->mu);
			next_watch = now + WATCH_PERIOD_S;
		}
		if (rt->progress != NULL && atomic_load(&rt->unattended) > 0) {
			pthread_mutex_unlock(&rt->mu);
			rt->progress();
			struct timespec ts = {0, PROGRESS_SLEEP_NS};
			nanosleep(&ts, NULL);
			pthread_mutex_lock(&rt->mu);
			continue;
		}
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		long ns = until.tv_nsec + (long)(WATCH_PERIOD_S * 1e9);
		until.tv_sec += ns / 1000000000L;
		until.tv_nsec = ns % 1000000000L;
		pthread_cond_timedwait(&rt->cv, &rt->mu, &until);
	}
	pthread_mutex_unlock(&rt->mu);
	return NULL;
}

int comm_rt_start(comm_runtime *rt, const comm_peer *peers, int npeers, const char *host,
		  void (*progress)(void), titan_err *e)
{
	if (npeers > 0) {
		rt->peers = malloc((size_t)npeers * sizeof *peers);
		if (rt->peers == NULL)
			return err_set(e, "out of memory");
		memcpy(rt->peers, peers, (size_t)npeers * sizeof *peers);
	}
	rt->npeers = npeers;
	snprintf(rt->host, sizeof rt->host, "%s", host);
	rt->progress = progress;
	int rc = pthread_create(&rt->thread, NULL, watchdog, rt);
	if (rc != 0)
		return err_set(e, "cannot start the comm watchdog thread: %s", strerror(rc));
	rt->running = 1;
	return 0;
}

void comm_rt_free(comm_runtime *rt)
{
	if (rt == NULL)
		return;
	if (rt->running) {
		pthread_mutex_lock(&rt->mu);
		rt->stop = 1;
		pthread_cond_signal(&rt->cv);
		pthread_mutex_unlock(&rt->mu);
		pthread_join(rt->thread, NULL);
	}
	pthread_mutex_destroy(&rt->mu);
	pthread_cond_destroy(&rt->cv);
	free(rt->peers);
	free(rt);
}
