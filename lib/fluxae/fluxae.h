/* fluxae.h: the autoencoder of FLUX.1 (torchtitan 0.3.0's AutoEncoder,
 * models/flux/model/autoencoder.py, which BFL's ae.safetensors fills), forward
 * only, in float32 or with the bfloat16 model's roundings.  Flux training
 * encodes each image to its latent distribution and samples it; sampling and
 * validation decode latents back to pixels.
 *
 * Layout: NCHW, (batch, channels, height, width) row-major, as torch's.  With
 * L = n_levels = len(ch_mult) and f = 2^(L-1) the spatial factor:
 *
 *   ResnetBlock(cin, cout)  h = conv1(swish(norm1(x))); h = conv2(swish(norm2(h)));
 *                           x' = h + (cin == cout ? x : nin_shortcut(x))
 *   AttnBlock(c)            n = norm(x); q, k, v = 1x1 convs of n;
 *                           x' = x + proj_out(softmax(q^T k / sqrt(c)) v) over
 *                           the h*w positions, one head of c channels
 *   norm                    GroupNorm(32 groups, eps 1e-6, affine); swish(x) = x sigmoid(x)
 *   conv                    3x3 padding 1 (biased), or 1x1 (nin_shortcut, q, k, v, proj_out)
 *   Downsample(c)           zero pad right and bottom by one (pad (0, 1, 0, 1)),
 *                           then a 3x3 conv of stride 2, no padding: h/2 x w/2
 *   Upsample(c)             nearest 2x, then a 3x3 conv
 *   Encoder  x (in_channels) -> conv_in (ch); per level i: num_res_blocks
 *            ResnetBlocks to ch*ch_mult[i] (the first from ch*ch_mult[i-1], ch at
 *            level 0), a Downsample but at the last level; mid (block_1,
 *            attn_1, block_2); norm_out, swish, conv_out to 2*z_channels: the
 *            moments, mean then logvar.
 *   Decoder  z -> conv_in (ch*ch_mult[L-1]); mid; per level i from L-1 down to
 *            0: num_res_blocks + 1 ResnetBlocks to ch*ch_mult[i], an Upsample
 *            but at level 0; norm_out, swish, conv_out to out_ch.
 *   encode   scale_factor * ((mean + exp(logvar / 2) * eps) - shift_factor),
 *            eps ~ N(0, 1) (DiagonalGaussian's randn_like(mean)).
 *   decode   decoder(z / scale_factor + shift_factor).
 *
 * Loading: a safetensors file (or a folder st_set_open reads) with the
 * tensors named as BFL's ae.safetensors and torchtitan's modules name them:
 * encoder.conv_in.weight (ch, in_channels, 3, 3), encoder.conv_in.bias,
 * encoder.down.I.block.J.{norm1,conv1,norm2,conv2,nin_shortcut}.{weight,bias},
 * encoder.down.I.downsample.conv.*, encoder.mid.{block_1,attn_1,block_2}.*
 * (attn_1.{norm,q,k,v,proj_out}.*), encoder.{norm_out,conv_out}.*, and the
 * decoder's likewise with up.I.block.J and up.I.upsample.conv (up.I holds
 * level I: the decoder's first blocks are up.(L-1)'s).  Conv weights are
 * (cout, cin, k, k), biases and norms (c).  Stored F32, BF16 or F16, converted
 * to float32; every tensor's shape is checked against the config, and a
 * missing, misshapen or non-float one is an error naming it.  Tensors the
 * config does not use are ignored (load_state_dict(strict=False)).
 *
 * Computation: weights and activations live in a backend's memory (any
 * backend) and every step is a backend op: a 3x3 conv is the conv_bias op,
 * then an im2col of a chunk of output pixels and the matmul adding its
 * product (the chunks bounded by flux_ae_set_chunk_bytes), a 1x1 conv the
 * same with one matmul; groupnorm_fwd, swish (beta 1), upsample2x and add;
 * the attention, whose head of c channels the attention ops do not take,
 * two matmuls around softmax_exp and div_rows over chunks of query rows.
 * Pixels, moments and latents stay host float32 in this API (copied in and
 * out); the latents' unscaling and DiagonalGaussian's sample are host C.  A
 * batch is computed an image at a time: an encode or decode holds three
 * activations of the largest (channels x height x width) of one image, the
 * mid attention's q, k, v and one chunk, beside the weights.  The model keeps
 * a pointer to the backend, which must outlive it. */
#ifndef TITAN_FLUXAE_H
#define TITAN_FLUXAE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/err.h"

#define FLUX_AE_MAX_LEVELS 8

typedef struct flux_ae_config {
	int64_t resolution, in_channels, ch, out_ch, num_res_blocks, z_channels;
	int64_t ch_mult[FLUX_AE_MAX_LEVELS], n_levels; /* len(ch_mult) */
	float scale_factor, shift_factor;
} flux_ae_config;

/* FLUX.1's ae: resolution 256, in_channels 3, ch 128, out_ch 3, ch_mult
 * (1, 2, 4, 4), num_res_blocks 2, z_channels 16, scale_factor 0.3611,
 * shift_factor 0.1159 (torchtitan's flux configs). */
void flux_ae_config_default(flux_ae_config *c);
/* A JSON object with AutoEncoder.Config's field names ("ch_mult" an array of
 * 1 to 8 integers); absent fields keep the default, an unknown one is an
 * error.  ch must be a multiple of 32 (GroupNorm's 32 groups), the other
 * sizes positive.  0, or -1 naming the field. */
int flux_ae_config_read(flux_ae_config *c, const char *path, titan_err *err);

typedef struct flux_ae flux_ae;

/* Open the weights at safetensors_path for config c (copied) into be's
 * memory; NULL and err on failure.  Free with flux_ae_free.
 * dtype BE_F32: the float32 model (torchtitan's without FSDP).
 * dtype BE_BF16: the numerics of the model cast to bfloat16, as torchtitan's
 * Flux trainer casts its autoencoder to training.mixed_precision_param when
 * FSDP is on (load_ae's whole-model .to(bfloat16)) and preprocess_data casts
 * the images: the weights rounded to bfloat16 as they load, the inputs
 * rounded, and every op's output rounded where the bf16 model stores a tensor
 * (each conv, norm, sigmoid and product of swish, residual sum, attention
 * output); inside an op the arithmetic is float32, as torch's bf16 CPU kernels
 * do it (its attention feeds the softmax's exps to the P @ V product in
 * bfloat16, so they are rounded here too).  Weights and activations are
 * stored in bfloat16: half the float32 model's memory. */
flux_ae *flux_ae_open(backend *be, const char *safetensors_path, const flux_ae_config *c,
		      be_dtype dtype, titan_err *err);
const flux_ae_config *flux_ae_config_of(const flux_ae *m);
/* The values of every convolution's weight and bias: what building torch's
 * AutoEncoder draws from the default generator (kaiming_uniform_ weights and
 * uniform_ biases, one 32-bit draw per float32 value), which torchtitan's
 * FluxTrainer does after seeding, before its loader's first draw. */
int64_t flux_ae_conv_numel(const flux_ae *m);
void flux_ae_free(flux_ae *m);
/* The most an im2col chunk or a chunk of attention rows (scores, exps and
 * products) may take (default 32 MiB; at least one output pixel or query row
 * is computed at a time):
 * less memory for more, smaller matmuls.  Results do not depend on it beyond
 * the matmul's own summation order. */
void flux_ae_set_chunk_bytes(flux_ae *m, size_t bytes);

/* pixels (b, in_channels, h, w) host float32 in [-1, 1], h and w multiples of
 * 2^(n_levels-1);
 * moments (b, 2*z_channels, h/f, w/f) host float32: the encoder's output, mean
 * then logvar channels.  0, or -1 and err (bad sizes, out of memory). */
int flux_ae_encode(flux_ae *m, const float *pixels, int64_t b, int64_t h, int64_t w,
		   float *moments, titan_err *err);
/* latents z = scale*((mean + exp(0.5*logvar)*eps) - shift), eps (b, z, hl, wl)
 * given by the caller (torchtitan draws it with randn_like(mean)); with bf16
 * set, each op rounded as the bf16 model does (eps rounded too, as
 * randn_like(mean) draws it in bfloat16; the shift is rounded to bfloat16
 * before it is subtracted, as torch does a Python scalar's add to a bfloat16
 * tensor, the scale multiplies in float32 as torch's mul does).
 * moments (b, 2*z_channels, hl, wl), z (b, z_channels, hl, wl), host float32. */
void flux_ae_sample(const flux_ae_config *c, int bf16, const float *moments, const float *eps,
		    int64_t b, int64_t hl, int64_t wl, float *z);
/* pixels (b, out_ch, hl*f, wl*f) from latents z (b, z_channels, hl, wl):
 * decode(z) = decoder(z/scale + shift).  0, or -1 and err. */
int flux_ae_decode(flux_ae *m, const float *z, int64_t b, int64_t hl, int64_t wl, float *pixels,
		   titan_err *err);

#endif
