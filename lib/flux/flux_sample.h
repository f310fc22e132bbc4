/* flux_sample.h: images from the Flux transformer, as torchtitan 0.3.0's
 * validator and inference make them (models/flux/inference/sampling.py:
 * generate_image, denoise, get_schedule, save_image; utils.py's
 * unpack_latents; the autoencoder's decode).
 *
 * The caller brings what is random or text: the noise 0.3.0 draws with
 * generate_noise_latent (torch.randn (b, 16, H/8, W/8)), the prompts' T5
 * states and CLIP pooled vectors, and for classifier-free guidance those of
 * the empty prompt.  Then, as denoise does it:
 *   schedule   get_schedule(steps, (H/8)(W/8), shift=True): the unpacked
 *              latent's area, not the packed token count (flux_schedule)
 *   guidance   on: the batch doubled to [uncond; cond] (the noise twice, the
 *              empty prompt's encodings first), one forward of 2b per step,
 *              pred = pred_u + scale (pred_c - pred_u) for both halves; the
 *              conditional half's latents kept at the end.  0.3.0's flavors
 *              have no guidance embedder: the scale enters only here.
 *   loop       for each (t_curr, t_prev) of the schedule: pred =
 *              FluxModel(img, img_ids, txt, txt_ids zeros, y, t_curr), img +=
 *              (t_prev - t_curr) pred, in float32 as torch computes it (the
 *              difference in float64, rounded to float32 by the product)
 *   decode     unpack_latents, then the autoencoder's decode (z / scale +
 *              shift, then the decoder: flux_ae_decode)
 *   save       save_image's bytes: clamp(-1, 1), 127.5 (x + 1) in float32,
 *              truncated to uint8 (Tensor.byte()), (h, w, c) as PIL takes
 *              them (flux_sample_rgb8)
 * All of it is float32 on the model's and the autoencoder's backends; the
 * Euler steps and the guidance are host C on the host copies of the
 * predictions.
 *
 * 0.3.0's validator (FluxValidator.validate) samples one prompt at a time
 * (b = 1) at height = width = 16 (img_size // 16) with its
 * sampling.{enable_classifier_free_guidance, classifier_free_guidance_scale,
 * denoising_steps}, and saves the image (save_image keeps x[0]) as
 * {dump_folder}/{save_img_folder}/image_rank{rank}_{step}.png with
 * add_sampling_metadata on: flux_sample_save_png. */
#ifndef TITAN_FLUX_SAMPLE_H
#define TITAN_FLUX_SAMPLE_H

#include <stdint.h>

#include "core/err.h"
#include "flux/flux.h"
#include "fluxae/fluxae.h"

/* generate_noise_latent's ratio and utils.py's patch: latents are H/8 x W/8,
 * packed 2x2, so an image side is a multiple of 16. */
#define FLUX_LATENT_RATIO 8
#define FLUX_SIDE_MULTIPLE 16
#define FLUX_SAMPLE_MAX_SIDE 16384
#define FLUX_SAMPLE_MAX_STEPS 10000

/* get_schedule(steps, image_seq_len, shift) into ts (steps + 1 values, 1
 * first, 0 last): torch.linspace(1, 0, steps + 1) in float32 (torch's CPU
 * kernel computes start + step i with a fused multiply-add in its AVX2 and
 * AVX-512 builds; so does this), then with shift time_shift(mu, 1, t) =
 * e / (e + (1/t - 1)) with mu = get_lin_function()(image_seq_len) in float64
 * and e = exp(mu) rounded to float32, the rest in float32 as torch's tensor
 * ops do it.  0.3.0 calls it with image_seq_len = (H/8)(W/8). */
void flux_schedule(float *ts, int steps, int64_t image_seq_len, int shift);

/* One sampling job's inputs, host float32.  C = in_channels / 4 (16 for every
 * 0.3.0 flavor), hl = height / 8, wl = width / 8, li = (hl/2)(wl/2). */
typedef struct flux_sample_in {
	int64_t b;                 /* images */
	int64_t height, width;     /* pixels, multiples of 16 (the validator's 16 (size // 16)) */
	int64_t lt, c_txt, c_vec;  /* T5 tokens, T5's width (context_in_dim), CLIP's (vec_in_dim) */
	const float *noise;        /* (b, C, hl, wl), or packed (b, li, in_channels) */
	int noise_packed;          /* noise is already packed */
	const float *txt, *y;      /* the prompts': T5 states (b, lt, c_txt), CLIP pooled (b, c_vec) */
	const float *txt_empty;    /* the empty prompt's, read with cfg alone: (b, lt, c_txt) */
	const float *y_empty;      /* (b, c_vec) (0.3.0 repeats one encoding b times) */
	int steps;                 /* denoising steps, 1 .. FLUX_SAMPLE_MAX_STEPS */
	int cfg;                   /* enable_classifier_free_guidance */
	double cfg_scale;          /* classifier_free_guidance_scale (finite) */
} flux_sample_in;

/* What the caller wants back; each NULL or sized by the caller. */
typedef struct flux_sample_out {
	float *packed;    /* (b, li, in_channels): the final latents as the loop leaves them */
	float *latents;   /* (b, C, hl, wl): unpacked */
	float *pixels;    /* (b, out_ch, height, width): decoded (needs the autoencoder) */
	uint8_t *rgb;     /* (b, height, width, 3): save_image's bytes (needs it too) */
} flux_sample_out;

/* 0, or -1 and err with one line naming the field: sizes not multiples of 16
 * or out of range, steps, a scale that is not finite, a missing input, the
 * encodings' widths against the model's, an autoencoder whose z_channels is
 * not C, whose factor is not 8 or (for rgb) whose out_ch is not 3, pixels or
 * rgb asked for without an autoencoder. */
int flux_sample_check(const flux_model *m, const flux_ae *ae, const flux_sample_in *in,
		      const flux_sample_out *out, titan_err *err);

/* The job: flux_sample_check, then the loop and what out asks for.  ae may be
 * NULL when out wants no pixels.  The model's gradients are untouched.  0,
 * or -1 and err. */
int flux_sample(flux_model *m, flux_ae *ae, const flux_sample_in *in, flux_sample_out *out,
		titan_err *err);

/* save_image's conversion of decoded pixels (b, 3, h, w) to rgb (b, h, w, 3):
 * (uint8)(127.5f * (clamp(x, -1, 1) + 1.0f)), truncated; NaN gives 0. */
void flux_sample_rgb8(uint8_t *rgb, const float *pixels, int64_t b, int64_t h, int64_t w);

/* save_image(name, dir, x, add_sampling_metadata, prompt) of one image's
 * rgb (h, w, 3) into path (a temporary name, fsync, rename): a PNG with the
 * EXIF block 0.3.0 gives it, Software "AI generated;txt2img;flux", Make
 * "Black Forest Labs", Model name (0.3.0's file name, e.g.
 * image_rank0_100.png) and, when prompt is not NULL (add_sampling_metadata,
 * which the validator sets), ImageDescription prompt.  0, or -1 and err. */
int flux_sample_save_png(const char *path, const uint8_t *rgb, int64_t h, int64_t w,
			 const char *name, const char *prompt, titan_err *err);

#endif
