/* metrics.h: what titan-train reports while it runs: torchtitan's log line,
 * the flops and MFU arithmetic behind it, memory figures, and a JSON-lines
 * file of every step for scripts.
 *
 * The log line is torchtitan's (components/metrics.py, v0.2.2), field for field:
 *   step: 10  loss:  7.12345  grad_norm:  1.2345  memory:  0.52GiB(1.63%)  tps: 12,345  tflops: 0.12  mfu: 0.05%
 * with ANSI colours only when the stream is a terminal and colours are not
 * disabled (metrics.disable_color_printing, or NO_COLOR in the environment). */
#ifndef TITAN_METRICS_H
#define TITAN_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"
#include "core/err.h"

/* torchtitan's dense-model count: 6 x (params - embedding params) for the
 * matmuls of forward and backward, plus 6 x n_layers x n_heads x (2 x
 * head_dim) x seq_len for attention (QK^T and AV, forward and backward). */
double metrics_flops_per_token(int64_t params_no_embedding, int n_layers, int n_heads,
			       int head_dim, int64_t seq_len);

/* Peak dense bf16 FLOP/s of a device named like torch.cuda.get_device_name()
 * ("NVIDIA H100 80GB HBM3"), from torchtitan's table (A100 312e12; H100 SXM,
 * H200 989e12; H100 PCIe 756e12; H100 NVL 835e12; H20 148e12; B200 2.25e15;
 * L40S 362e12; MI300X 1300e12; MI325X 1300e12; MI355X 2500e12); 0 when unknown. */
double metrics_device_peak_flops(const char *device_name);

/* The CPU's FP32 matmul rate, measured once by a short sgemm probe (about
 * 0.2 s) with the threads OpenBLAS uses; TITAN_CPU_PEAK_FLOPS (a number such as
 * 1.2e12) overrides the measurement.  MFU on the CPU is relative to this
 * measured rate, not to a datasheet figure. */
double metrics_cpu_peak_flops(void);

/* The rate of be's own matmul in element type t, the peak MFU is measured
 * against on the CPU: BE_F32 for float32 linears, BE_BF16 (bf16 inputs, float32
 * accumulation: oneDNN's kernels) when the linears compute in bfloat16 (bf16
 * autocast, FSDP's bf16 policy, training.dtype bfloat16).  Measured once per
 * type by a short probe of 1024^3 products on be's threads (about 0.05 s each);
 * TITAN_CPU_PEAK_FLOPS and TITAN_CPU_PEAK_FLOPS_BF16 override the
 * measurements. */
double metrics_matmul_peak_flops(backend *be, be_dtype t);

/* Peak resident memory of this process and its share of the machine's RAM
 * (the CPU's counterpart of torch.cuda.max_memory_reserved). */
void metrics_cpu_memory(double *gib, double *pct);

/* Whether to colour output on fd. */
int metrics_use_color(int fd, int disabled);

typedef struct metrics_step {
	int64_t step;
	double loss;      /* global average loss of the step */
	double grad_norm; /* before clipping */
	double mem_gib;   /* peak memory */
	double mem_pct;   /* of the device's */
	double tps;       /* tokens per second per device since the last log */
	double tflops;    /* achieved TFLOP/s per device: the work done (the pairs
	                     attention's masks leave, model_train_flops) */
	double mfu;       /* percent of peak, of the same work */
	double tflops_tt; /* the same in torchtitan's count (every query against
	                     seq_len keys, model_flops_per_token) */
	double mfu_tt;
} metrics_step;

/* s's tflops, mfu (of flops) and tflops_tt, mfu_tt (of flops_tt): FLOPs one
 * device did in seconds, against a peak of peak FLOP/s (0: mfu 0). */
void metrics_set_rates(metrics_step *s, double flops, double flops_tt, double seconds,
		       double peak);

/* Format the log line (no newline, no logger prefix) into buf. */
void metrics_format_line(char *buf, size_t n, const metrics_step *s, int color);
/* torchtitan's validation line: "validate step: 10  loss:  5.4321  memory:  0.52GiB(1.63%)". */
void metrics_format_validation_line(char *buf, size_t n, int64_t step, double loss, double mem_gib,
				    double mem_pct, int color);
/* "[titan] YYYY-mm-dd HH:MM:SS,mmm - root - INFO - ", like torchtitan's logger. */
void metrics_log_prefix(char *buf, size_t n);
/* Print prefix + message + "\n" to out. */
void metrics_log(FILE *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Format an integer with thousands separators, as Python's "{:,}". */
void metrics_commas(char *buf, size_t n, int64_t v);

/* The metrics JSONL file: one object per line, appended and flushed. */
typedef struct metrics_jsonl {
	FILE *fp;
	char *path;
} metrics_jsonl;

int metrics_jsonl_open(metrics_jsonl *j, const char *path, titan_err *err);
/* {"step":N,"loss":...,"grad_norm":...,"lr":...,"n_tokens_seen":...,
 *  "time_s":...,"tps":...,"tflops":...,"mfu":...,"tflops_torchtitan":...,
 *  "mfu_torchtitan":...,"memory_gib":...}; numbers with
 * full precision (%.17g), so a loss reads back bit for bit. */
int metrics_jsonl_step(metrics_jsonl *j, const metrics_step *s, double lr, int64_t ntokens,
		       double elapsed_s, titan_err *err);
/* {"step":N,"validation_loss":...,"validation_tokens":...} */
int metrics_jsonl_validation(metrics_jsonl *j, int64_t step, double loss, int64_t tokens,
			     titan_err *err);
int metrics_jsonl_close(metrics_jsonl *j, titan_err *err);

/* Loss curves read back from a metrics.jsonl (the last record of a step wins). */
typedef struct metrics_curve {
	int64_t *step;
	double *value;
	size_t n, cap;
} metrics_curve;

/* train gets the "loss" records, val the "validation_loss" ones. */
int metrics_read_curves(const char *path, metrics_curve *train, metrics_curve *val,
			titan_err *err);
void metrics_curve_free(metrics_curve *c);
/* A width x height character plot of both curves. */
void metrics_plot_ascii(FILE *out, const metrics_curve *train, const metrics_curve *val,
			int width, int height);
/* An 800x500 RGB PNG of both curves with axes, written atomically. */
int metrics_plot_png(const char *path, const metrics_curve *train, const metrics_curve *val,
		     titan_err *err);

#endif
