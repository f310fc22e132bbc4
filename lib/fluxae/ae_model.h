/* ae_model.h: the autoencoder's weights, as load.c fills them and fluxae.c
 * runs them (private to lib/fluxae).  Every pointer is backend memory of the
 * model's element type (dt). */
#ifndef TITAN_AE_MODEL_H
#define TITAN_AE_MODEL_H

#include "fluxae/fluxae.h"

typedef struct ae_conv {
	void *w;                  /* (cout, cin, k, k) */
	void *b;                  /* (cout) */
	int64_t cin, cout, k;     /* k 3 or 1 */
} ae_conv;

typedef struct ae_norm {
	void *w, *b;              /* (c) */
	int64_t c;
} ae_norm;

typedef struct ae_resnet {
	ae_norm norm1, norm2;
	ae_conv conv1, conv2;
	ae_conv nin;              /* nin_shortcut; w NULL when cin == cout */
} ae_resnet;

typedef struct ae_attn {
	ae_norm norm;
	ae_conv q, k, v, proj_out;
} ae_attn;

typedef struct ae_mid {
	ae_resnet block_1;
	ae_attn attn_1;
	ae_resnet block_2;
} ae_mid;

typedef struct ae_half {
	ae_conv conv_in;
	ae_resnet *block;         /* (n_levels, per_level): level I's block J at I*per_level + J */
	int64_t per_level;        /* num_res_blocks (encoder), num_res_blocks + 1 (decoder) */
	ae_conv resample[FLUX_AE_MAX_LEVELS]; /* encoder: down.I.downsample (I < L-1);
	                                         decoder: up.I.upsample (I > 0) */
	ae_mid mid;
	ae_norm norm_out;
	ae_conv conv_out;
} ae_half;

struct flux_ae {
	backend *be;
	flux_ae_config c;
	be_dtype dt;              /* weights and activations: BE_F32 or BE_BF16 */
	ae_half enc, dec;
	void **params;            /* every weight tensor, for freeing */
	size_t n_params, cap_params;
	size_t chunk_bytes;       /* flux_ae_set_chunk_bytes */
	int64_t conv_numel;       /* every convolution's weight and bias values */
};

#endif
