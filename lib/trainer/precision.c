/* torchtitan 0.2.2's choice of precision (distributed/utils.py maybe_enable_amp,
 * the MixedPrecisionPolicy of parallelize_llama, training.dtype), as element
 * types for titan's model. */
#include <stdio.h>
#include <string.h>

#include "trainer/precision.h"

static int dtype_of(const char *key, const char *name, be_dtype *t, titan_err *e)
{
	int v = be_dtype_parse(name);
	if (v != BE_F32 && v != BE_BF16)
		return err_set(e, "%s = \"%s\": expected \"float32\" or \"bfloat16\"", key, name);
	*t = (be_dtype)v;
	return 0;
}

int train_prec_choose(const job_config *c, const prec_degrees *d, train_prec *p, titan_err *e)
{
	be_dtype train = BE_F32, param = BE_F32, reduce = BE_F32;
	if (dtype_of("training.dtype", c->training.dtype, &train, e) ||
	    dtype_of("training.mixed_precision_param", c->training.mixed_precision_param, &param,
		     e) ||
	    dtype_of("training.mixed_precision_reduce", c->training.mixed_precision_reduce,
		     &reduce, e))
		return -1;
	*p = (train_prec){.mode = PREC_NONE, .model = {BE_F32, BE_F32, BE_F32, BE_F32},
			  .autocast = BE_F32, .reduce = BE_F32, .master = BE_F32};
	const char *pn = be_dtype_name(param);
	if (train == BE_BF16) {
		p->mode = PREC_BF16;
		p->model = (model_prec){BE_BF16, BE_BF16, BE_BF16, BE_BF16};
		p->reduce = BE_BF16;
		p->master = BE_BF16;
		p->line = "Mixed precision training is handled by AMP";
		snprintf(p->detail, sizeof p->detail, "training.dtype = bfloat16: parameters, "
			 "gradients, optimizer states and activations in bfloat16");
	} else if (d->dp_shard > 1 || d->cp > 1 || c->follows_030 ||
		   strcmp(c->training.mixed_precision_mode, "fully_shard") == 0) {
		/* 0.3.0 installs FSDP's MixedPrecisionPolicy at every degree, one
		 * rank and tensor or pipeline parallelism alone included */
		p->mode = PREC_FSDP;
		p->model = (model_prec){param, reduce, param, param};
		p->reduce = reduce;
		p->line = "Mixed precision training is handled by fully_shard";
		snprintf(p->detail, sizeof p->detail, "fully_shard: parameters gathered in %s, "
			 "activations and residual stream %s, gradients reduced in %s", pn, pn,
			 be_dtype_name(reduce));
	} else if (d->tp > 1 || d->pp > 1) {
		p->line = "Mixed precision training is disabled";
		snprintf(p->detail, sizeof p->detail, "tensor or pipeline parallelism without "
			 "FSDP: float32 throughout, as torchtitan");
	} else {
		p->mode = PREC_AUTOCAST;
		p->model = (model_prec){BE_F32, BE_F32, param, BE_F32};
		p->autocast = param;
		p->line = "Mixed precision training is handled by AMP";
		if (param == BE_F32)
			snprintf(p->detail, sizeof p->detail, "autocast float32: float32 throughout");
		else
			snprintf(p->detail, sizeof p->detail, "autocast %s: float32 master weights, "
				 "gradients and optimizer; linears and activations in %s, residual "
				 "stream float32", pn, pn);
	}
	return 0;
}

int train_prec_apply(model *m, const train_prec *p, titan_err *e)
{
	if (model_set_prec(m, &p->model, e))
		return err_prefix(e, "%s", p->mode == PREC_BF16 ? "training.dtype"
							    : "training.mixed_precision_param");
	return p->autocast == BE_F32 ? 0 : model_set_autocast(m, p->autocast, e);
}
