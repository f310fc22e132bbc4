/* The kernels of kernels/ (launch.h) against the CPU backend's float64 ops, on
 * random inputs of several shapes (odd sizes take the kernels' element-wise
 * paths, multiples of 8 their 16-byte vectors), float32 and bf16, outputs
 * poisoned first.  Method and bounds: gpu_test.h.  Without a GPU every test
 * reports skipped with the reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/cpu_bf16.h"
#include "backend/cpu_kernels.h"
#include "gpu_test.h"

/* f32 -> bf16 -> f32 on the device rounds exactly as the host helpers do. */
static void cast_rounds_like_torch_bit_for_bit(void **state)
{
	(void)state;
	need_gpu();
	seed(11);
	const size_t sizes[] = {1, 7, 8, 1000, 65537};
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		size_t n = sizes[k];
		double *x = rnd(n, 1000.0);
		for (size_t i = 0; i < n; i += 5)
			x[i] *= 1e-30; /* tiny values and denormals in bf16 too */
		float *xf = malloc(n * sizeof *xf);
		uint16_t *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
		assert_non_null(xf);
		assert_non_null(want);
		assert_non_null(got);
		for (size_t i = 0; i < n; i++) {
			xf[i] = (float)x[i];
			want[i] = bf16_from_f32(xf[i]);
		}
		void *dx = dev_from(x, n, GPU_F32);
		void *dy = dev_poisoned(n, GPU_BF16);
		gpu_ok(launch_cast(dy, GPU_BF16, dx, GPU_F32, (int64_t)n, NULL), "cast");
		titan_err e;
		if (gpu_sync(&e) || gpu_download(got, dy, n * 2, &e))
			fail_msg("%s", e.msg);
		for (size_t i = 0; i < n; i++)
			if (got[i] != want[i])
				fail_msg("n=%zu: bf16(%a) = 0x%04x on the device, 0x%04x on the host", n,
					 (double)xf[i], got[i], want[i]);
		/* and back: bf16 -> f32 is exact */
		void *dz = dev_poisoned(n, GPU_F32);
		gpu_ok(launch_cast(dz, GPU_F32, dy, GPU_BF16, (int64_t)n, NULL), "cast back");
		double *z = host_of(dz, n, GPU_F32);
		for (size_t i = 0; i < n; i++)
			assert_true(z[i] == (double)bf16_to_f32(want[i]));
		print_message("  cast n=%zu: bit for bit\n", n);
		free(x), free(xf), free(want), free(got), free(z);
		gpu_free(dx), gpu_free(dy), gpu_free(dz);
	}
}

static void add_axpy_scale_match_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	seed(12);
	const size_t sizes[] = {1, 13, 4096, 100003};
	const int types[][3] = {{GPU_F32, GPU_F32, GPU_F32}, {GPU_BF16, GPU_BF16, GPU_BF16},
				{GPU_F32, GPU_F32, GPU_BF16}, {GPU_BF16, GPU_F32, GPU_BF16}};
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
		for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
			size_t n = sizes[k];
			int ty = types[t][0], ta = types[t][1], tb = types[t][2];
			double tol = ty == GPU_BF16 ? TOL_BF16 : TOL_F32;
			double *a = rnd(n, 3.0), *b = rnd(n, 3.0), *y0 = rnd(n, 1.0);
			void *da = dev_from(a, n, ta), *db = dev_from(b, n, tb);
			void *dy = dev_poisoned(n, ty);
			double *want = malloc(n * sizeof *want);
			assert_non_null(want);
			print_message(" n=%zu y %s a %s b %s\n", n, dt_name(ty), dt_name(ta), dt_name(tb));
			gpu_ok(launch_add(dy, ty, da, ta, db, tb, (int64_t)n, NULL), "add");
			cpu_add_f64(want, a, b, (int64_t)n);
			expect_close("add", dy, want, n, ty, tol);
			void *dy0 = dev_from(y0, n, ty);
			gpu_ok(launch_axpy(dy0, ty, -0.75f, da, ta, (int64_t)n, NULL), "axpy");
			cpu_axpy_f64(y0, -0.75, a, (int64_t)n);
			expect_close("axpy", dy0, y0, n, ty, tol);
			gpu_ok(launch_scale(dy0, ty, 1.5f, (int64_t)n, NULL), "scale");
			double *mid = host_of(dy0, n, ty); /* scale what the device holds */
			gpu_ok(launch_scale(dy0, ty, 1.5f, (int64_t)n, NULL), "scale");
			cpu_scale_f64(mid, 1.5, (int64_t)n);
			expect_close("scale", dy0, mid, n, ty, tol);
			free(a), free(b), free(y0), free(want), free(mid);
			gpu_free(da), gpu_free(db), gpu_free(dy), gpu_free(dy0);
		}
}

/* lerp (Muon's momentum): the CPU kernel's bits, which are torch.lerp's
 * (tests/backend), for a weight of each branch. */
static void lerp_matches_the_cpu_bit_for_bit(void **state)
{
	(void)state;
	need_gpu();
	seed(13);
	const size_t n = 100003;
	const float ws[] = {(float)(1 - 0.95), 0.95f};
	for (size_t k = 0; k < 2; k++) {
		double *x = rnd(n, 1.0), *end = rnd(n, 1.0);
		float *fx = malloc(n * sizeof *fx), *fe = malloc(n * sizeof *fe);
		uint32_t *got = malloc(n * sizeof *got);
		assert_true(fx && fe && got);
		for (size_t i = 0; i < n; i++)
			fx[i] = (float)x[i], fe[i] = (float)end[i], x[i] = fx[i], end[i] = fe[i];
		void *dx = dev_from(x, n, GPU_F32), *de = dev_from(end, n, GPU_F32);
		gpu_ok(launch_lerp(dx, de, ws[k], (int64_t)n, NULL), "lerp");
		cpu_lerp_f32(fx, fe, ws[k], (int64_t)n);
		titan_err e = {{0}};
		if (gpu_sync(&e) || gpu_download(got, dx, n * 4, &e))
			fail_msg("%s", e.msg);
		if (memcmp(got, fx, n * 4) != 0)
			fail_msg("lerp w=%g: the device's bits differ from the CPU's", (double)ws[k]);
		free(x), free(end), free(fx), free(fe), free(got);
		gpu_free(dx), gpu_free(de);
	}
}

/* --- RMSNorm with the residual add --- */

typedef struct norm_case {
	int64_t n, d;
	int tx, tdelta, ty; /* tdelta -1: no delta */
	int tw;             /* the weight's type (and its gradient's) */
	int in_place;       /* res = x (the residual stream updated in place) */
} norm_case;

static const norm_case norm_cases[] = {
	{1, 8, GPU_F32, -1, GPU_F32, GPU_F32, 0},
	{3, 7, GPU_F32, GPU_F32, GPU_F32, GPU_F32, 1},
	{17, 64, GPU_F32, GPU_BF16, GPU_BF16, GPU_F32, 1},
	{64, 4096, GPU_BF16, GPU_BF16, GPU_BF16, GPU_BF16, 1},
	{33, 1000, GPU_BF16, -1, GPU_F32, GPU_F32, 0},
	{5, 12288, GPU_F32, GPU_BF16, GPU_BF16, GPU_F32, 0},
};

static void rmsnorm_forward_with_residual_matches_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	seed(21);
	for (size_t c = 0; c < sizeof norm_cases / sizeof norm_cases[0]; c++) {
		norm_case k = norm_cases[c];
		size_t nd = (size_t)(k.n * k.d);
		const float eps = 1e-5f;
		double *x = rnd(nd, 2.0), *delta = rnd(nd, 1.0), *w = rnd((size_t)k.d, 1.0);
		void *dx = dev_from(x, nd, k.tx);
		void *ddelta = k.tdelta >= 0 ? dev_from(delta, nd, k.tdelta) : NULL;
		void *dw = dev_from(w, (size_t)k.d, k.tw);
		void *dres = k.in_place ? dx : dev_poisoned(nd, k.tx);
		void *dy = dev_poisoned(nd, k.ty);
		float *drstd = dev_poisoned((size_t)k.n, GPU_F32);
		print_message(" n=%lld d=%lld x %s delta %s y %s%s\n", (long long)k.n, (long long)k.d,
			      dt_name(k.tx), k.tdelta >= 0 ? dt_name(k.tdelta) : "none", dt_name(k.ty),
			      k.in_place ? " in place" : "");
		gpu_ok(launch_rmsnorm_fwd(dy, k.ty, drstd, dres, k.tx, dx, k.tx, ddelta,
					  k.tdelta >= 0 ? k.tdelta : k.tx, dw, k.tw, k.n, k.d, eps, NULL),
		       "rmsnorm_fwd");
		/* reference: r = x + delta as the residual stream stores it */
		double *r = f64_copy(x, nd), *y = zeros(nd), *rstd = zeros((size_t)k.n);
		if (k.tdelta >= 0)
			for (size_t i = 0; i < nd; i++)
				r[i] = round_to(x[i] + delta[i], k.tx);
		cpu_rmsnorm_fwd_f64(y, rstd, r, w, k.n, k.d, eps);
		expect_close("residual stored", dres, r, nd, k.tx, k.tx == GPU_BF16 ? TOL_BF16 : TOL_F32);
		expect_close("rmsnorm y", dy, y, nd, k.ty, k.ty == GPU_BF16 ? TOL_BF16 : TOL_F32);
		expect_close("rmsnorm rstd", drstd, rstd, (size_t)k.n, GPU_F32, TOL_F32);
		free(x), free(delta), free(w), free(r), free(y), free(rstd);
		gpu_free(dx), gpu_free(ddelta), gpu_free(dw), gpu_free(dy), gpu_free(drstd);
		if (!k.in_place)
			gpu_free(dres);
	}
}

static void rmsnorm_backward_with_residual_matches_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	seed(22);
	for (size_t c = 0; c < sizeof norm_cases / sizeof norm_cases[0]; c++) {
		norm_case k = norm_cases[c];
		size_t nd = (size_t)(k.n * k.d);
		int tdy = k.ty;                /* dy: the activations' type */
		int tg = k.tx;                 /* dx, dres: the residual stream's */
		int with_dres = k.tdelta >= 0; /* the residual's own gradient arrives */
		double *x = rnd(nd, 2.0), *dy = rnd(nd, 1.0), *dres = rnd(nd, 0.5);
		double *w = rnd((size_t)k.d, 1.0), *dw = rnd((size_t)k.d, 0.1);
		void *dx_in = dev_from(x, nd, k.tx), *ddy = dev_from(dy, nd, tdy);
		void *ddres = with_dres ? dev_from(dres, nd, tg) : NULL;
		void *dw_w = dev_from(w, (size_t)k.d, k.tw);
		void *ddw = dev_from(dw, (size_t)k.d, k.tw);
		/* rstd from the float64 reference, stored as float as the forward keeps it */
		double *yref = zeros(nd), *rstd = zeros((size_t)k.n);
		cpu_rmsnorm_fwd_f64(yref, rstd, x, w, k.n, k.d, 1e-5);
		void *drstd = dev_from(rstd, (size_t)k.n, GPU_F32);
		void *ddx = k.in_place && with_dres ? ddres : dev_poisoned(nd, tg);
		void *scratch = dev_alloc(rmsnorm_bwd_scratch_bytes(k.n, k.d));
		print_message(" n=%lld d=%lld x, dx %s dy %s%s\n", (long long)k.n, (long long)k.d,
			      dt_name(k.tx), dt_name(tdy),
			      with_dres ? (ddx == ddres ? " + dres in place" : " + dres") : "");
		gpu_ok(launch_rmsnorm_bwd(ddx, tg, ddw, k.tw, ddy, tdy, ddres, dx_in, k.tx, dw_w, k.tw,
					  drstd, k.n, k.d, scratch, NULL),
		       "rmsnorm_bwd");
		double *dx = zeros(nd);
		cpu_rmsnorm_bwd_f64(dx, dw, dy, x, w, rstd, k.n, k.d);
		if (with_dres)
			for (size_t i = 0; i < nd; i++)
				dx[i] += dres[i];
		expect_close("rmsnorm dx", ddx, dx, nd, tg, tg == GPU_BF16 ? TOL_BF16 : TOL_F32);
		expect_close("rmsnorm dw (accumulated)", ddw, dw, (size_t)k.d, k.tw,
			     k.tw == GPU_BF16 ? TOL_BF16 : TOL_F32);
		free(x), free(dy), free(dres), free(w), free(dw), free(yref), free(rstd), free(dx);
		gpu_free(dx_in), gpu_free(ddy), gpu_free(dw_w), gpu_free(ddw), gpu_free(drstd);
		gpu_free(scratch);
		if (ddx != ddres)
			gpu_free(ddx);
		gpu_free(ddres);
	}
}

/* The dw sum runs in a fixed order: the same inputs give the same bits. */
static void rmsnorm_backward_repeats_bit_for_bit(void **state)
{
	(void)state;
	need_gpu();
	seed(23);
	const int64_t n = 1000, d = 512;
	size_t nd = (size_t)(n * d);
	double *x = rnd(nd, 1), *dy = rnd(nd, 1), *w = rnd((size_t)d, 1), *rstd = rnd((size_t)n, 1);
	void *dx_in = dev_from(x, nd, GPU_BF16), *ddy = dev_from(dy, nd, GPU_BF16);
	void *dw_w = dev_from(w, (size_t)d, GPU_F32), *drstd = dev_from(rstd, (size_t)n, GPU_F32);
	void *ddx = dev_poisoned(nd, GPU_BF16), *scratch = dev_alloc(rmsnorm_bwd_scratch_bytes(n, d));
	double *first = NULL;
	for (int run = 0; run < 3; run++) {
		void *ddw = dev_alloc((size_t)d * 4);
		titan_err e;
		if (gpu_memset(ddw, 0, (size_t)d * 4, &e))
			fail_msg("%s", e.msg);
		gpu_ok(launch_rmsnorm_bwd(ddx, GPU_BF16, ddw, GPU_F32, ddy, GPU_BF16, NULL, dx_in,
					  GPU_BF16, dw_w, GPU_F32, drstd, n, d, scratch, NULL),
		       "rmsnorm_bwd");
		double *got = host_of(ddw, (size_t)d, GPU_F32);
		if (!first)
			first = got;
		else {
			assert_memory_equal(first, got, (size_t)d * sizeof(double));
			free(got);
		}
		gpu_free(ddw);
	}
	free(first), free(x), free(dy), free(w), free(rstd);
	gpu_free(dx_in), gpu_free(ddy), gpu_free(dw_w), gpu_free(drstd), gpu_free(ddx);
	gpu_free(scratch);
}

/* --- RoPE --- */

/* (cos, sin) table (t, hd/2, 2) of Llama 3's frequencies, rounded to float as the
 * device reads it. */
static double *rope_table(int64_t t, int64_t hd)
{
	double *cs = zeros((size_t)(t * hd));
	cpu_rope_table_f64(cs, t, hd, 3, 500000.0, 0.0);
	round_all(cs, (size_t)(t * hd), GPU_F32);
	return cs;
}

static void rope_ref(double *x, const double *cs, int64_t b, int64_t t, int64_t h, int64_t hd,
		     int inverse, int style)
{
	if (style == GPU_ROPE_HALF)
		cpu_rope_half_f64(x, cs, b, t, h, hd, inverse);
	else
		cpu_rope_f64(x, cs, b, t, h, hd, inverse);
}

typedef struct rope_case {
	int64_t b, t, h, hkv, hd;
} rope_case;

static const rope_case rope_cases[] = {
	{1, 1, 1, 1, 2}, {2, 5, 3, 1, 6}, {2, 17, 4, 2, 64}, {1, 64, 8, 2, 128},
};

static void rope_in_place_both_pairings_match_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	seed(31);
	for (size_t c = 0; c < sizeof rope_cases / sizeof rope_cases[0]; c++)
		for (int style = 0; style < 2; style++)
			for (int dt = 0; dt < 2; dt++)
				for (int inverse = 0; inverse < 2; inverse++) {
					rope_case k = rope_cases[c];
					size_t n = (size_t)(k.b * k.t * k.h * k.hd);
					double *x = rnd(n, 1.0), *cs = rope_table(k.t, k.hd);
					void *dx = dev_from(x, n, dt);
					void *dcs = dev_from(cs, (size_t)(k.t * k.hd), GPU_F32);
					print_message(" b=%lld t=%lld h=%lld hd=%lld %s%s\n",
						      (long long)k.b, (long long)k.t, (long long)k.h,
						      (long long)k.hd,
						      style ? "rotate-half" : "interleaved",
						      inverse ? " inverse" : "");
					gpu_ok(launch_rope(dx, dt, dcs, k.b, k.t, k.h, k.hd, inverse, style,
							   NULL),
					       "rope");
					rope_ref(x, cs, k.b, k.t, k.h, k.hd, inverse, style);
					expect_close("rope", dx, x, n, dt,
						     dt == GPU_BF16 ? TOL_BF16 : TOL_F32);
					free(x), free(cs);
					gpu_free(dx), gpu_free(dcs);
				}
}

/* Split: q, k rotated and v copied out of the packed QKV projection; merge: the
 * gradients rotated back into the packed layout. */
static void rope_qkv_split_and_merge_match_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	seed(32);
	for (size_t c = 0; c < sizeof rope_cases / sizeof rope_cases[0]; c++)
		for (int style = 0; style < 2; style++) {
			rope_case k = rope_cases[c];
			int tin = GPU_BF16, tout = style ? GPU_BF16 : GPU_F32;
			int64_t nh = k.h + 2 * k.hkv, ntok = k.b * k.t;
			size_t n = (size_t)(ntok * nh * k.hd), nq = (size_t)(ntok * k.h * k.hd);
			size_t nk = (size_t)(ntok * k.hkv * k.hd);
			double *qkv = rnd(n, 1.0), *cs = rope_table(k.t, k.hd);
			void *dqkv = dev_from(qkv, n, tin);
			void *dcs = dev_from(cs, (size_t)(k.t * k.hd), GPU_F32);
			void *dq = dev_poisoned(nq, tout), *dk = dev_poisoned(nk, tout);
			void *dv = dev_poisoned(nk, tout);
			print_message(" b=%lld t=%lld h=%lld hkv=%lld hd=%lld %s\n", (long long)k.b,
				      (long long)k.t, (long long)k.h, (long long)k.hkv, (long long)k.hd,
				      style ? "rotate-half" : "interleaved");
			gpu_ok(launch_rope_qkv_split(dq, dk, dv, tout, dqkv, tin, dcs, k.b, k.t, k.h,
						     k.hkv, k.hd, style, NULL),
			       "rope_qkv_split");
			double *q = zeros(nq), *kk = zeros(nk), *v = zeros(nk);
			for (int64_t tok = 0; tok < ntok; tok++) {
				const double *row = qkv + tok * nh * k.hd;
				memcpy(q + tok * k.h * k.hd, row, (size_t)(k.h * k.hd) * sizeof(double));
				memcpy(kk + tok * k.hkv * k.hd, row + k.h * k.hd,
				       (size_t)(k.hkv * k.hd) * sizeof(double));
				memcpy(v + tok * k.hkv * k.hd, row + (k.h + k.hkv) * k.hd,
				       (size_t)(k.hkv * k.hd) * sizeof(double));
			}
			rope_ref(q, cs, k.b, k.t, k.h, k.hd, 0, style);
			rope_ref(kk, cs, k.b, k.t, k.hkv, k.hd, 0, style);
			double tol = tout == GPU_BF16 ? TOL_BF16 : TOL_F32;
			expect_close("split q", dq, q, nq, tout, tol);
			expect_close("split k", dk, kk, nk, tout, tol);
			expect_close("split v", dv, v, nk, tout, tol);
			/* merge gradients back (types swapped: tout in, tin out) */
			double *gq = rnd(nq, 1.0), *gk = rnd(nk, 1.0), *gv = rnd(nk, 1.0);
			void *dgq = dev_from(gq, nq, tout), *dgk = dev_from(gk, nk, tout);
			void *dgv = dev_from(gv, nk, tout), *dgqkv = dev_poisoned(n, tin);
			gpu_ok(launch_rope_qkv_merge(dgqkv, tin, dgq, dgk, dgv, tout, dcs, k.b, k.t, k.h,
						     k.hkv, k.hd, style, NULL),
			       "rope_qkv_merge");
			rope_ref(gq, cs, k.b, k.t, k.h, k.hd, 1, style);
			rope_ref(gk, cs, k.b, k.t, k.hkv, k.hd, 1, style);
			double *want = zeros(n);
			for (int64_t tok = 0; tok < ntok; tok++) {
				double *row = want + tok * nh * k.hd;
				memcpy(row, gq + tok * k.h * k.hd, (size_t)(k.h * k.hd) * sizeof(double));
				memcpy(row + k.h * k.hd, gk + tok * k.hkv * k.hd,
				       (size_t)(k.hkv * k.hd) * sizeof(double));
				memcpy(row + (k.h + k.hkv) * k.hd, gv + tok * k.hkv * k.hd,
				       (size_t)(k.hkv * k.hd) * sizeof(double));
			}
			expect_close("merge dqkv", dgqkv, want, n, tin, TOL_BF16);
			free(qkv), free(cs), free(q), free(kk), free(v), free(gq), free(gk), free(gv);
			free(want);
			gpu_free(dqkv), gpu_free(dcs), gpu_free(dq), gpu_free(dk), gpu_free(dv);
			gpu_free(dgq), gpu_free(dgk), gpu_free(dgv), gpu_free(dgqkv);
		}
}

/* --- SwiGLU --- */

static void swiglu_forward_and_backward_match_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	seed(41);
	const size_t sizes[] = {1, 9, 4099, 14336 * 3};
	for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++)
		for (int dt = 0; dt < 2; dt++) {
			size_t n = sizes[c];
			double tol = dt == GPU_BF16 ? TOL_BF16 : TOL_F32;
			double *a = rnd(n, 6.0), *g = rnd(n, 2.0), *dy = rnd(n, 1.0);
			void *da = dev_from(a, n, dt), *dg = dev_from(g, n, dt);
			void *ddy = dev_from(dy, n, dt), *dyo = dev_poisoned(n, dt);
			void *dda = dev_poisoned(n, dt), *ddg = dev_poisoned(n, dt);
			print_message(" n=%zu\n", n);
			gpu_ok(launch_swiglu_fwd(dyo, dt, da, dg, dt, (int64_t)n, NULL), "swiglu_fwd");
			gpu_ok(launch_swiglu_bwd(dda, ddg, dt, ddy, dt, da, dg, dt, (int64_t)n, NULL),
			       "swiglu_bwd");
			double *y = zeros(n), *ga = zeros(n), *gg = zeros(n);
			cpu_swiglu_fwd_f64(y, a, g, (int64_t)n);
			cpu_swiglu_bwd_f64(ga, gg, dy, a, g, (int64_t)n);
			expect_close("swiglu y", dyo, y, n, dt, tol);
			expect_close("swiglu da", dda, ga, n, dt, tol);
			expect_close("swiglu dg", ddg, gg, n, dt, tol);
			free(a), free(g), free(dy), free(y), free(ga), free(gg);
			gpu_free(da), gpu_free(dg), gpu_free(ddy), gpu_free(dyo), gpu_free(dda);
			gpu_free(ddg);
		}
}

/* --- embedding --- */

/* ids with many repeats (a few frequent tokens), all in [0, vocab). */
static int32_t *random_ids(size_t n, int64_t vocab)
{
	int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
	assert_non_null(ids);
	for (size_t i = 0; i < n; i++) {
		double u = (urand() + 1) / 2;
		ids[i] = (int32_t)(u * u * u * (double)vocab); /* skewed to small ids */
		if (ids[i] >= vocab)
			ids[i] = (int32_t)(vocab - 1);
	}
	return ids;
}

static void embedding_forward_and_backward_match_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	seed(51);
	/* v0, nv: the rows this rank holds (vocabulary-parallel); ids outside them
	 * give zero rows and no gradient */
	const struct {
		int64_t n, d, vocab, v0, nv;
	} cases[] = {{1, 8, 5, 0, 5},
		     {37, 7, 11, 0, 11},
		     {300, 256, 50, 10, 25},
		     {4096, 1024, 32000, 0, 32000}};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
		for (int dt = 0; dt < 2; dt++) {
			int64_t n = cases[c].n, d = cases[c].d, vocab = cases[c].vocab;
			int64_t v0 = cases[c].v0, nv = cases[c].nv;
			if (nv * d > 1 << 24 && device_only("a 32000 x 1024 table: 2 GB of float64 references"))
				break;
			size_t nd = (size_t)(n * d), vd = (size_t)(nv * d);
			int32_t *ids = random_ids((size_t)n, vocab);
			double *table = rnd(vd, 1.0), *dout = rnd(nd, 1.0), *dtab = rnd(vd, 0.1);
			void *dids = dev_alloc((size_t)n * 4);
			titan_err e;
			if (gpu_upload(dids, ids, (size_t)n * 4, &e))
				fail_msg("%s", e.msg);
			void *dtable = dev_from(table, vd, dt), *dy = dev_poisoned(nd, dt);
			print_message(" n=%lld d=%lld vocab=%lld rows %lld..%lld\n", (long long)n,
				      (long long)d, (long long)vocab, (long long)v0, (long long)(v0 + nv));
			gpu_ok(launch_embedding_fwd(dy, dt, dtable, dt, dids, n, d, v0, nv, NULL),
			       "embedding_fwd");
			double *y = zeros(nd);
			cpu_embedding_fwd_f64(y, table, ids, n, d, v0, nv);
			expect_close("embedding out (a copy: exact)", dy, y, nd, dt, 0.0);
			void *ddout = dev_from(dout, nd, dt), *ddtab = dev_from(dtab, vd, GPU_F32);
			size_t sb = 0;
			gpu_ok(embedding_bwd_scratch_bytes(n, nv, &sb), "embedding scratch size");
			void *scratch = dev_alloc(sb);
			gpu_ok(launch_embedding_bwd(ddtab, GPU_F32, ddout, dt, dids, n, d, v0, nv, scratch,
						    sb, NULL),
			       "embedding_bwd");
			/* the float32 CPU op adds in the same order: the same bits */
			float *tab32 = malloc(vd * sizeof *tab32), *dout32 = malloc(nd * sizeof *dout32);
			assert_non_null(tab32);
			assert_non_null(dout32);
			for (size_t i = 0; i < vd; i++)
				tab32[i] = (float)dtab[i];
			for (size_t i = 0; i < nd; i++)
				dout32[i] = (float)dout[i];
			cpu_embedding_bwd_f32(tab32, dout32, ids, n, d, v0, nv);
			double *got = host_of(ddtab, vd, GPU_F32);
			for (size_t i = 0; i < vd; i++)
				if (got[i] != (double)tab32[i])
					fail_msg("dtable[%zu] = %a, the CPU's float32 op gives %a", i, got[i],
						 (double)tab32[i]);
			print_message("  embedding dtable: bit for bit with the CPU's float32 op\n");
			cpu_embedding_bwd_f64(dtab, dout, ids, n, d, v0, nv);
			expect_close("embedding dtable vs float64", ddtab, dtab, vd, GPU_F32, TOL_F32);
			/* a bf16 table's gradient: summed in float32, rounded once */
			double *dtab16 = rnd(vd, 0.1), *want16 = NULL;
			void *ddtab16 = dev_from(dtab16, vd, GPU_BF16);
			want16 = f64_copy(dtab16, vd);
			cpu_embedding_bwd_f64(want16, dout, ids, n, d, v0, nv);
			gpu_ok(launch_embedding_bwd(ddtab16, GPU_BF16, ddout, dt, dids, n, d, v0, nv,
						    scratch, sb, NULL),
			       "embedding_bwd bf16");
			expect_close("embedding dtable (bf16)", ddtab16, want16, vd, GPU_BF16, TOL_BF16);
			free(dtab16), free(want16);
			gpu_free(ddtab16);
			free(ids), free(table), free(dout), free(dtab), free(y), free(tab32), free(dout32);
			free(got);
			gpu_free(dids), gpu_free(dtable), gpu_free(dy), gpu_free(ddout), gpu_free(ddtab);
			gpu_free(scratch);
		}
}

/* --- cross-entropy --- */

static void cross_entropy_loss_and_gradient_match_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	seed(61);
	const struct {
		int64_t n, v;
	} cases[] = {{3, 10}, {5, 1001}, {4, 128256}};
	const int32_t ignore = -100;
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
		for (int dt = 0; dt < 2; dt++)
			for (int train = 0; train < 2; train++) {
				int64_t n = cases[c].n, v = cases[c].v;
				size_t nv = (size_t)(n * v);
				double *logits = rnd(nv, 8.0);
				int32_t *labels = random_ids((size_t)n, v);
				labels[n / 2] = ignore; /* one ignored row */
				float scale = train ? 0.25f : 0.0f;
				void *dl = dev_from(logits, nv, dt), *dlab = dev_alloc((size_t)n * 4);
				float *drow = dev_poisoned((size_t)n, GPU_F32);
				titan_err e;
				if (gpu_upload(dlab, labels, (size_t)n * 4, &e))
					fail_msg("%s", e.msg);
				print_message(" n=%lld v=%lld %s\n", (long long)n, (long long)v,
					      train ? "loss and gradient" : "loss only");
				gpu_ok(launch_cross_entropy(dl, dt, dlab, n, v, ignore, scale, NULL, drow,
							    NULL),
				       "cross_entropy");
				double *rows = zeros((size_t)n), *grad = f64_copy(logits, nv);
				double total = 0;
				int64_t valid = 0;
				for (int64_t i = 0; i < n; i++) {
					double before = 0;
					int64_t vb = 0;
					cpu_cross_entropy_f64(grad + i * v, labels + i, 1, v, ignore, scale,
							      &before, &vb);
					rows[i] = before;
					total += before;
					valid += vb;
				}
				expect_close("row losses", drow, rows, (size_t)n, GPU_F32, TOL_F32);
				if (train)
					expect_close("logits -> gradient", dl, grad, nv, dt,
						     dt == GPU_BF16 ? TOL_BF16 : TOL_F32);
				double *dsum = dev_alloc(sizeof(double));
				int64_t *dvalid = dev_alloc(sizeof(int64_t));
				double start = 1.5;
				int64_t start_n = 7;
				if (gpu_upload(dsum, &start, sizeof start, &e) ||
				    gpu_upload(dvalid, &start_n, sizeof start_n, &e))
					fail_msg("%s", e.msg);
				gpu_ok(launch_loss_sum(dsum, dvalid, drow, dlab, n, ignore, NULL),
				       "loss_sum");
				double got_sum;
				int64_t got_n;
				if (gpu_sync(&e) || gpu_download(&got_sum, dsum, sizeof got_sum, &e) ||
				    gpu_download(&got_n, dvalid, sizeof got_n, &e))
					fail_msg("%s", e.msg);
				assert_int_equal(got_n, start_n + valid);
				double err = fabs(got_sum - (start + total)) / fabs(start + total);
				print_message("  loss sum %.6f want %.6f rel err %.2e\n", got_sum,
					      start + total, err);
				assert_true(err < TOL_F32);
				free(logits), free(labels), free(rows), free(grad);
				gpu_free(dl), gpu_free(dlab), gpu_free(drow), gpu_free(dsum);
				gpu_free(dvalid);
			}
}

/* --- AdamW and the gradient norm over many tensors --- */

/* The multi-tensor kernels on tensors of type dt (float32 masters, or bf16
 * under training.dtype = "bfloat16") against the float64 reference. */
static void adamw_multi_case(int dt)
{
	const int64_t sizes[] = {1, 7, 65536, 65537, 300000};
	enum { NT = sizeof sizes / sizeof sizes[0] };
	double *p[NT], *g[NT], *m[NT], *v[NT];
	gpu_mt_tensor t[NT];
	double sumsq = 0, tol = dt == GPU_BF16 ? TOL_BF16 : TOL_F32;
	print_message(" %s tensors\n", dt_name(dt));
	for (int i = 0; i < NT; i++) {
		size_t n = (size_t)sizes[i];
		p[i] = rnd(n, 1.0), g[i] = rnd(n, 0.01), m[i] = rnd(n, 0.001), v[i] = rnd(n, 1e-6);
		for (size_t j = 0; j < n; j++)
			v[i][j] = fabs(v[i][j]);
		t[i] = (gpu_mt_tensor){.p = dev_from(p[i], n, dt),
				       .g = dev_from(g[i], n, dt),
				       .m = dev_from(m[i], n, dt),
				       .v = dev_from(v[i], n, dt),
				       .p_bf16 = i % 2 && dt == GPU_F32 ? dev_poisoned(n, GPU_BF16)
									: NULL,
				       .n = sizes[i],
				       .wd = i == 1 ? 0.0f : 0.1f};
		sumsq += cpu_sumsq_f64(g[i], (int64_t)n);
	}
	int64_t nch = gpu_mt_chunks(t, NT, NULL);
	gpu_mt_chunk *ch = malloc((size_t)nch * sizeof *ch);
	assert_non_null(ch);
	assert_int_equal(gpu_mt_chunks(t, NT, ch), nch);
	void *dt_tab = dev_alloc(sizeof t), *dch = dev_alloc((size_t)nch * sizeof *ch);
	double *dpart = dev_alloc((size_t)nch * sizeof(double)), *dsumsq = dev_alloc(sizeof(double));
	float *dnorm = dev_alloc(sizeof(float));
	const float max_norm = 0.5f;
	gpu_adamw_step st = {.lr = 3e-4, .b1 = 0.9, .b2 = 0.95, .eps = 1e-8,
			     .bc1 = 1 - 0.9 * 0.9 * 0.9, .bc2 = 1 - 0.95 * 0.95 * 0.95};
	gpu_adamw_step *dst = dev_alloc(sizeof st);
	titan_err e;
	if (gpu_upload(dt_tab, t, sizeof t, &e) ||
	    gpu_upload(dch, ch, (size_t)nch * sizeof *ch, &e) || gpu_upload(dst, &st, sizeof st, &e))
		fail_msg("%s", e.msg);
	gpu_ok(launch_sumsq_multi(dsumsq, dpart, dt_tab, dch, nch, dt, NULL), "sumsq_multi");
	gpu_ok(launch_clip_factor(dst, dnorm, dsumsq, max_norm, NULL), "clip_factor");
	gpu_ok(launch_adamw_multi(dt_tab, dch, nch, dst, dt, NULL), "adamw_multi");
	double got_sumsq;
	float got_norm;
	if (gpu_sync(&e) || gpu_download(&got_sumsq, dsumsq, sizeof got_sumsq, &e) ||
	    gpu_download(&got_norm, dnorm, sizeof got_norm, &e))
		fail_msg("%s", e.msg);
	print_message("  sumsq %.12g want %.12g; norm %.6g\n", got_sumsq, sumsq, (double)got_norm);
	assert_true(fabs(got_sumsq - sumsq) <= 1e-12 * sumsq);
	assert_true(fabs((double)got_norm - sqrt(sumsq)) <= 1e-6 * sqrt(sumsq));
	double clip = fmin(1.0, max_norm / (sqrt(sumsq) + 1e-6));
	for (int i = 0; i < NT; i++) {
		size_t n = (size_t)sizes[i];
		for (size_t j = 0; j < n; j++)
			g[i][j] *= clip;
		cpu_adamw_consts k = cpu_adamw_consts_of(st.lr, st.b1, st.b2, st.eps, t[i].wd,
							 st.bc1, st.bc2);
		cpu_adamw_f64(p[i], g[i], m[i], v[i], (int64_t)n, &k);
		print_message(" tensor %d (n=%zu, wd %.1f)\n", i, n, (double)t[i].wd);
		expect_close("adamw p", t[i].p, p[i], n, dt, tol);
		expect_close("adamw m", t[i].m, m[i], n, dt, tol);
		expect_close("adamw v", t[i].v, v[i], n, dt, tol);
		if (t[i].p_bf16)
			expect_close("adamw bf16 copy of p", t[i].p_bf16, p[i], n, GPU_BF16, TOL_BF16);
		free(p[i]), free(g[i]), free(m[i]), free(v[i]);
		gpu_free(t[i].p), gpu_free((void *)t[i].g), gpu_free(t[i].m), gpu_free(t[i].v);
		gpu_free(t[i].p_bf16);
	}
	free(ch);
	gpu_free(dt_tab), gpu_free(dch), gpu_free(dpart), gpu_free(dsumsq), gpu_free(dnorm);
	gpu_free(dst);
}

/* fused_opt_states_bf16's update (float32 p and g, bf16 m and v): the CPU
 * kernel's bits, which are torch's FusedAdamMathFunctorMP's as
 * scripts/tt030_golden.py transcribes it (tests/train/tt030_optim.sh). */
static void adamw_bf16_states_match_the_cpu_bit_for_bit(void **state)
{
	(void)state;
	need_gpu();
	seed(14);
	const size_t n = 10007;
	double *p = rnd(n, 1.0), *g = rnd(n, 1e-3), *m = rnd(n, 1e-3), *v = rnd(n, 1e-6);
	for (size_t i = 0; i < n; i++)
		v[i] = fabs(v[i]);
	float *fp = malloc(n * 4), *fg = malloc(n * 4), *got = malloc(n * 4);
	uint16_t *bm = malloc(n * 2), *bv = malloc(n * 2), *gm = malloc(n * 2), *gv = malloc(n * 2);
	assert_true(fp && fg && got && bm && bv && gm && gv);
	for (size_t i = 0; i < n; i++) {
		fp[i] = (float)p[i], fg[i] = (float)g[i], p[i] = fp[i], g[i] = fg[i];
		bm[i] = bf16_from_f32((float)m[i]), bv[i] = bf16_from_f32((float)v[i]);
		m[i] = bf16_to_f32(bm[i]), v[i] = bf16_to_f32(bv[i]);
	}
	void *dp = dev_from(p, n, GPU_F32), *dg = dev_from(g, n, GPU_F32);
	void *dm = dev_from(m, n, GPU_BF16), *dv = dev_from(v, n, GPU_BF16);
	double bc1 = 1 - pow(0.9, 3), bc2 = 1 - pow(0.95, 3);
	gpu_ok(launch_adamw_bf16_states(dp, dg, dm, dv, (int64_t)n, 8e-4, 0.9, 0.95, 1e-8, 0.1, bc1,
					bc2, NULL), "adamw_bf16_states");
	const float k[7] = {8e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, (float)bc1, (float)sqrt(bc2)};
	cpu_bf16_adamw_states(fp, fg, bm, bv, (int64_t)n, k);
	titan_err e = {{0}};
	if (gpu_sync(&e) || gpu_download(got, dp, n * 4, &e) || gpu_download(gm, dm, n * 2, &e) ||
	    gpu_download(gv, dv, n * 2, &e))
		fail_msg("%s", e.msg);
	if (memcmp(got, fp, n * 4) || memcmp(gm, bm, n * 2) || memcmp(gv, bv, n * 2))
		fail_msg("adamw_bf16_states: the device's bits differ from the CPU's");
	free(p), free(g), free(m), free(v), free(fp), free(fg), free(got);
	free(bm), free(bv), free(gm), free(gv);
	gpu_free(dp), gpu_free(dg), gpu_free(dm), gpu_free(dv);
}

static void adamw_and_grad_norm_over_many_tensors_match_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	seed(71);
	adamw_multi_case(GPU_F32);
	adamw_multi_case(GPU_BF16);
	/* one tensor alone, bf16 too */
	double *x = rnd(200003, 3.0), got_sumsq;
	void *dx = dev_from(x, 200003, GPU_BF16);
	double *dp1 = dev_alloc((size_t)sumsq_partials(200003) * sizeof(double));
	double *dsumsq = dev_alloc(sizeof(double));
	titan_err e;
	gpu_ok(launch_sumsq(dsumsq, dp1, dx, GPU_BF16, 200003, NULL), "sumsq");
	if (gpu_sync(&e) || gpu_download(&got_sumsq, dsumsq, sizeof got_sumsq, &e))
		fail_msg("%s", e.msg);
	double want = cpu_sumsq_f64(x, 200003);
	print_message("  sumsq (bf16) %.12g want %.12g\n", got_sumsq, want);
	assert_true(fabs(got_sumsq - want) <= 1e-12 * want);
	free(x);
	gpu_free(dx), gpu_free(dp1), gpu_free(dsumsq);
}

/* --- Flux's encoders and autoencoder (t5_attention.cu, activations.cu,
 * layernorm.cu, image.cu) and the biases (bias.cu) --- */

/* T5's attention against the CPU's float64 kernel: for bf16 the float64
 * kernel with the bf16 model's roundings of the scores and probabilities
 * (round set), so that what is measured is the device's float32 arithmetic
 * and the roundings it moves (TOL_BF16_CHAIN: a score rounded the other way
 * moves its probability by 2^-8 |s|). */
static void t5_attention_matches_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	seed(81);
	const int64_t cases[][4] = {{1, 1, 1, 1}, {2, 9, 4, 8}, {1, 77, 3, 64}, {2, 40, 2, 40}};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
		for (int dt = 0; dt < 2; dt++) {
			int64_t b = cases[c][0], l = cases[c][1], h = cases[c][2], dk = cases[c][3];
			size_t n = (size_t)(b * l * h * dk), nb = (size_t)(h * l * l);
			double *q = rnd(n, 0.6), *k = rnd(n, 0.6), *v = rnd(n, 2.0), *bias = rnd(nb, 3.0);
			void *dq = dev_from(q, n, dt), *dk_ = dev_from(k, n, dt), *dv = dev_from(v, n, dt);
			void *dbias = dev_from(bias, nb, dt), *dout = dev_poisoned(n, dt);
			print_message(" b=%lld l=%lld h=%lld dk=%lld\n", (long long)b, (long long)l,
				      (long long)h, (long long)dk);
			gpu_ok(launch_t5_attention(dout, dq, dk_, dv, dbias, dt, b, l, h, dk, NULL),
			       "t5_attention");
			double *want = zeros(n);
			cpu_t5_attention_f64(want, q, k, v, bias, b, l, h, dk, dt == GPU_BF16);
			expect_close("t5_attention out", dout, want, n, dt,
				     dt == GPU_BF16 ? TOL_BF16_CHAIN : TOL_F32);
			free(q), free(k), free(v), free(bias), free(want);
			gpu_free(dq), gpu_free(dk_), gpu_free(dv), gpu_free(dbias), gpu_free(dout);
		}
}

/* gelu_new's gate (for bf16 the float64 kernel rounds the gelu first, as the
 * device does) and swish with silu's and quick_gelu's beta; odd sizes and an
 * offset pointer take map2's element-wise path. */
static void geglu_and_swish_match_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	seed(82);
	const size_t sizes[] = {1, 9, 4099, 100003};
	for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++)
		for (int dt = 0; dt < 2; dt++) {
			size_t n = sizes[c], off = c == 2; /* one case starts past 16-byte alignment */
			double tol = dt == GPU_BF16 ? TOL_BF16 : TOL_F32;
			double *a = rnd(n + off, 5.0), *g = rnd(n + off, 2.0), *x = rnd(n + off, 8.0);
			void *da = dev_from(a, n + off, dt), *dg = dev_from(g, n + off, dt);
			void *dx = dev_from(x, n + off, dt), *dy = dev_poisoned(n + off, dt);
			size_t es = gpu_dtype_size(dt);
			print_message(" n=%zu%s\n", n, off ? " (offset)" : "");
			gpu_ok(launch_geglu_fwd((char *)dy + off * es, (char *)da + off * es,
						(char *)dg + off * es, dt, (int64_t)n, NULL),
			       "geglu_fwd");
			double *y = zeros(n);
			cpu_geglu_fwd_f64(y, a + off, g + off, (int64_t)n, dt == GPU_BF16);
			expect_close("geglu y", (char *)dy + off * es, y, n, dt, tol);
			const float betas[] = {1.0f, 1.702f};
			for (int bi = 0; bi < 2; bi++) {
				gpu_ok(launch_swish((char *)dx + off * es, dt, betas[bi], (int64_t)n, NULL),
				       "swish");
				cpu_swish_f64(x + off, betas[bi], (int64_t)n, dt == GPU_BF16);
				expect_close(bi ? "swish beta 1.702" : "swish beta 1", (char *)dx + off * es,
					     x + off, n, dt, tol);
				round_all(x + off, n, dt); /* what the device holds now */
			}
			free(a), free(g), free(x), free(y);
			gpu_free(da), gpu_free(dg), gpu_free(dx), gpu_free(dy);
		}
}

typedef struct gn_case {
	int64_t n, c, hw, groups; /* groups 0: a layer norm over rows of c */
	int ty, tx, tw;
} gn_case;

static void layer_and_group_norms_match_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	seed(83);
	const gn_case cases[] = {
		{2, 64, 9, 32, GPU_F32, GPU_F32, GPU_F32},
		{1, 128, 1024, 32, GPU_BF16, GPU_BF16, GPU_BF16},
		{3, 4, 7, 4, GPU_F32, GPU_BF16, GPU_F32},
		{1, 6, 1000, 1, GPU_BF16, GPU_F32, GPU_BF16},
		{77, 768, 1, 0, GPU_F32, GPU_F32, GPU_F32},
		{5, 32, 1, 0, GPU_BF16, GPU_BF16, GPU_BF16},
		{9, 100, 1, 0, GPU_F32, GPU_BF16, GPU_BF16},
	};
	const float eps = 1e-6f;
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		gn_case k = cases[c];
		size_t nx = (size_t)(k.n * k.c * k.hw);
		double *x = rnd(nx, 3.0), *w = rnd((size_t)k.c, 1.5), *b = rnd((size_t)k.c, 0.5);
		for (size_t i = 0; i < nx; i++)
			x[i] += 2.0; /* an offset: the variance about the mean */
		void *dx = dev_from(x, nx, k.tx), *dw = dev_from(w, (size_t)k.c, k.tw);
		void *db = dev_from(b, (size_t)k.c, k.tw), *dy = dev_poisoned(nx, k.ty);
		double *y = zeros(nx);
		print_message(" %s n=%lld c=%lld hw=%lld groups=%lld y %s x %s w %s\n",
			      k.groups ? "groupnorm" : "layernorm", (long long)k.n, (long long)k.c,
			      (long long)k.hw, (long long)k.groups, dt_name(k.ty), dt_name(k.tx),
			      dt_name(k.tw));
		if (k.groups) {
			gpu_ok(launch_groupnorm_fwd(dy, k.ty, dx, k.tx, dw, db, k.tw, k.n, k.c, k.hw,
						    k.groups, eps, NULL),
			       "groupnorm_fwd");
			cpu_groupnorm_fwd_f64(y, x, w, b, k.n, k.c, k.hw, k.groups, eps);
		} else {
			gpu_ok(launch_layernorm_fwd(dy, k.ty, dx, k.tx, dw, db, k.tw, k.n, k.c, eps,
						    NULL),
			       "layernorm_fwd");
			cpu_layernorm_fwd_f64(y, x, w, b, k.n, k.c, eps);
		}
		expect_close(k.groups ? "groupnorm y" : "layernorm y", dy, y, nx, k.ty,
			     k.ty == GPU_BF16 ? TOL_BF16 : TOL_F32);
		free(x), free(w), free(b), free(y);
		gpu_free(dx), gpu_free(dw), gpu_free(db), gpu_free(dy);
	}
}

typedef struct im2col_case {
	int64_t n, c, h, w, k, stride, pad[4];
} im2col_case;

/* Copies: the CPU's values exactly. */
static void upsample_and_im2col_match_the_cpu_exactly(void **state)
{
	(void)state;
	need_gpu();
	seed(84);
	const int64_t ups[][4] = {{1, 1, 1, 1}, {2, 3, 5, 7}, {1, 8, 32, 40}};
	const im2col_case cols[] = {
		{2, 3, 8, 8, 3, 1, {1, 1, 1, 1}},
		{1, 4, 9, 6, 3, 2, {0, 1, 0, 1}},
		{2, 5, 4, 3, 1, 1, {0, 0, 0, 0}},
		{1, 2, 5, 7, 2, 3, {2, 0, 1, 3}},
	};
	for (int dt = 0; dt < 2; dt++) {
		for (size_t c = 0; c < sizeof ups / sizeof ups[0]; c++) {
			int64_t n = ups[c][0], ch = ups[c][1], h = ups[c][2], w = ups[c][3];
			size_t nx = (size_t)(n * ch * h * w);
			double *x = rnd(nx, 1.0), *y = zeros(4 * nx);
			void *dx = dev_from(x, nx, dt), *dy = dev_poisoned(4 * nx, dt);
			print_message(" upsample n=%lld c=%lld h=%lld w=%lld\n", (long long)n,
				      (long long)ch, (long long)h, (long long)w);
			gpu_ok(launch_upsample2x(dy, dx, dt, n, ch, h, w, NULL), "upsample2x");
			cpu_upsample2x_f64(y, x, n, ch, h, w);
			expect_close("upsample2x", dy, y, 4 * nx, dt, 0);
			free(x), free(y);
			gpu_free(dx), gpu_free(dy);
		}
		for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++) {
			const im2col_case *q = &cols[c];
			int64_t ho = (q->h + q->pad[2] + q->pad[3] - q->k) / q->stride + 1;
			int64_t wo = (q->w + q->pad[0] + q->pad[1] - q->k) / q->stride + 1;
			size_t nx = (size_t)(q->n * q->c * q->h * q->w);
			size_t ncol = (size_t)(q->n * q->c * q->k * q->k * ho * wo);
			double *x = rnd(nx, 1.0), *want = zeros(ncol);
			void *dx = dev_from(x, nx, dt), *dc = dev_poisoned(ncol, dt);
			print_message(" im2col n=%lld c=%lld %lldx%lld k=%lld stride %lld\n",
				      (long long)q->n, (long long)q->c, (long long)q->h, (long long)q->w,
				      (long long)q->k, (long long)q->stride);
			gpu_ok(launch_im2col(dc, dx, dt, q->n, q->c, q->h, q->w, q->k, q->stride,
					     q->pad[0], q->pad[1], q->pad[2], q->pad[3], 0, ho * wo, NULL),
			       "im2col");
			cpu_im2col_f64(want, x, q->n, q->c, q->h, q->w, q->k, q->stride, q->pad, 0,
				       ho * wo);
			expect_close("im2col cols", dc, want, ncol, dt, 0);
			/* output pixels 3 .. 7 alone, as a caller in chunks takes them */
			int64_t np = ho * wo - 3 < 5 ? ho * wo - 3 : 5;
			size_t npart = (size_t)(q->n * q->c * q->k * q->k * np);
			gpu_ok(launch_im2col(dc, dx, dt, q->n, q->c, q->h, q->w, q->k, q->stride,
					     q->pad[0], q->pad[1], q->pad[2], q->pad[3], 3, np, NULL),
			       "im2col");
			cpu_im2col_f64(want, x, q->n, q->c, q->h, q->w, q->k, q->stride, q->pad, 3, np);
			expect_close("im2col cols of pixels 3..", dc, want, npart, dt, 0);
			free(x), free(want);
			gpu_free(dx), gpu_free(dc);
		}
	}
}

/* y += bias for every row, and per group of rows (offs) with the rows past
 * the groups left alone; the bias rounded to y's type first. */
/* Element i of a host array of gpu_dtype dt. */
static void put_host(void *p, int dt, size_t i, double v)
{
	if (dt == GPU_BF16)
		((uint16_t *)p)[i] = bf16_from_f32((float)v);
	else
		((float *)p)[i] = (float)v;
}

static double get_host(const void *p, int dt, size_t i)
{
	return dt == GPU_BF16 ? bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* bias_grad: the CPU's column sums (float64 for float32; the CPU's bf16
 * kernel, which sums in double as the device does, for bf16 either side). */
static void bias_grad_case(int tb, int ty, int64_t rows, int64_t d, int64_t groups,
			   const int32_t *offs, const int32_t *doffs)
{
	size_t ny = (size_t)(rows * d), nb = (size_t)(groups * d);
	double *dyv = rnd(ny, 1.0), *db = rnd(nb, 1.0);
	void *ddy = dev_from(dyv, ny, ty), *ddb = dev_from(db, nb, tb);
	gpu_ok(launch_bias_grad(ddb, tb, ddy, ty, rows, d, groups, doffs, NULL), "bias_grad");
	if (tb == GPU_F32 && ty == GPU_F32) {
		cpu_bias_grad_f64(db, dyv, rows, d, groups, offs);
	} else {
		size_t eb = gpu_dtype_size(tb), ey = gpu_dtype_size(ty);
		unsigned char *hb = malloc(nb * eb), *hy = malloc(ny * ey);
		assert_true(hb && hy);
		for (size_t i = 0; i < nb; i++)
			put_host(hb, tb, i, db[i]);
		for (size_t i = 0; i < ny; i++)
			put_host(hy, ty, i, dyv[i]);
		cpu_bf16_bias_grad(hb, (be_dtype)tb, hy, (be_dtype)ty, rows, d, groups, offs);
		for (size_t i = 0; i < nb; i++)
			db[i] = get_host(hb, tb, i);
		free(hb), free(hy);
	}
	expect_close("bias_grad dbias", ddb, db, nb, tb, tb == GPU_BF16 ? TOL_BF16 : TOL_F32);
	free(dyv), free(db);
	gpu_free(ddy), gpu_free(ddb);
}

static void bias_add_and_grad_match_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	seed(85);
	const int32_t offs[] = {2, 5, 5, 11}; /* rows 0-1 and 11- are no group's */
	const int types[][2] = {{GPU_F32, GPU_F32}, {GPU_BF16, GPU_BF16}, {GPU_BF16, GPU_F32},
				{GPU_F32, GPU_BF16}};
	for (int grouped = 0; grouped < 2; grouped++)
		for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
			int ty = types[t][0], tb = types[t][1];
			int64_t rows = 13, d = 37, groups = grouped ? 3 : 1;
			size_t ny = (size_t)(rows * d), nbias = (size_t)(groups * d);
			double *y = rnd(ny, 2.0), *bias = rnd(nbias, 1.0);
			void *dy = dev_from(y, ny, ty), *dbias = dev_from(bias, nbias, tb);
			int32_t *doffs = NULL;
			if (grouped) {
				titan_err e;
				doffs = dev_alloc(sizeof offs);
				if (gpu_upload(doffs, offs, sizeof offs, &e))
					fail_msg("%s", e.msg);
			}
			print_message(" rows %lld d %lld%s y %s bias %s\n", (long long)rows, (long long)d,
				      grouped ? " in 3 groups" : "", dt_name(ty), dt_name(tb));
			gpu_ok(launch_bias_add(dy, ty, dbias, tb, rows, d, groups, doffs, NULL),
			       "bias_add");
			round_all(bias, nbias, ty);
			cpu_bias_add_f64(y, bias, rows, d, groups, grouped ? offs : NULL);
			expect_close("bias_add y", dy, y, ny, ty, ty == GPU_BF16 ? TOL_BF16 : TOL_F32);
			bias_grad_case(tb, ty, rows, d, groups, grouped ? offs : NULL, doffs);
			free(y), free(bias);
			gpu_free(dy), gpu_free(dbias), gpu_free(doffs);
		}
}

/* conv_bias: each channel's bias on every pixel, the CPU's values exactly. */
static void conv_bias_matches_the_cpu_exactly(void **state)
{
	(void)state;
	need_gpu();
	seed(86);
	const int64_t shapes[][3] = {{1, 1, 1}, {2, 5, 7}, {1, 16, 300}};
	for (int dt = 0; dt < 2; dt++)
		for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
			int64_t n = shapes[c][0], ch = shapes[c][1], hw = shapes[c][2];
			size_t ny = (size_t)(n * ch * hw);
			double *b = rnd((size_t)ch, 3.0), *y = zeros(ny);
			void *db = dev_from(b, (size_t)ch, dt), *dy = dev_poisoned(ny, dt);
			print_message(" conv_bias n=%lld c=%lld hw=%lld %s\n", (long long)n,
				      (long long)ch, (long long)hw, dt_name(dt));
			gpu_ok(launch_conv_bias(dy, db, dt, n, ch, hw, NULL), "conv_bias");
			cpu_conv_bias_f64(y, b, n, ch, hw);
			expect_close("conv_bias y", dy, y, ny, dt, 0);
			free(b), free(y);
			gpu_free(db), gpu_free(dy);
		}
}

/* The autoencoder's attention pieces against the CPU's float64 kernels (the
 * bf16 exps with the float64 kernel's bf16 rounding of them): rows longer
 * than a block's threads, and one of one score. */
static void softmax_exp_and_div_rows_match_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	seed(87);
	const int64_t shapes[][3] = {{1, 1, 3}, {5, 300, 40}, {3, 1000, 8}}; /* rows, n, d */
	for (int dt = 0; dt < 2; dt++)
		for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
			int64_t rows = shapes[c][0], n = shapes[c][1], d = shapes[c][2];
			size_t ne = (size_t)(rows * n), nd = (size_t)(rows * d);
			double *sc = rnd(ne, 12.0), *x = rnd(nd, 4.0), *e = zeros(ne);
			double *sum = zeros((size_t)rows), *y = zeros(nd);
			void *dsc = dev_from(sc, ne, GPU_F32), *dx = dev_from(x, nd, GPU_F32);
			void *de = dev_poisoned(ne, dt), *dsum = dev_poisoned((size_t)rows, GPU_F32);
			void *dy = dev_poisoned(nd, dt);
			print_message(" softmax_exp rows=%lld n=%lld, div_rows d=%lld, %s\n",
				      (long long)rows, (long long)n, (long long)d, dt_name(dt));
			gpu_ok(launch_softmax_exp(de, dt, dsum, dsc, rows, n, NULL), "softmax_exp");
			gpu_ok(launch_div_rows(dy, dt, dx, dsum, rows, d, NULL), "div_rows");
			cpu_softmax_exp_f64(e, sum, sc, rows, n, dt == GPU_BF16);
			expect_close("softmax_exp e", de, e, ne, dt, dt == GPU_BF16 ? TOL_BF16 : TOL_F32);
			expect_close("softmax_exp sum", dsum, sum, (size_t)rows, GPU_F32, TOL_F32);
			double *gsum = host_of(dsum, (size_t)rows, GPU_F32); /* the kernel's own sums */
			cpu_div_rows_f64(y, x, gsum, rows, d);
			expect_close("div_rows y", dy, y, nd, dt, dt == GPU_BF16 ? TOL_BF16 : TOL_F32);
			free(sc), free(x), free(e), free(sum), free(y), free(gsum);
			gpu_free(dsc), gpu_free(dx), gpu_free(de), gpu_free(dsum), gpu_free(dy);
		}
}

/* Shapes the kernels cannot take are refused (cudaErrorInvalidValue, as the
 * other launchers), empty ones do nothing, and an element type outside
 * float32 and bf16 is refused. */
static void flux_launchers_refuse_bad_shapes(void **state)
{
	(void)state;
	need_gpu();
	const int bad = 1; /* cudaErrorInvalidValue */
	assert_int_equal(launch_t5_attention(NULL, NULL, NULL, NULL, NULL, GPU_F32, 1, 4, 2,
					     GPU_T5_ATTENTION_MAX_DK + 1, NULL), bad);
	assert_int_equal(launch_t5_attention(NULL, NULL, NULL, NULL, NULL, GPU_F32, 0, 4, 2, 8,
					     NULL), 0);
	assert_int_equal(launch_t5_attention(NULL, NULL, NULL, NULL, NULL, GPU_E4M3, 1, 4, 2, 8,
					     NULL), bad);
	assert_int_equal(launch_geglu_fwd(NULL, NULL, NULL, GPU_E5M2, 8, NULL), bad);
	assert_int_equal(launch_swish(NULL, GPU_E5M2, 1.0f, 8, NULL), bad);
	assert_int_equal(launch_groupnorm_fwd(NULL, GPU_F32, NULL, GPU_F32, NULL, NULL, GPU_F32, 1, 6,
					      4, 4, 1e-6f, NULL), bad); /* 6 channels, 4 groups */
	assert_int_equal(launch_groupnorm_fwd(NULL, GPU_F32, NULL, GPU_F32, NULL, NULL, GPU_F32, 0, 8,
					      4, 4, 1e-6f, NULL), 0);
	assert_int_equal(launch_layernorm_fwd(NULL, GPU_F32, NULL, GPU_E4M3, NULL, NULL, GPU_F32, 2,
					      8, 1e-5f, NULL), bad);
	assert_int_equal(launch_upsample2x(NULL, NULL, GPU_F32, -1, 1, 1, 1, NULL), bad);
	assert_int_equal(launch_upsample2x(NULL, NULL, GPU_F32, 1, 1, 0, 1, NULL), 0);
	assert_int_equal(launch_upsample2x(NULL, NULL, GPU_E4M3, 1, 1, 1, 1, NULL), bad);
	assert_int_equal(launch_im2col(NULL, NULL, GPU_F32, 1, 1, 2, 8, 3, 1, 0, 0, 0, 0, 0, 1,
				       NULL), bad); /* 3x3 over 2 rows */
	assert_int_equal(launch_im2col(NULL, NULL, GPU_F32, 1, 1, 8, 8, 3, 1, 1, 1, 1, 1, 60, 5,
				       NULL), bad); /* pixels past the 64 */
	assert_int_equal(launch_im2col(NULL, NULL, GPU_F32, 0, 1, 8, 8, 3, 1, 1, 1, 1, 1, 0, 64,
				       NULL), 0);
	assert_int_equal(launch_im2col(NULL, NULL, GPU_E5M2, 1, 1, 8, 8, 3, 1, 1, 1, 1, 1, 0, 64,
				       NULL), bad);
	assert_int_equal(launch_bias_add(NULL, GPU_F32, NULL, GPU_F32, -1, 8, 1, NULL, NULL), bad);
	assert_int_equal(launch_bias_add(NULL, GPU_F32, NULL, GPU_F32, 0, 8, 1, NULL, NULL), 0);
	assert_int_equal(launch_bias_add(NULL, GPU_E4M3, NULL, GPU_F32, 2, 8, 1, NULL, NULL), bad);
	assert_int_equal(launch_bias_grad(NULL, GPU_F32, NULL, GPU_F32, -1, 8, 1, NULL, NULL), bad);
	assert_int_equal(launch_bias_grad(NULL, GPU_F32, NULL, GPU_F32, 4, 0, 1, NULL, NULL), 0);
	assert_int_equal(launch_bias_grad(NULL, GPU_F32, NULL, GPU_E5M2, 4, 8, 1, NULL, NULL), bad);
	assert_int_equal(launch_conv_bias(NULL, NULL, GPU_F32, 1, -1, 4, NULL), bad);
	assert_int_equal(launch_conv_bias(NULL, NULL, GPU_F32, 0, 3, 4, NULL), 0);
	assert_int_equal(launch_conv_bias(NULL, NULL, GPU_E4M3, 1, 3, 4, NULL), bad);
	assert_int_equal(launch_softmax_exp(NULL, GPU_F32, NULL, NULL, 2, 0, NULL), bad);
	assert_int_equal(launch_softmax_exp(NULL, GPU_F32, NULL, NULL, 0, 8, NULL), 0);
	assert_int_equal(launch_softmax_exp(NULL, GPU_E5M2, NULL, NULL, 2, 8, NULL), bad);
	assert_int_equal(launch_div_rows(NULL, GPU_F32, NULL, NULL, -1, 8, NULL), bad);
	assert_int_equal(launch_div_rows(NULL, GPU_F32, NULL, NULL, 0, 8, NULL), 0);
	assert_int_equal(launch_div_rows(NULL, GPU_E4M3, NULL, NULL, 2, 8, NULL), bad);
}

/* ---- the Flux transformer's training ops (float32, bf16) ----
 * float32 against the float64 kernels; bf16 against the CPU backend's bf16
 * kernels (cpu_bf16_fluxt.c, themselves tested against float64 in
 * tests/backend) on the same bf16 inputs: the same roundings, so what
 * differs is a sum's order moving a value to the neighbouring bf16
 * (TOL_BF16). */

typedef struct mod_case {
	int64_t b, n, d, ld; /* rows (b * n, d), per-sample vectors ld apart */
} mod_case;

#define ACC0 0.25 /* where accumulated outputs start */

static void *dev_filled(size_t n, double v, double **host, int dt)
{
	*host = zeros(n);
	for (size_t i = 0; i < n; i++)
		(*host)[i] = v;
	return dev_from(*host, n, dt);
}

/* bf16 copies of doubles (already bf16 values) for the CPU bf16 kernels, and back. */
static uint16_t *to16(const double *x, size_t n)
{
	uint16_t *h = malloc((n ? n : 1) * sizeof *h);
	assert_non_null(h);
	for (size_t i = 0; i < n; i++)
		h[i] = bf16_from_f32((float)x[i]);
	return h;
}

static void from16(double *x, uint16_t *h, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] = bf16_to_f32(h[i]);
	free(h);
}

static double tol_of(int dt) { return dt == GPU_BF16 ? TOL_BF16 : TOL_F32; }

/* Element i of a device tensor of dt. */
static void *el(void *p, size_t i, int dt) { return (char *)p + i * gpu_dtype_size(dt); }

static void ln_mod_case(const mod_case *k, double *x, double *mod, double *dy, int dt)
{
	size_t ne = (size_t)(k->b * k->n * k->d), nv = (size_t)(k->b * k->ld);
	size_t rows = (size_t)(k->b * k->n);
	void *dx_ = dev_from(x, ne, dt), *dm = dev_from(mod, nv, dt);
	void *ddy = dev_from(dy, ne, dt), *dyo = dev_poisoned(ne, dt);
	void *dst = dev_poisoned(2 * rows, GPU_F32);
	double *y = zeros(ne), *st = zeros(2 * rows), *gx, *gm;
	float *fst = malloc(2 * rows * sizeof *fst);
	assert_non_null(fst);
	gpu_ok(launch_ln_mod_fwd(dyo, dst, dx_, dm, el(dm, (size_t)k->d, dt), dt, k->ld, k->b,
				 k->n, k->d, 1e-6f, NULL),
	       "ln_mod_fwd");
	void *dgx = dev_filled(ne, ACC0, &gx, dt), *dgm = dev_filled(nv, ACC0, &gm, dt);
	gpu_ok(launch_ln_mod_bwd(dgx, dgm, el(dgm, (size_t)k->d, dt), ddy, dx_, dst,
				 el(dm, (size_t)k->d, dt), dt, k->ld, k->b, k->n, k->d, NULL),
	       "ln_mod_bwd");
	if (dt == GPU_BF16) {
		uint16_t *x16 = to16(x, ne), *m16 = to16(mod, nv), *dy16 = to16(dy, ne);
		uint16_t *y16 = to16(y, ne), *gx16 = to16(gx, ne), *gm16 = to16(gm, nv);
		cpu_bf16_ln_mod_fwd(y16, fst, x16, m16, m16 + k->d, k->ld, k->b, k->n, k->d, 1e-6f);
		cpu_bf16_ln_mod_bwd(gx16, gm16, gm16 + k->d, dy16, x16, fst, m16 + k->d, k->ld, k->b,
				    k->n, k->d);
		for (size_t i = 0; i < 2 * rows; i++)
			st[i] = fst[i];
		from16(y, y16, ne), from16(gx, gx16, ne), from16(gm, gm16, nv);
		free(x16), free(m16), free(dy16);
	} else {
		cpu_ln_mod_fwd_f64(y, st, x, mod, mod + k->d, k->ld, k->b, k->n, k->d, 1e-6);
		cpu_ln_mod_bwd_f64(gx, gm, gm + k->d, dy, x, st, mod + k->d, k->ld, k->b, k->n, k->d);
	}
	expect_close("ln_mod_fwd y", dyo, y, ne, dt, tol_of(dt));
	expect_close("ln_mod_fwd stats", dst, st, 2 * rows, GPU_F32, TOL_F32);
	expect_close("ln_mod_bwd dx", dgx, gx, ne, dt, tol_of(dt));
	expect_close("ln_mod_bwd dshift dscale", dgm, gm, nv, dt, tol_of(dt));
	free(y), free(st), free(gx), free(gm), free(fst);
	gpu_free(dx_), gpu_free(dm), gpu_free(ddy), gpu_free(dyo), gpu_free(dst), gpu_free(dgx);
	gpu_free(dgm);
}

static void gate_case(const mod_case *k, double *x, double *mod, double *dy, int dt)
{
	size_t ne = (size_t)(k->b * k->n * k->d), nv = (size_t)(k->b * k->ld);
	double *y = rnd(ne, 1.0), *gy = zeros(ne), *gm;
	void *dx_ = dev_from(x, ne, dt), *dm = dev_from(mod, nv, dt);
	void *dyy = dev_from(y, ne, dt), *ddx = dev_from(dy, ne, dt);
	void *dgy = dev_poisoned(ne, dt), *dgm = dev_filled(nv, ACC0, &gm, dt);
	const void *gate = el(dm, 2 * (size_t)k->d, dt);
	gpu_ok(launch_gate_add(dx_, gate, dyy, dt, k->ld, k->b, k->n, k->d, NULL), "gate_add");
	gpu_ok(launch_gate_add_bwd(el(dgm, 2 * (size_t)k->d, dt), dgy, ddx, gate, dyy, dt, k->ld,
				   k->b, k->n, k->d, NULL),
	       "gate_add_bwd");
	if (dt == GPU_BF16) {
		uint16_t *x16 = to16(x, ne), *m16 = to16(mod, nv), *y16 = to16(y, ne);
		uint16_t *dx16 = to16(dy, ne), *gy16 = to16(gy, ne), *gm16 = to16(gm, nv);
		cpu_bf16_gate_add(x16, m16 + 2 * k->d, y16, k->ld, k->b, k->n, k->d);
		cpu_bf16_gate_add_bwd(gm16 + 2 * k->d, gy16, dx16, m16 + 2 * k->d, y16, k->ld, k->b,
				      k->n, k->d);
		from16(x, x16, ne), from16(gy, gy16, ne), from16(gm, gm16, nv);
		free(m16), free(y16), free(dx16);
	} else {
		cpu_gate_add_f64(x, mod + 2 * k->d, y, k->ld, k->b, k->n, k->d);
		cpu_gate_add_bwd_f64(gm + 2 * k->d, gy, dy, mod + 2 * k->d, y, k->ld, k->b, k->n,
				     k->d);
	}
	expect_close("gate_add x", dx_, x, ne, dt, tol_of(dt));
	expect_close("gate_add_bwd dy", dgy, gy, ne, dt, tol_of(dt));
	expect_close("gate_add_bwd dgate", dgm, gm, nv, dt, tol_of(dt));
	free(y), free(gy), free(gm);
	gpu_free(dx_), gpu_free(dm), gpu_free(dyy), gpu_free(ddx), gpu_free(dgy), gpu_free(dgm);
}

static const int flux_types[2] = {GPU_F32, GPU_BF16};

static void modulation_and_gate_match_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	seed(91);
	/* d past the block's 256 threads takes the strided loops */
	const mod_case cases[] = {{2, 5, 12, 36}, {2, 37, 300, 900}, {1, 3, 64, 192}};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
		for (int t = 0; t < 2; t++) {
			const mod_case *k = &cases[c];
			size_t ne = (size_t)(k->b * k->n * k->d), nv = (size_t)(k->b * k->ld);
			print_message(" %s b=%lld n=%lld d=%lld ld=%lld\n", dt_name(flux_types[t]),
				      (long long)k->b, (long long)k->n, (long long)k->d,
				      (long long)k->ld);
			double *x = rnd(ne, 3.0), *mod = rnd(nv, 0.5), *dy = rnd(ne, 1.0);
			for (size_t i = 0; i < ne; i++)
				x[i] += 1.5; /* an offset: the variance about the mean */
			ln_mod_case(k, x, mod, dy, flux_types[t]);
			gate_case(k, x, mod, dy, flux_types[t]);
			free(x), free(mod), free(dy);
		}
}

/* The activation's reference: float64, or the CPU's bf16 kernel. */
static void activation_ref(int gelu, int dt, double *y, double *dx, const double *x,
			   const double *dy, size_t n)
{
	if (dt == GPU_BF16) {
		uint16_t *x16 = to16(x, n), *dy16 = to16(dy, n), *y16 = to16(y, n), *dx16 = to16(dx, n);
		if (gelu) {
			cpu_bf16_gelu_tanh_fwd(y16, x16, (int64_t)n);
			cpu_bf16_gelu_tanh_bwd(dx16, dy16, x16, (int64_t)n);
		} else {
			cpu_bf16_silu_fwd(y16, x16, (int64_t)n);
			cpu_bf16_silu_bwd(dx16, dy16, x16, (int64_t)n);
		}
		from16(y, y16, n), from16(dx, dx16, n);
		free(x16), free(dy16);
	} else if (gelu) {
		cpu_gelu_tanh_fwd_f64(y, x, (int64_t)n);
		cpu_gelu_tanh_bwd_f64(dx, dy, x, (int64_t)n);
	} else {
		cpu_silu_fwd_f64(y, x, (int64_t)n);
		cpu_silu_bwd_f64(dx, dy, x, (int64_t)n);
	}
}

static void gelu_and_silu_forward_and_backward_match_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	seed(92);
	const size_t sizes[] = {1, 9, 4099, 100003};
	for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++)
		for (int t = 0; t < 2; t++)
			for (int gelu = 0; gelu < 2; gelu++) {
				int dt = flux_types[t];
				size_t n = sizes[c], off = c == 2; /* one case past 16-byte alignment */
				double *x = rnd(n + off, 8.0), *dy = rnd(n + off, 1.0);
				double *y = zeros(n), *dx = zeros(n);
				void *d_x = dev_from(x, n + off, dt), *d_dy = dev_from(dy, n + off, dt);
				void *d_y = dev_poisoned(n, dt), *d_dx = dev_poisoned(n, dt);
				const void *px = el(d_x, off, dt), *pdy = el(d_dy, off, dt);
				print_message(" %s %s n=%zu%s\n", dt_name(dt), gelu ? "gelu_tanh" : "silu",
					      n, off ? " (offset)" : "");
				int (*launch)(void *, const void *, const void *, int, int64_t, void *) =
					gelu ? launch_gelu_tanh : launch_silu;
				gpu_ok(launch(d_y, px, NULL, dt, (int64_t)n, NULL), "activation");
				gpu_ok(launch(d_dx, px, pdy, dt, (int64_t)n, NULL), "activation bwd");
				activation_ref(gelu, dt, y, dx, x + off, dy + off, n);
				expect_close(gelu ? "gelu_tanh y" : "silu y", d_y, y, n, dt, tol_of(dt));
				expect_close(gelu ? "gelu_tanh dx" : "silu dx", d_dx, dx, n, dt,
					     tol_of(dt));
				free(x), free(dy), free(y), free(dx);
				gpu_free(d_x), gpu_free(d_dy), gpu_free(d_y), gpu_free(d_dx);
			}
}

static double flow_mse_ref(int dt, double *g, const double *p, const double *x,
			   const double *z, size_t n, float scale)
{
	if (dt != GPU_BF16)
		return cpu_flow_mse_f64(g, p, x, z, (int64_t)n, scale);
	uint16_t *p16 = to16(p, n), *x16 = to16(x, n), *z16 = to16(z, n), *g16 = to16(g, n);
	double s = cpu_bf16_flow_mse(g16, p16, x16, z16, (int64_t)n, scale);
	from16(g, g16, n);
	free(p16), free(x16), free(z16);
	return s;
}

static void flow_mse_loss_and_gradient_match_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	seed(93);
	const size_t sizes[] = {1, 1000, 100003};
	const int parts = 64;
	void *dpart = dev_alloc(parts * sizeof(double)), *dsum = dev_alloc(2 * sizeof(double));
	for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++)
		for (int t = 0; t < 2; t++)
			for (int with_grad = 0; with_grad < 2; with_grad++) {
				int dt = flux_types[t];
				size_t n = sizes[c];
				double *p = rnd(n, 2.0), *x = rnd(n, 1.0), *z = rnd(n, 1.0), *g = zeros(n);
				void *dp = dev_from(p, n, dt), *dx_ = dev_from(x, n, dt);
				void *dz = dev_from(z, n, dt), *dg = dev_poisoned(n, dt);
				float scale = 1.0f / (float)n;
				print_message(" %s n=%zu%s\n", dt_name(dt), n,
					      with_grad ? "" : " (loss only)");
				gpu_ok(launch_flow_mse(with_grad ? dg : NULL, dp, dx_, dz, dt, (int64_t)n,
						       scale, dpart, parts, dsum, (int64_t *)dsum + 1,
						       NULL),
				       "flow_mse");
				double want = flow_mse_ref(dt, g, p, x, z, n, scale);
				struct {
					double sum;
					int64_t n;
				} got;
				titan_err e;
				if (gpu_sync(&e) || gpu_download(&got, dsum, sizeof got, &e))
					fail_msg("%s", e.msg);
				/* the sum is of float32 terms either way */
				double err = rel_err(&got.sum, &want, 1);
				print_message("  %-44s %-4s rel err %.2e (bound %.1e)\n", "flow_mse sum",
					      dt_name(dt), err, TOL_F32);
				assert_true(err <= TOL_F32);
				assert_int_equal(got.n, (int64_t)n);
				if (with_grad)
					expect_close("flow_mse grad", dg, g, n, dt, tol_of(dt));
				free(p), free(x), free(z), free(g);
				gpu_free(dp), gpu_free(dx_), gpu_free(dz), gpu_free(dg);
			}
	gpu_free(dpart), gpu_free(dsum);
}

static void flux_train_launchers_refuse_bad_shapes(void **state)
{
	(void)state;
	need_gpu();
	const int bad = 1; /* cudaErrorInvalidValue */
	float *p = NULL;
	const int f = GPU_F32;
	assert_int_equal(launch_ln_mod_fwd(p, p, p, p, p, f, 3, 1, 2, 4, 1e-6f, NULL), bad); /* ld < d */
	assert_int_equal(launch_ln_mod_fwd(p, p, p, p, p, f, 4, 0, 2, 4, 1e-6f, NULL), 0);
	assert_int_equal(launch_ln_mod_fwd(p, p, p, p, p, GPU_E4M3, 4, 1, 2, 4, 1e-6f, NULL), bad);
	assert_int_equal(launch_ln_mod_bwd(p, p, p, p, p, p, p, f, 4, 1, 0, 4, NULL), bad);
	assert_int_equal(launch_ln_mod_bwd(p, p, p, p, p, p, p, f, 4, 0, 1, 4, NULL), 0);
	assert_int_equal(launch_gate_add(p, p, p, f, 4, -1, 1, 4, NULL), bad);
	assert_int_equal(launch_gate_add(p, p, p, f, 4, 1, 1, 0, NULL), 0);
	assert_int_equal(launch_gate_add(p, p, p, GPU_E5M2, 4, 1, 1, 4, NULL), bad);
	assert_int_equal(launch_gate_add_bwd(p, p, p, p, p, f, 2, 1, 1, 4, NULL), bad);
	assert_int_equal(launch_gate_add_bwd(p, p, p, p, p, f, 4, 0, 1, 4, NULL), 0);
	assert_int_equal(launch_gelu_tanh(p, p, NULL, f, -1, NULL), bad);
	assert_int_equal(launch_gelu_tanh(p, p, NULL, GPU_E4M3, 4, NULL), bad);
	assert_int_equal(launch_silu(p, p, NULL, f, -1, NULL), bad);
	assert_int_equal(launch_flow_mse(p, p, p, p, f, 8, 1.0f, NULL, 0, NULL, NULL, NULL), bad);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(cast_rounds_like_torch_bit_for_bit),
		cmocka_unit_test(add_axpy_scale_match_the_cpu),
		cmocka_unit_test(lerp_matches_the_cpu_bit_for_bit),
		cmocka_unit_test(rmsnorm_forward_with_residual_matches_the_cpu),
		cmocka_unit_test(rmsnorm_backward_with_residual_matches_the_cpu),
		cmocka_unit_test(rmsnorm_backward_repeats_bit_for_bit),
		cmocka_unit_test(rope_in_place_both_pairings_match_the_cpu),
		cmocka_unit_test(rope_qkv_split_and_merge_match_the_cpu),
		cmocka_unit_test(swiglu_forward_and_backward_match_the_cpu),
		cmocka_unit_test(embedding_forward_and_backward_match_the_cpu),
		cmocka_unit_test(cross_entropy_loss_and_gradient_match_the_cpu),
		cmocka_unit_test(adamw_and_grad_norm_over_many_tensors_match_the_cpu),
		cmocka_unit_test(adamw_bf16_states_match_the_cpu_bit_for_bit),
		cmocka_unit_test(t5_attention_matches_the_cpu),
		cmocka_unit_test(geglu_and_swish_match_the_cpu),
		cmocka_unit_test(layer_and_group_norms_match_the_cpu),
		cmocka_unit_test(upsample_and_im2col_match_the_cpu_exactly),
		cmocka_unit_test(bias_add_and_grad_match_the_cpu),
		cmocka_unit_test(conv_bias_matches_the_cpu_exactly),
		cmocka_unit_test(softmax_exp_and_div_rows_match_the_cpu),
		cmocka_unit_test(flux_launchers_refuse_bad_shapes),
		cmocka_unit_test(modulation_and_gate_match_the_cpu),
		cmocka_unit_test(gelu_and_silu_forward_and_backward_match_the_cpu),
		cmocka_unit_test(flow_mse_loss_and_gradient_match_the_cpu),
		cmocka_unit_test(flux_train_launchers_refuse_bad_shapes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
