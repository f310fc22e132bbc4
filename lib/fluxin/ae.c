/* ae.c: the autoencoder step of lib/fluxin.  The FLUX autoencoder's encoder
 * (lib/fluxae) is not in this tree yet: until it is, an autoencoder is
 * refused, saying so, rather than made up. */
#include <stddef.h>

#include "fluxin/fluxin_impl.h"

fluxin_ae *fluxin_ae_open(backend *be, const char *path, const char *config_path,
			  be_dtype dtype, fluxin_ae_info *info, titan_err *err)
{
	(void)be;
	(void)config_path;
	(void)dtype;
	(void)info;
	err_set(err, "%s: this build has no FLUX autoencoder yet (lib/fluxae is still being "
		"written): leave out --autoencoder, and the records keep the RGB crops for the "
		"trainer to encode", path);
	return NULL;
}

int fluxin_ae_encode(fluxin_ae *a, const float *pixels, int64_t b, int64_t n, float *moments,
		     titan_err *err)
{
	(void)a;
	(void)pixels;
	(void)b;
	(void)n;
	(void)moments;
	return err_set(err, "no FLUX autoencoder in this build");
}

void fluxin_ae_free(fluxin_ae *a)
{
	(void)a;
}
