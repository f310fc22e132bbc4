/* fluxin_impl.h: the autoencoder step of lib/fluxin (private): lib/fluxae's
 * encoder behind three functions. */
#ifndef TITAN_FLUXIN_IMPL_H
#define TITAN_FLUXIN_IMPL_H

#include <stdint.h>

#include "backend/backend.h"
#include "core/err.h"

typedef struct fluxin_ae fluxin_ae;

/* What the records' header says of the autoencoder. */
typedef struct fluxin_ae_info {
	int64_t z_channels;          /* moments have 2 z_channels channels */
	int64_t downsample;          /* image side / latent side (8) */
	float scale_factor, shift_factor;
} fluxin_ae_info;

/* Open the autoencoder's weights (path: ae.safetensors) with the config at
 * config_path (NULL: FLUX's), numerics dtype; NULL and err on failure. */
fluxin_ae *fluxin_ae_open(backend *be, const char *path, const char *config_path,
			  be_dtype dtype, fluxin_ae_info *info, titan_err *err);
/* pixels (b, 3, n, n) in [-1, 1] -> moments (b, 2 z_channels, n / 8, n / 8),
 * the encoder's output before DiagonalGaussian's sampling: mean, then logvar. */
int fluxin_ae_encode(fluxin_ae *a, const float *pixels, int64_t b, int64_t n, float *moments,
		     titan_err *err);
void fluxin_ae_free(fluxin_ae *a);
/* flux_ae_conv_numel of the autoencoder. */
int64_t fluxin_ae_draws(const fluxin_ae *a);
struct flux_ae *fluxin_ae_model(fluxin_ae *a);

#endif
