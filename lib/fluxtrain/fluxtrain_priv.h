/* fluxtrain_priv.h: the Flux trainer's loader (private to lib/fluxtrain).
 *
 * torchtitan 0.3.0's FluxDataLoader over webdataset tars (its cc12m layout:
 * an image under jpg, jpeg, png or webp and a txt caption), read in order and
 * from the start again at the end (infinite).  Its random draws come from the
 * run's one torch generator, as torchtitan's do: the DataLoader iterator's
 * base seed before the first batch, then per kept sample torch.randint for
 * the crop and two torch.rand for the T5 and CLIP prompt dropouts
 * (image_cc12m_draw).  A sample whose image is smaller than img_size, missing
 * or undecodable, or whose caption is missing or not UTF-8, is skipped with
 * nothing drawn.  On more than one data-parallel rank each keeps every
 * ranks-th sample from its rank on (datasets' split_dataset_by_node over a
 * stream whose shards do not divide among the ranks). */
#ifndef TITAN_FLUXTRAIN_PRIV_H
#define TITAN_FLUXTRAIN_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/torch_rng.h"
#include "wds/wds.h"

typedef struct ft_item {
	char key[256];
	uint64_t index;          /* its position in the data, every sample counted */
	uint8_t *image, *caption; /* owned copies */
	size_t image_bytes, caption_bytes;
	uint32_t offset;         /* the crop offset drawn */
	int t5_dropped, clip_dropped;
} ft_item;

typedef struct ft_loader {
	char **tars;
	int ntars, cur;
	wds *w;
	wds_sample s;
	int img_size, rank, ranks;
	double dropout;
	int started;       /* the base seed is drawn */
	uint64_t consumed; /* samples read since the start, every rank's counted */
	uint64_t skipped;  /* of this rank's, too small or unreadable */
} ft_loader;

int ft_loader_open(ft_loader *l, const char *path, int img_size, double dropout, int rank,
		   int ranks, titan_err *err);
void ft_loader_close(ft_loader *l);
/* The next b kept samples into items (their buffers reused), drawing from g. */
int ft_loader_batch(ft_loader *l, torch_rng *g, int b, ft_item *items, titan_err *err);
/* A resumed loader: past the first consumed samples (read, nothing drawn; the
 * generator's state comes from the checkpoint). */
int ft_loader_seek(ft_loader *l, uint64_t consumed, titan_err *err);
void ft_items_free(ft_item *items, int b);

#endif
