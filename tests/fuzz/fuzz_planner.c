/* fuzz_planner: lib/planner's arithmetic (titan-train --dry-run) on random
 * flavors, degrees and sizes, through the config's own keys.
 *
 * Input: 35 bytes, read in order (missing ones are 0): the family and flavor;
 * the dp_replicate, dp_shard, cp, tp, pp and ep degrees; the world size; the
 * local batch, seq_len, micro-batch size and global batch; the schedule, AC
 * mode, dtypes and reshard policy; the device's bytes.  A size is a 16-bit
 * mantissa shifted by 0-63 bits, so that small, large and absurd values are
 * all a byte away.
 * Properties: a config the trainer's validation accepts is planned or refused
 * with a message; a plan's every figure is at most INT64_MAX, its peak the
 * exact sum of its terms; "fits" means every peak is within the device; and
 * the figures are at least what the plan cannot hold less of (every
 * parameter once across a replica's ranks, one micro-batch's tokens), so a
 * product that wrapped shows.  Allocations stay under libFuzzer's
 * -malloc_limit_mb (the schedule is bounded before it is built); UBSan
 * reports any signed overflow.  FUZZ_PLANNER_VERBOSE=1 in the environment
 * prints each input's outcome, for whoever adds to the corpus. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "model/family.h"
#include "planner/planner.h"

typedef struct input {
	const uint8_t *p;
	size_t n;
} input;

static unsigned byte(input *in)
{
	if (in->n == 0)
		return 0;
	in->n--;
	return *in->p++;
}

static uint64_t bytes(input *in, int k)
{
	uint64_t v = 0;
	for (int i = 0; i < k; i++)
		v |= (uint64_t)byte(in) << (8 * i);
	return v;
}

/* A degree: 0-239, or -1 (the rest of the world) or huge. */
static long long degree(input *in)
{
	static const long long big[] = {-1, 0, 1 << 20, 1LL << 31, 1LL << 62, INT64_MAX};
	unsigned b = byte(in);
	return b < 240 ? (long long)b : big[b % 6];
}

static long long size(input *in)
{
	uint64_t m = bytes(in, 2);
	unsigned s = byte(in) % 64;
	uint64_t v = m << s;
	if (s && m >> (64 - s))
		v = UINT64_MAX;
	return v > INT64_MAX ? INT64_MAX : (long long)v;
}

static void check(int ok)
{
	if (!ok)
		abort();
}

static int set(job_config *c, const char *key, const char *fmt, long long v)
{
	char text[32];
	snprintf(text, sizeof text, fmt, v);
	titan_err e;
	return config_set(c, key, text, &e);
}

static int set_str(job_config *c, const char *key, const char *v)
{
	titan_err e;
	return config_set(c, key, v, &e);
}

/* The independent floors: the ranks of one replica of every role hold each
 * parameter at least once, and a micro-batch keeps at least one byte per
 * token of its sequence's share (its ids, or its hidden states). */
static void check_report(const plan_report *r)
{
	const plan_degrees *d = &r->d;
	int fits = 1;
	double params = 0;
	for (int i = 0; i < r->n_roles; i++) {
		const plan_role *ro = &r->roles[i];
		uint64_t sum = 0;
		for (int t = 0; t < PLAN_TERM_COUNT; t++) {
			check(ro->bytes[t] <= (uint64_t)INT64_MAX);
			check(!__builtin_add_overflow(sum, ro->bytes[t], &sum));
		}
		check(sum == ro->peak && sum <= (uint64_t)INT64_MAX);
		for (int k = 0; k < PLAN_DIM_COUNT; k++)
			check(ro->sent[k] <= (uint64_t)INT64_MAX);
		fits &= ro->peak <= r->device_bytes;
		params += (double)ro->bytes[PLAN_PARAMS] * d->dp_shard * d->cp * d->tp;
		int64_t tokens = r->seq_len / d->cp / d->tp;
		check((double)ro->bytes[PLAN_ACTIVATIONS] >= (double)r->microbatch * (double)tokens);
	}
	check(r->fits == fits);
	double psize = strncmp(r->dtypes, "params bfloat16", 15) == 0 ? 2 : 4;
	check(params >= (double)r->n_params * psize * (1 - 1e-9));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
	static const char *const kinds[] = {"GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS",
					    "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"};
	static const char *const reshard[] = {"default", "always", "never"};
	static const char *const dtypes[] = {"float32", "bfloat16"};
	input in = {data, n};
	int nf = 0;
	while (model_family_at(nf) != NULL)
		nf++;
	const model_family *f = model_family_at((int)(byte(&in) % (unsigned)nf));
	int nv = 0;
	while (f->flavors[nv].name != NULL)
		nv++;
	const char *flavor = f->flavors[byte(&in) % (unsigned)nv].name;

	job_config c;
	titan_err e;
	if (config_defaults(&c, &e) != 0)
		return 0;
	static const char *const dims[] = {
		"parallelism.data_parallel_replicate_degree", "parallelism.data_parallel_shard_degree",
		"parallelism.context_parallel_degree", "parallelism.tensor_parallel_degree",
		"parallelism.pipeline_parallel_degree", "parallelism.expert_parallel_degree"};
	int bad = set_str(&c, "model.name", f->name) || set_str(&c, "model.flavor", flavor);
	for (int i = 0; i < 6; i++)
		bad |= set(&c, dims[i], "%lld", degree(&in));
	int world = (int)(bytes(&in, 3) % ((1u << 20) + 1));
	world = world ? world : 1;
	bad |= set(&c, "training.local_batch_size", "%lld", size(&in));
	bad |= set(&c, "training.seq_len", "%lld", size(&in));
	bad |= set(&c, "parallelism.pipeline_parallel_microbatch_size", "%lld", size(&in));
	long long gb = size(&in);
	bad |= set(&c, "training.global_batch_size", "%lld", gb == 0 ? -1 : gb);
	bad |= set_str(&c, "parallelism.pipeline_parallel_schedule", kinds[byte(&in) % 7]);
	unsigned ac = byte(&in) % 4;
	bad |= set_str(&c, "activation_checkpoint.mode", ac == 0 ? "none" : ac == 1 ? "full"
								 : "selective");
	bad |= set_str(&c, "activation_checkpoint.selective_ac_option", ac == 3 ? "2" : "op");
	unsigned t = byte(&in);
	bad |= set_str(&c, "training.dtype", dtypes[t & 1]);
	bad |= set_str(&c, "training.mixed_precision_param", dtypes[(t >> 1) & 1]);
	bad |= set_str(&c, "training.mixed_precision_reduce", dtypes[(t >> 2) & 1]);
	bad |= set_str(&c, "parallelism.fsdp_reshard_after_forward", reshard[byte(&in) % 3]);
	uint64_t device = bytes(&in, 8);
	e.msg[0] = '\0';
	if (bad || device == 0 || config_validate(&c, &e) != 0) {
		if (getenv("FUZZ_PLANNER_VERBOSE"))
			fprintf(stderr, "%s %s: not a config (%s)\n", f->name, flavor,
				bad ? "a key refused its value" : device ? e.msg : "no device bytes");
	} else {
		plan_report r;
		e.msg[0] = '\0';
		int rc = planner_run(&c, world, device, &r, &e);
		if (getenv("FUZZ_PLANNER_VERBOSE"))
			fprintf(stderr, "%s %s on %d: %s\n", f->name, flavor, world,
				rc ? e.msg : r.fits ? "fits" : "does not fit");
		if (rc == 0) {
			check_report(&r);
			planner_report_free(&r);
		} else {
			check(e.msg[0] != '\0');
		}
	}
	config_free(&c);
	return 0;
}
