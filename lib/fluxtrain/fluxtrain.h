/* fluxtrain.h: titan-train for model.name = "flux": torchtitan 0.3.0's
 * FluxTrainer (models/flux/trainer.py) step for step.
 *
 * Each step: a batch of image-caption samples from the loader (its draws on
 * the run's torch generator, fluxtrain_priv.h), encoded as preprocess_data
 * does (lib/fluxin: T5's states and CLIP's pooled output of the captions, a
 * dropped prompt's the empty caption's; the autoencoder's moments of the
 * crops); then from the same generator the posterior's sample
 * (randn_like(mean)), the noise (randn_like(latents)) and the timesteps
 * (rand(b)); the rectified-flow loss and gradients (lib/flux); the gradients
 * summed over the data-parallel ranks (the loss is each rank's squared errors
 * over the global count of latent values, MSELoss over global_valid_tokens);
 * clip_grad_norm_ to training.max_norm; AdamW (optimizer.*) at the lr of
 * lr_scheduler.*; the log line and metrics.jsonl every metrics.log_freq steps.
 *
 * The generator is torch's CPU one (core/torch_rng), seeded as 0.3.0's
 * set_determinism seeds it: debug.seed plus the rank's place among the
 * data-parallel ranks, torch's default seed without debug.seed on one
 * process.  The weights are flux_model_init's from debug.seed (0 without). */
#ifndef TITAN_FLUXTRAIN_H
#define TITAN_FLUXTRAIN_H

#include "comm/comm.h"
#include "config/config.h"
#include "core/err.h"

typedef struct fluxtrain_opts {
	int threads; /* 0: OpenMP's default */
	int sample;  /* titan-train --sample: 0.3.0's infer.py, images of the
			inference.prompts_path prompts instead of training */
	int backend; /* enum trainer_backend: the transformer's (--backend);
			AUTO keeps it on the CPU (the GPU trainer is unmeasured) */
	int device;  /* this process's CUDA device, -1: none */
} fluxtrain_opts;

/* Run the job c describes on world's ranks.  0, or -1 and err. */
int fluxtrain_run(const job_config *c, comm *world, const fluxtrain_opts *o, titan_err *err);

#endif
