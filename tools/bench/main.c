/* titan-bench: measure what titan does on this machine (GEMMs, attention,
 * loading and checkpoint I/O, tokenization) against the ceilings and the
 * reference implementations, in the same run.  See titan-bench(1). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "core/cli.h"
#include "core/err.h"
#include "core/pool.h"
#include "prof/prof.h"

enum {
	OPT_JSON = 256, OPT_THREADS, OPT_SECONDS, OPT_DEVICE, OPT_PROFILE, OPT_DTYPE, OPT_SHAPES,
	OPT_TOKENS, OPT_ATTN, OPT_SEQ, OPT_BATCH, OPT_DATA, OPT_DIR, OPT_SIZE, OPT_TOKENIZER,
	OPT_INPUT, OPT_PYTHON, OPT_CONFIG, OPT_MODEL, OPT_STEPS, OPT_DOCS,
};

static const cli_option options[] = {
	{"json", 0, CLI_NO_ARG, OPT_JSON, NULL, "one JSON document on stdout instead of the table"},
	{"threads", 0, CLI_ARG, OPT_THREADS, "N", "CPU threads (default: all cores)"},
	{"seconds", 0, CLI_ARG, OPT_SECONDS, "S", "least time per measurement (default 1)"},
	{"device", 0, CLI_ARG, OPT_DEVICE, "D", "cpu or cuda (default cpu)"},
	{"profile", 0, CLI_ARG, OPT_PROFILE, "DIR", "write a trace and memory snapshot of the run"},
	{"dtype", 0, CLI_ARG, OPT_DTYPE, "LIST", "gemm, attention: element types (default: all)"},
	{"shapes", 0, CLI_ARG, OPT_SHAPES, "SPEC", "gemm: a model (llama3-8b) or M,N,K[:M,N,K...]"},
	{"tokens", 0, CLI_ARG, OPT_TOKENS, "M", "gemm: M of a model's shapes (default 256)"},
	{"attention-shape", 0, CLI_ARG, OPT_ATTN, "SPEC", "attention: a model or B,T,H,HKV,HD"},
	{"seq", 0, CLI_ARG, OPT_SEQ, "T",
	 "attention, io, step: sequence length (default 1024 / 2048 / the job's)"},
	{"batch", 0, CLI_ARG, OPT_BATCH, "B", "attention, io, step: batch (default 1 / 8 / the job's)"},
	{"docs", 0, CLI_ARG, OPT_DOCS, "N",
	 "attention: also block-causal over N equal documents a row (0.3.0's mask)"},
	{"data", 0, CLI_ARG, OPT_DATA, "DIR", "io: a titan-shard folder (default: synthetic)"},
	{"dir", 0, CLI_ARG, OPT_DIR, "DIR", "io: where to write (default $TMPDIR or /tmp)"},
	{"size", 0, CLI_ARG, OPT_SIZE, "SIZE",
	 "io: bytes of shards and of checkpoint (default 256M); comm: the largest message (16M)"},
	{"tokenizer", 0, CLI_ARG, OPT_TOKENIZER, "PATH", "tokenize: tokenizer.json, tiktoken file or folder"},
	{"input", 0, CLI_ARG, OPT_INPUT, "FILE", "tokenize: JSON Lines documents (\"text\")"},
	{"python", 0, CLI_ARG, OPT_PYTHON, "PY", "tokenize: interpreter with tokenizers/tiktoken"},
	{"config", 0, CLI_ARG, OPT_CONFIG, "FILE", "step: a titan-train job (TOML)"},
	{"model", 0, CLI_ARG, OPT_MODEL, "FLAVOR", "step: the model flavor (default: the job's)"},
	{"steps", 0, CLI_ARG, OPT_STEPS, "N", "step: steps measured after a warm-up (default 5)"},
	{NULL, 0, 0, 0, NULL, NULL},
};

static const cli_spec spec = {
	.prog = "titan-bench",
	.synopsis = "gemm [--dtype LIST] [--shapes llama3-8b|llama3-70b|M,N,K[:M,N,K...]]\n"
		    "       titan-bench attention [--attention-shape llama3-8b|B,T,H,HKV,HD] [--docs N]\n"
		    "       titan-bench io [--data DIR] [--size SIZE]\n"
		    "       titan-bench tokenize --tokenizer PATH --input FILE [--python PY]\n"
		    "       [mpirun -np N] titan-bench step [--config FILE] [--model FLAVOR] [--steps N]\n"
		    "       mpirun -np N titan-bench comm [--size SIZE]",
	.summary = "Measure titan on this machine against its ceilings and the references.",
	.opts = options,
	.epilog = "Every subcommand takes --json, --threads, --seconds, --device, --profile.\n"
		  "A figure that cannot be measured here is listed as not available, with why.\n"
		  "TITAN_CPU_ISA=avx2 (or baseline, v2, avx512, ...) measures at a lower level.\n",
};

static void parse(int argc, char **argv, bench_args *a, const char **cmd)
{
	cli_state st;
	int c;
	cli_begin(&st, &spec);
	while ((c = cli_next(&st, argc, argv)) != -1) {
		switch (c) {
		case OPT_JSON: a->json = 1; break;
		case OPT_THREADS: a->threads = (int)cli_int(&spec, "--threads", st.arg, 1, 4096); break;
		case OPT_SECONDS: a->seconds = cli_double(&spec, "--seconds", st.arg, 0, 3600); break;
		case OPT_DEVICE: a->device = st.arg; break;
		case OPT_PROFILE: a->profile = st.arg; break;
		case OPT_DTYPE: a->dtypes = st.arg; break;
		case OPT_SHAPES: a->shapes = st.arg; break;
		case OPT_TOKENS: a->tokens = cli_int(&spec, "--tokens", st.arg, 1, 1 << 24); break;
		case OPT_ATTN: a->attn = st.arg; break;
		case OPT_SEQ: a->seq = cli_int(&spec, "--seq", st.arg, 1, 1 << 24); break;
		case OPT_BATCH: a->batch = cli_int(&spec, "--batch", st.arg, 1, 1 << 20); break;
		case OPT_DOCS: a->docs = cli_int(&spec, "--docs", st.arg, 1, 1 << 24); break;
		case OPT_DATA: a->data = st.arg; break;
		case OPT_DIR: a->dir = st.arg; break;
		case OPT_SIZE:
			/* 0 is no size (it used to mean the default) */
			if ((a->size = cli_size(&spec, "--size", st.arg)) < (1u << 20))
				cli_usage_error(&spec, "--size '%s': at least 1M", st.arg);
			break;
		case OPT_TOKENIZER: a->tokenizer = st.arg; break;
		case OPT_INPUT: a->input = st.arg; break;
		case OPT_PYTHON: a->python = st.arg; break;
		case OPT_CONFIG: a->config = st.arg; break;
		case OPT_MODEL: a->model = st.arg; break;
		case OPT_STEPS: a->steps = (int)cli_int(&spec, "--steps", st.arg, 1, 100000); break;
		}
	}
	if (argc - st.optind != 1)
		cli_usage_error(&spec, argc == st.optind ? "missing subcommand" : "one subcommand only");
	*cmd = argv[st.optind];
	if (strcmp(a->device, "cpu") != 0 && strcmp(a->device, "cuda") != 0)
		cli_usage_error(&spec, "--device: '%s' is not cpu or cuda", a->device);
}

/* Defaults that depend on the subcommand (a model's shapes, the dtypes it
 * knows); the figures a user sees without options should take seconds. */
static void defaults(const char *cmd, bench_args *a)
{
	int attn = strcmp(cmd, "attention") == 0;
	if (a->dtypes == NULL)
		a->dtypes = attn ? "fp32,bf16" : "fp32,bf16,fp8-tensorwise,fp8-rowwise";
	if (a->size == 0)
		a->size = strcmp(cmd, "comm") == 0 ? 16u << 20 : 256u << 20;
	if (strcmp(cmd, "step") == 0)
		return; /* the job's batch and sequence unless given */
	if (a->seq == 0)
		a->seq = attn ? 1024 : 2048;
	if (a->batch == 0)
		a->batch = attn ? 1 : 8;
}

static const struct {
	const char *name;
	int (*run)(const bench_args *, titan_err *);
} COMMANDS[] = {
	{"gemm", bench_gemm},
	{"attention", bench_attention},
	{"io", bench_io},
	{"tokenize", bench_tokenize},
	{"step", bench_step},
	{"comm", bench_comm},
};

int main(int argc, char **argv)
{
	bench_args a = {.seconds = 1.0, .device = "cpu", .shapes = "llama3-8b", .tokens = 256,
			.attn = "llama3-8b"};
	const char *cmd;
	titan_err e = {0};
	/* cli_begin, parse's first step, refuses a TITAN_CPU_ISA this processor
	 * cannot have (cpu_isa_check): one line, exit 2, before any work */
	parse(argc, argv, &a, &cmd);
	size_t i = 0;
	while (i < sizeof COMMANDS / sizeof COMMANDS[0] && strcmp(cmd, COMMANDS[i].name) != 0)
		i++;
	if (i == sizeof COMMANDS / sizeof COMMANDS[0])
		cli_usage_error(&spec, "unknown subcommand '%s'", cmd);
	if (strcmp(a.device, "cuda") == 0 && strcmp(cmd, "io") != 0 && strcmp(cmd, "tokenize") != 0 &&
	    strcmp(cmd, "comm") != 0)
		titan_die(TITAN_EXIT_FAIL, "%s --device cuda: not available: %s", cmd,
			  bench_cuda_unavailable());
	defaults(cmd, &a);
	if (a.threads == 0)
		a.threads = pool_ncpu();
	if (a.profile != NULL) {
		prof_opts po = {a.profile, a.profile, 0, 1, 1};
		if (prof_start(&po, &e))
			titan_die_err(&e);
		prof_step_begin(1);
	}
	int rc = COMMANDS[i].run(&a, &e);
	if (a.profile != NULL) {
		titan_err pe = {0};
		if (prof_step_end(1, &pe))
			titan_warn("%s", pe.msg);
		prof_stop();
	}
	if (rc == BENCH_USAGE)
		cli_usage_error(&spec, "%s", e.msg);
	if (rc)
		titan_die_err(&e);
	return TITAN_EXIT_OK;
}
