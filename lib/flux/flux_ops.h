/* flux_ops.h: the Flux transformer's host-side pieces (private to
 * lib/flux): the tables and the noisy input a step computes on the host from
 * its batch and uploads to the backend, float32, as torch's float32 CPU code
 * computes them (no fused multiply-add).  Everything else of the step is a
 * backend op. */
#ifndef TITAN_FLUX_OPS_H
#define TITAN_FLUX_OPS_H

#include <stdint.h>

/* timestep_embedding(t, dim) (dim even, max_period 10000, time_factor 1000):
 * out (b, dim) = [cos(a), sin(a)], a_i = (1000 t) * exp(-ln(10000) i / (dim/2)). */
void fx_timestep_embedding(float *out, const float *t, int64_t b, int64_t dim);

/* EmbedND's table for one sample: cs (n, pairs, 2) = (cos, sin) of each
 * position's angle for each pair, the axes' pairs one after the other:
 * axis a's pair p turns by ids[a] / theta^(2p / axes_dim[a]).  ids (n, 3). */
void fx_rope_table(float *cs, const float *ids, int64_t n, const int64_t axes_dim[3],
		   double theta);

/* The same under FSDP's bf16 inputs (fully_shard casts the timesteps and
 * the ids to bf16 before the model computes its tables), values in float32:
 * timestep_embedding of t rounded, 1000 t rounded, the float32 angles'
 * cos and sin rounded (embedding.to(t)); rope() in bf16: the ids rounded,
 * the base theta rounded, arange / dim, theta^scale, 1 / it, the angles and
 * their cos and sin each rounded (the table's .float() keeps them). */
void fx_timestep_embedding_bf16(float *out, const float *t, int64_t b, int64_t dim);
void fx_rope_table_bf16(float *cs, const float *ids, int64_t n, const int64_t axes_dim[3],
			double theta);

/* The rectified-flow input: img (b * n, d) = (1 - t_i) x + t_i noise. */
void fx_noisy(float *img, const float *x, const float *noise, const float *t, int64_t b,
	      int64_t n, int64_t d);

#endif
