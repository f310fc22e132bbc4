/* loader.c: torchtitan 0.3.0's FluxDataLoader over webdataset tars (see
 * fluxtrain_priv.h). */
#include "fluxtrain/fluxtrain_priv.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "image/image.h"

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), m = strlen(tail);
	return n >= m && strcmp(s + n - m, tail) == 0;
}

/* path itself, or the *.tar files of the folder path in name order (datasets'
 * data_files "*.tar"). */
static int list_tars(ft_loader *l, const char *path, titan_err *err)
{
	struct stat st;
	if (stat(path, &st) != 0)
		return err_set(err, "dataloader.dataset_path %s: no such file or folder", path);
	if (!S_ISDIR(st.st_mode)) {
		l->tars = malloc(sizeof *l->tars);
		if (l->tars == NULL || (l->tars[0] = strdup(path)) == NULL)
			return err_set(err, "out of memory");
		l->ntars = 1;
		return 0;
	}
	DIR *d = opendir(path);
	if (d == NULL)
		return err_set(err, "dataloader.dataset_path %s: cannot read the folder", path);
	struct dirent *e;
	int rc = 0;
	while (rc == 0 && (e = readdir(d)) != NULL) {
		if (!ends_with(e->d_name, ".tar"))
			continue;
		char **t = realloc(l->tars, sizeof *t * (size_t)(l->ntars + 1));
		size_t n = strlen(path) + strlen(e->d_name) + 2;
		char *name = t ? malloc(n) : NULL;
		if (name == NULL) {
			if (t)
				l->tars = t;
			rc = err_set(err, "out of memory");
			break;
		}
		snprintf(name, n, "%s/%s", path, e->d_name);
		l->tars = t;
		l->tars[l->ntars++] = name;
	}
	closedir(d);
	if (rc == 0 && l->ntars == 0)
		rc = err_set(err, "dataloader.dataset_path %s: no .tar files in the folder", path);
	if (rc == 0)
		qsort(l->tars, (size_t)l->ntars, sizeof *l->tars, by_name);
	return rc;
}

int ft_loader_open(ft_loader *l, const char *path, int img_size, double dropout, int rank,
		   int ranks, const fluxrec_header *want, titan_err *err)
{
	memset(l, 0, sizeof *l);
	l->img_size = img_size;
	l->dropout = dropout;
	l->rank = rank;
	l->ranks = ranks;
	int recs = ft_records_open(l, path, err);
	if (recs < 0)
		return -1;
	if (recs)
		return want != NULL ? ft_records_check(l, want, path, err) : 0;
	return list_tars(l, path, err);
}

void ft_loader_close(ft_loader *l)
{
	ft_records_close(l);
	wds_close(l->w);
	wds_sample_free(&l->s);
	for (int i = 0; i < l->ntars; i++)
		free(l->tars[i]);
	free(l->tars);
	memset(l, 0, sizeof *l);
}

/* The next sample of the data (from the first tar again after the last: the
 * loader is infinite), into l->s.  0, or -1 and err. */
static int next_sample(ft_loader *l, titan_err *err)
{
	for (int tries = 0; tries <= l->ntars; tries++) {
		if (l->w == NULL && wds_open(&l->w, l->tars[l->cur], NULL, err) != 0)
			return -1;
		int r = wds_next(l->w, &l->s, err);
		if (r < 0)
			return -1;
		if (r == 1)
			return 0;
		wds_close(l->w);
		l->w = NULL;
		l->cur = (l->cur + 1) % l->ntars;
	}
	return err_set(err, "dataloader.dataset_path: the tars hold no samples");
}

/* This rank's next sample (datasets' split_dataset_by_node over a stream
 * whose shards do not divide among the ranks: every ranks-th sample). */
static int next_own(ft_loader *l, titan_err *err)
{
	do {
		if (next_sample(l, err) != 0)
			return -1;
		l->consumed++;
	} while ((l->consumed - 1) % (uint64_t)l->ranks != (uint64_t)l->rank);
	return 0;
}

static const wds_field *image_field(const wds_sample *s)
{
	static const char *const names[] = {"jpg", "jpeg", "png", "webp"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		const wds_field *f = wds_field_get(s, names[i]);
		if (f != NULL)
			return f;
	}
	return NULL;
}

static int copy_item(ft_item *it, const wds_sample *s, const wds_field *img,
		     const wds_field *cap, titan_err *err)
{
	free(it->image);
	free(it->caption);
	it->image = malloc(img->size ? img->size : 1);
	it->caption = malloc(cap->size ? cap->size : 1);
	if (it->image == NULL || it->caption == NULL)
		return err_set(err, "out of memory for a sample of %zu bytes", img->size);
	memcpy(it->image, img->data, img->size);
	memcpy(it->caption, cap->data, cap->size);
	it->has_rec = 0;
	it->image_bytes = img->size;
	it->caption_bytes = cap->size;
	snprintf(it->key, sizeof it->key, "%s", s->key);
	return 0;
}

/* One kept sample: decoded to learn its size, skipped (nothing drawn) when
 * torchtitan's _process_cc12m_image would skip it, else its draws made. */
static int take(ft_loader *l, torch_rng *g, ft_item *it, titan_err *err)
{
	if (l->rf != NULL)
		return ft_records_take(l, g, it, err);
	for (;;) {
		if (next_own(l, err) != 0)
			return -1;
		const wds_field *img = image_field(&l->s), *cap = wds_field_get(&l->s, "txt");
		image im;
		titan_err why = {{0}};
		if (img == NULL || cap == NULL || !wds_utf8_valid(cap->data, cap->size) ||
		    image_decode(&im, img->data, img->size, NULL, &why) != 0) {
			l->skipped++;
			continue;
		}
		image_cc12m_draws d;
		int kept = image_cc12m_draw(g, im.w, im.h, l->img_size, l->dropout, &d);
		image_free(&im);
		if (!kept) {
			l->skipped++;
			continue;
		}
		it->offset = (uint32_t)d.offset;
		it->t5_dropped = d.t5_dropped;
		it->clip_dropped = d.clip_dropped;
		it->index = l->consumed - 1;
		return copy_item(it, &l->s, img, cap, err);
	}
}

int ft_loader_batch(ft_loader *l, torch_rng *g, int b, ft_item *items, titan_err *err)
{
	if (!l->started) { /* the DataLoader iterator's base seed */
		(void)torch_rng_int64(g);
		l->started = 1;
	}
	for (int i = 0; i < b; i++)
		if (take(l, g, &items[i], err) != 0)
			return -1;
	return 0;
}

int ft_loader_seek(ft_loader *l, uint64_t consumed, titan_err *err)
{
	if (l->rf != NULL) /* a record is found by its index */
		l->consumed = consumed;
	while (l->consumed < consumed) {
		if (next_sample(l, err) != 0)
			return -1;
		l->consumed++;
	}
	l->started = 1;
	return 0;
}

void ft_items_free(ft_item *items, int b)
{
	for (int i = 0; items && i < b; i++) {
		free(items[i].image);
		free(items[i].caption);
	}
	free(items);
}
