/* ae.c: the autoencoder step of lib/fluxin, on lib/fluxae: the encoder's
 * moments, the sampling left to the trainer. */
#include <stdlib.h>

#include "fluxae/fluxae.h"
#include "fluxin/fluxin_impl.h"

struct fluxin_ae {
	flux_ae *m;
};

fluxin_ae *fluxin_ae_open(backend *be, const char *path, const char *config_path,
			  be_dtype dtype, fluxin_ae_info *info, titan_err *err)
{
	flux_ae_config c;
	flux_ae_config_default(&c);
	if (config_path != NULL && flux_ae_config_read(&c, config_path, err) != 0)
		return NULL;
	if (c.in_channels != 3) {
		err_set(err, "%s: in_channels %lld: the images are RGB", config_path ? config_path : path,
			(long long)c.in_channels);
		return NULL;
	}
	fluxin_ae *a = calloc(1, sizeof *a);
	if (a == NULL) {
		err_set(err, "out of memory");
		return NULL;
	}
	if ((a->m = flux_ae_open(be, path, &c, dtype, err)) == NULL) {
		free(a);
		err_prefix(err, "autoencoder %s", path);
		return NULL;
	}
	*info = (fluxin_ae_info){.z_channels = c.z_channels,
				 .downsample = (int64_t)1 << (c.n_levels - 1),
				 .scale_factor = c.scale_factor, .shift_factor = c.shift_factor};
	return a;
}

flux_ae *fluxin_ae_model(fluxin_ae *a)
{
	return a->m;
}

int64_t fluxin_ae_draws(const fluxin_ae *a)
{
	return flux_ae_conv_numel(a->m);
}

int fluxin_ae_encode(fluxin_ae *a, const float *pixels, int64_t b, int64_t n, float *moments,
		     titan_err *err)
{
	return flux_ae_encode(a->m, pixels, b, n, n, moments, err);
}

void fluxin_ae_free(fluxin_ae *a)
{
	if (a == NULL)
		return;
	flux_ae_free(a->m);
	free(a);
}
