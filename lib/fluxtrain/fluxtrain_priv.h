/* fluxtrain_priv.h: the Flux trainer's loader and its run, which
 * fluxtrain.c, sample.c and ckpt.c share (private to lib/fluxtrain).
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
 * stream whose shards do not divide among the ranks).  Records (titan-encode's,
 * sharded by titan-shard) may stand in for the tars: records.c. */
#ifndef TITAN_FLUXTRAIN_PRIV_H
#define TITAN_FLUXTRAIN_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "config/config.h"
#include "core/err.h"
#include "core/torch_rng.h"
#include "cp/cp.h"
#include "flux/flux.h"
#include "fluxae/fluxae.h"
#include "fluxfsdp/fluxfsdp.h"
#include "fluxin/fluxin.h"
#include "fluxrec/fluxrec.h"
#include "metrics/metrics.h"
#include "optim/optim.h"
#include "tb/tb.h"
#include "wds/wds.h"

typedef struct ft_item {
	char key[256];
	uint64_t index;          /* its position in the data, every sample counted */
	uint8_t *image, *caption; /* owned copies */
	size_t image_bytes, caption_bytes;
	uint32_t offset;         /* the crop offset drawn */
	int t5_dropped, clip_dropped;
	fluxrec_view rec;        /* from records: the sample, in its mapped shard */
	int has_rec;
} ft_item;

typedef struct ft_loader {
	char **tars;
	int ntars, cur;
	wds *w;
	wds_sample s;
	/* records instead of tars (records.c): the mapped shards, the index of
	 * each one's first record, how many in all */
	fluxrec_file **rf;
	int nrf;
	uint64_t *rfirst, nrec;
	int img_size, rank, ranks;
	double dropout;
	int started;       /* the base seed is drawn */
	uint64_t consumed; /* samples read since the start, every rank's counted */
	uint64_t skipped;  /* of this rank's, too small or unreadable */
} ft_loader;

/* path's tars, or its records (a titan-shard folder of Flux records or one
 * record file), which must be encoded as want describes (its shapes, the
 * encoders' and tokenizers' identities). */
int ft_loader_open(ft_loader *l, const char *path, int img_size, double dropout, int rank,
		   int ranks, const fluxrec_header *want, titan_err *err);
void ft_loader_close(ft_loader *l);
/* The next b kept samples into items (their buffers reused), drawing from g. */
int ft_loader_batch(ft_loader *l, torch_rng *g, int b, ft_item *items, titan_err *err);
/* A resumed loader: past the first consumed samples (read, nothing drawn; the
 * generator's state comes from the checkpoint). */
int ft_loader_seek(ft_loader *l, uint64_t consumed, titan_err *err);
void ft_items_free(ft_item *items, int b);

/* records.c: 1 when path is records (opened into l), 0 when it is not, -1
 * and err; the check of their header against the run's; a kept sample. */
int ft_records_open(ft_loader *l, const char *path, titan_err *err);
void ft_records_close(ft_loader *l);
int ft_records_check(const ft_loader *l, const fluxrec_header *want, const char *path,
		     titan_err *err);
int ft_records_take(ft_loader *l, torch_rng *g, ft_item *it, titan_err *err);

/* ---- the run (lib/fluxtrain's files share it) */

typedef struct ft_run {
	const job_config *c;
	comm *world;
	int rank, ranks;
	/* context parallelism: ranks rank / cp share a batch (dp of them), each
	 * holding cp_rank's share of its image and text tokens */
	int cp, cp_rank, dp, dp_rank;
	int shard, rep;    /* data_parallel_shard_degree, _replicate_degree */
	comm *cpc;         /* the cp group, NULL without context parallelism */
	/* FSDP over dp_shard x cp ranks (more than one): the model unbound, each
	 * rank holding its shard (lib/fluxfsdp), AdamW over the shard; the shards
	 * all-reduced over dp_replicate.  NULL: every rank the whole model, the
	 * gradients all-reduced over the world. */
	fluxfsdp *fsdp;
	comm *fsdpc, *repc;
	/* the communicators of the model's tensors: NCCL's over the same ranks
	 * on the CUDA backend, else the ones above (world_dev: the gradients'
	 * all-reduce without FSDP) */
	comm *world_dev, *fsdp_dev, *rep_dev, *cp_dev;
	cp_gather *gather; /* the attention's hook over it */
	cp_layout lay_img, lay_txt;
	int enc_bf16;      /* the encoders in bfloat16: 0.3.0's self._dtype under FSDP */
	backend *be;       /* the transformer's: enc_be, or a GPU's */
	backend *enc_be;   /* the CPU's: the encoders and the autoencoder */
	int device;        /* be's CUDA device, -1 on the CPU */
	size_t gpu_bytes;  /* its memory */
	fluxin *in;
	const fluxrec_header *h;
	flux_ae_config ae;
	flux_model *m;
	adamw *opt;
	lr_schedule sched;
	int64_t sched_steps;  /* lr_scheduler.last_epoch: the schedule's steps taken
	                         (train_state.step unless a resume left one out) */
	torch_rng g;
	ft_loader ld;
	/* the batch: b samples, li image tokens of ci values, lt text tokens */
	int64_t b, li, lt, ci, zc, hl, wl;
	ft_item *items;
	uint8_t *recs;
	int *status;
	titan_err *why;
	float *txt, *y, *moments, *eps, *z, *noise4, *x, *noise, *img_ids, *txt_ids, *t;
	float *empty_t5, *empty_clip; /* the empty caption's encodings, float32 */
	/* with cp > 1: this rank's share of x, noise, img_ids, txt, txt_ids */
	float *x_cp, *noise_cp, *img_ids_cp, *txt_cp, *txt_ids_cp;
	metrics_jsonl jl;
	int jl_open;
	tb_writer tb;
	int tb_open;
	double flops_per_token, peak;
} ft_run;

/* One line to stderr on rank 0, as the language models' trainer logs. */
#define LOG0(r, ...)                                  \
	do {                                          \
		if ((r)->rank == 0)                   \
			metrics_log(stderr, __VA_ARGS__); \
	} while (0)

/* fluxtrain.c: a batch of ld's samples through the encoders (the loader's
 * draws only); the step's draws in FluxTrainer's order (the posterior's eps,
 * the noise, then unless draw_t is 0 the timesteps) and the latents packed;
 * torch.randn of n values in the encoders' dtype; a double summed (or the
 * maximum taken) over the ranks. */
int ft_encode_batch(ft_run *r, ft_loader *ld, titan_err *err);
void ft_draw_latents(ft_run *r, int draw_t);
void ft_draw_normal(ft_run *r, float *out, size_t n);
/* The step's input from the batch's arrays: this rank's share of the tokens
 * under context parallelism (torchtitan's cp_shard without a load balancer:
 * rank i the i-th of cp equal runs of the image tokens, and of the text
 * tokens), the loss divided by global_numel. */
flux_batch ft_model_batch(ft_run *r, int64_t global_numel);
int ft_reduce_double(ft_run *r, double *v, int want_max, titan_err *err);
/* The log's memory: the process's peak, or the GPU arena's. */
void ft_memory(const ft_run *r, double *gib, double *pct);

/* sample.c: 0.3.0's FluxValidator.validate at step (its images, its loss
 * logged) and infer.py's images of inference.prompts_path (--sample). */
int ft_validate(ft_run *r, int64_t step, titan_err *err);
int ft_sample_all(ft_run *r, titan_err *err);

/* ckpt.c: the state after step into checkpoint.folder/step-STEP (the model
 * alone with model_only), and the resume: from checkpoint.load_step or the
 * latest step (*step the steps done, 0 when none), else from
 * checkpoint.initial_load_path's weights; with model_only the weights alone
 * (--sample). */
int ft_save_ckpt(ft_run *r, int64_t step, int model_only, titan_err *err);
int ft_load_ckpt(ft_run *r, int64_t *step, int model_only, titan_err *err);

#endif
