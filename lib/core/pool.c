#include "core/pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A queued call.  pool_submit allocates one per job (owned, freed after it
 * runs); the ordered map embeds one in each slot so that pushing never
 * allocates. */
typedef struct pool_job {
	pool_fn fn;
	void *arg;
	struct pool_job *next;
	int owned;
} pool_job;

struct pool {
	pthread_mutex_t mu;
	pthread_cond_t work;  /* a job was queued, or stopping */
	pthread_cond_t idle;  /* pending reached 0 */
	pool_job *head, *tail;
	size_t pending;       /* queued + running */
	int stopping;
	int nthreads;
	pthread_t *threads;
};

typedef struct omap_slot {
	pool_job job;
	pool_omap *m;
	void *item;
	int done;
} omap_slot;

struct pool_omap {
	pool *p;
	pool_map_fn fn;
	void *ctx;
	pthread_mutex_t mu;
	pthread_cond_t done; /* some slot finished */
	omap_slot *slots;    /* ring of window slots; the oldest is slots[head] */
	int window, head, count;
};

int pool_ncpu(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n < 1 ? 1 : (int)n;
}

static void *worker(void *arg)
{
	pool *p = arg;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (p->head == NULL && !p->stopping)
			pthread_cond_wait(&p->work, &p->mu);
		if (p->head == NULL)
			break; /* stopping, and the queue is drained */
		pool_job *j = p->head;
		p->head = j->next;
		if (p->head == NULL)
			p->tail = NULL;
		pthread_mutex_unlock(&p->mu);

		/* Copy out first: an embedded job's slot may be reused once fn returns. */
		pool_fn fn = j->fn;
		void *fa = j->arg;
		if (j->owned)
			free(j);
		fn(fa);

		pthread_mutex_lock(&p->mu);
		if (--p->pending == 0)
			pthread_cond_broadcast(&p->idle);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

pool *pool_create(int nthreads, titan_err *err)
{
	if (nthreads <= 0)
		nthreads = pool_ncpu();
	pool *p = calloc(1, sizeof *p);
	if (p == NULL || (p->threads = calloc((size_t)nthreads, sizeof *p->threads)) == NULL) {
		free(p);
		err_set(err, "thread pool: out of memory");
		return NULL;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->idle, NULL);
	for (int i = 0; i < nthreads; i++) {
		int rc = pthread_create(&p->threads[i], NULL, worker, p);
		if (rc != 0) {
			p->nthreads = i;
			pool_destroy(p);
			err_set(err, "thread pool: cannot start thread %d of %d: %s", i + 1,
				nthreads, strerror(rc));
			return NULL;
		}
		p->nthreads = i + 1;
	}
	return p;
}

int pool_size(const pool *p)
{
	return p->nthreads;
}

static void enqueue(pool *p, pool_job *j)
{
	j->next = NULL;
	pthread_mutex_lock(&p->mu);
	if (p->tail != NULL)
		p->tail->next = j;
	else
		p->head = j;
	p->tail = j;
	p->pending++;
	pthread_cond_signal(&p->work);
	pthread_mutex_unlock(&p->mu);
}

int pool_submit(pool *p, pool_fn fn, void *arg, titan_err *err)
{
	pool_job *j = malloc(sizeof *j);
	if (j == NULL)
		return err_set(err, "thread pool: out of memory");
	*j = (pool_job){.fn = fn, .arg = arg, .owned = 1};
	enqueue(p, j);
	return 0;
}

void pool_wait(pool *p)
{
	pthread_mutex_lock(&p->mu);
	while (p->pending > 0)
		pthread_cond_wait(&p->idle, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

void pool_destroy(pool *p)
{
	if (p == NULL)
		return;
	pool_wait(p);
	pthread_mutex_lock(&p->mu);
	p->stopping = 1;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->idle);
	free(p->threads);
	free(p);
}

static void omap_run(void *arg)
{
	omap_slot *s = arg;
	pool_omap *m = s->m;
	m->fn(s->item, m->ctx);
	pthread_mutex_lock(&m->mu);
	s->done = 1;
	/* Broadcast under the lock: once it is released the consumer may free m. */
	pthread_cond_broadcast(&m->done);
	pthread_mutex_unlock(&m->mu);
}

pool_omap *pool_omap_create(pool *p, int window, pool_map_fn fn, void *ctx, titan_err *err)
{
	if (window <= 0)
		window = 2 * p->nthreads;
	pool_omap *m = calloc(1, sizeof *m);
	if (m == NULL || (m->slots = calloc((size_t)window, sizeof *m->slots)) == NULL) {
		free(m);
		err_set(err, "ordered map: out of memory");
		return NULL;
	}
	m->p = p;
	m->fn = fn;
	m->ctx = ctx;
	m->window = window;
	pthread_mutex_init(&m->mu, NULL);
	pthread_cond_init(&m->done, NULL);
	return m;
}

void *pool_omap_pop(pool_omap *m)
{
	if (m->count == 0)
		return NULL;
	omap_slot *s = &m->slots[m->head];
	pthread_mutex_lock(&m->mu);
	while (!s->done)
		pthread_cond_wait(&m->done, &m->mu);
	pthread_mutex_unlock(&m->mu);
	void *item = s->item;
	s->item = NULL;
	m->head = (m->head + 1) % m->window;
	m->count--;
	return item;
}

void *pool_omap_push(pool_omap *m, void *item)
{
	void *out = NULL;
	if (m->count == m->window)
		out = pool_omap_pop(m);
	omap_slot *s = &m->slots[(m->head + m->count) % m->window];
	s->m = m;
	s->item = item;
	s->done = 0; /* no worker holds this slot: it was popped (or never used) */
	s->job = (pool_job){.fn = omap_run, .arg = s, .owned = 0};
	m->count++;
	enqueue(m->p, &s->job);
	return out;
}

int pool_omap_pending(const pool_omap *m)
{
	return m->count;
}

void pool_omap_destroy(pool_omap *m)
{
	if (m == NULL)
		return;
	while (m->count > 0)
		pool_omap_pop(m);
	pthread_mutex_destroy(&m->mu);
	pthread_cond_destroy(&m->done);
	free(m->slots);
	free(m);
}
