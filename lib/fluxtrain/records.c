/* records.c: the Flux trainer's samples from titan-encode's records (a
 * titan-shard folder's train split, or one record file) instead of tars
 * (fluxtrain_priv.h).  A record holds what the encoders would make of its
 * sample (T5's states, CLIP's pooled output, the autoencoder's moments of its
 * crop), so the step skips them.  The draws are the tar loader's, made from
 * the record's image size: the crop offset (drawn, and unused: the record's
 * crop was fixed when it was encoded) and the two prompt dropouts, so that
 * records of square images equal training from their tar bit for bit. */
#include "fluxtrain/fluxtrain_priv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "image/image.h"

/* Whether path is one record file: its first bytes are a stream's magic. */
static int is_record_file(const char *path)
{
	char magic[4];
	FILE *f = fopen(path, "rb");
	if (f == NULL)
		return 0;
	int is = fread(magic, 1, 4, f) == 4 && memcmp(magic, FLUXREC_MAGIC, 4) == 0;
	fclose(f);
	return is;
}

/* The files' mapped shards and where each one's records start. */
static int open_files(ft_loader *l, char **paths, int n, titan_err *err)
{
	l->rf = calloc((size_t)n + 1, sizeof *l->rf);
	l->rfirst = calloc((size_t)n + 1, sizeof *l->rfirst);
	if (l->rf == NULL || l->rfirst == NULL)
		return err_set(err, "out of memory");
	for (int i = 0; i < n; i++) {
		if ((l->rf[i] = fluxrec_file_open(paths[i], err)) == NULL)
			return err_prefix(err, "dataloader.dataset_path");
		l->nrf++;
		l->rfirst[i + 1] = l->rfirst[i] + fluxrec_file_records(l->rf[i]);
	}
	l->nrec = l->rfirst[n];
	if (l->nrec == 0)
		return err_set(err, "dataloader.dataset_path %s: no records", paths[0]);
	return 0;
}

int ft_records_open(ft_loader *l, const char *path, titan_err *err)
{
	struct stat st;
	char **paths = NULL;
	int n = 0, rc;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode) && fluxrec_dir_is(path)) {
		if (fluxrec_dir_files(path, 0, &paths, &n, err) != 0)
			return err_prefix(err, "dataloader.dataset_path");
		if (n == 0) {
			fluxrec_paths_free(paths, n);
			return err_set(err, "dataloader.dataset_path %s: the folder's train split holds "
				       "no records", path);
		}
	} else if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && is_record_file(path)) {
		if ((paths = malloc(sizeof *paths)) == NULL || (paths[0] = strdup(path)) == NULL) {
			free(paths);
			return err_set(err, "out of memory");
		}
		n = 1;
	} else {
		return 0;
	}
	rc = open_files(l, paths, n, err);
	fluxrec_paths_free(paths, n);
	return rc != 0 ? -1 : 1;
}

void ft_records_close(ft_loader *l)
{
	for (int i = 0; i < l->nrf; i++)
		fluxrec_file_close(l->rf[i]);
	free(l->rf);
	free(l->rfirst);
	l->rf = NULL;
	l->rfirst = NULL;
	l->nrf = 0;
}

#define SAME(field, what)                                                                  \
	if (r->field != want->field)                                                       \
		return err_set(err, "dataloader.dataset_path %s: %s %llu in the records, %llu " \
			       "for this run (%s)", path, #field, (unsigned long long)r->field,  \
			       (unsigned long long)want->field, what)

int ft_records_check(const ft_loader *l, const fluxrec_header *want, const char *path,
		     titan_err *err)
{
	for (int i = 0; i < l->nrf; i++) {
		const fluxrec_header *r = fluxrec_file_header(l->rf[i]);
		if (!(r->flags & FLUXREC_MOMENTS))
			return err_set(err, "dataloader.dataset_path %s: the records hold no "
				       "autoencoder moments (titan-encode --autoencoder)", path);
		SAME(image_size, "dataloader.img_size");
		SAME(t5_len, "tokenizer.max_t5_encoding_len");
		SAME(t5_dim, "the T5 encoder's d_model");
		SAME(clip_len, "CLIP's 77 tokens");
		SAME(clip_dim, "the CLIP model's hidden size");
		SAME(latent_channels, "the autoencoder's");
		const struct {
			const uint8_t *a, *b;
			const char *what;
		} ids[] = {{r->t5_weights, want->t5_weights, "encoder.t5_encoder's weights"},
			   {r->clip_weights, want->clip_weights, "encoder.clip_encoder's weights"},
			   {r->ae_weights, want->ae_weights, "encoder.autoencoder_path's weights"},
			   {r->t5_tokenizer, want->t5_tokenizer, "the T5 tokenizer"},
			   {r->clip_tokenizer, want->clip_tokenizer, "the CLIP tokenizer"}};
		for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++)
			if (memcmp(ids[k].a, ids[k].b, 32) != 0)
				return err_set(err, "dataloader.dataset_path %s: encoded with other "
					       "encoders than this run's: %s differ", path, ids[k].what);
	}
	return 0;
}

/* Record i of the data (every shard's in turn) into *v. */
static int record_at(const ft_loader *l, uint64_t i, fluxrec_view *v, titan_err *err)
{
	int j = 0;
	while (j + 1 < l->nrf && l->rfirst[j + 1] <= i)
		j++;
	return fluxrec_file_record(l->rf[j], i - l->rfirst[j], v, err);
}

int ft_records_take(ft_loader *l, torch_rng *g, ft_item *it, titan_err *err)
{
	for (;;) {
		uint64_t k = l->consumed++;
		if (k % (uint64_t)l->ranks != (uint64_t)l->rank)
			continue;
		fluxrec_view v;
		if (record_at(l, k % l->nrec, &v, err) != 0)
			return err_prefix(err, "dataloader.dataset_path");
		image_cc12m_draws d;
		if (!image_cc12m_draw(g, (int)v.width, (int)v.height, l->img_size, l->dropout, &d)) {
			l->skipped++;
			continue;
		}
		size_t n = strlen(v.key);
		free(it->caption);
		/* a record keeps its caption's ids, not its text: the key names it */
		if ((it->caption = malloc(n + 1)) == NULL)
			return err_set(err, "out of memory");
		memcpy(it->caption, v.key, n + 1);
		it->caption_bytes = n;
		snprintf(it->key, sizeof it->key, "%s", v.key);
		it->rec = v;
		it->has_rec = 1;
		it->offset = v.crop_offset;
		it->t5_dropped = d.t5_dropped;
		it->clip_dropped = d.clip_dropped;
		it->index = k;
		return 0;
	}
}
