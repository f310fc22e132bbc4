/* titan-train: pretrain a Llama model from a TOML config (torchtitan's sections
 * and keys) on titan-shard data.  See titan-train(1) and titan-config(5). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "config/config.h"
#include "config/tt030.h"
#include "core/cli.h"
#include "core/err.h"
#include "cp/cp.h"
#include "flux/flux.h"
#include "fluxae/fluxae.h"
#include "fluxtrain/fluxtrain.h"
#include "gpu/gpu.h"
#include "mesh/mesh.h"
#include "metrics/metrics.h"
#include "model/family.h"
#include "model/flavor.h"
#include "planner/planner.h"
#include "pp/pp.h"
#include "tb/tb.h"
#include "textenc/textenc.h"
#include "trainer/trainer.h"

static volatile sig_atomic_t stop_requested;

/* First signal: finish the step, save, exit 0.  A second one kills at once. */
static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: titan-train --config FILE.toml [--section.key value ...]\n"
		"       titan-train --module NAME --config NAME [--section.key value ...]\n"
		"       mpirun -np N titan-train ...   srun titan-train ...   NGPU=N ./run_train.sh\n"
		"       titan-train --list-flavors\n"
		"       titan-train --read-events FILE\n"
		"       titan-train --plot-loss FILE.jsonl [--png OUT.png]\n"
		"       titan-train --config FILE.toml --dry-run [--world-size N]\n"
		"                   [--device-memory SIZE] [--json] [--print-schedule]\n"
		"Train a Llama model on titan-shard data, as torchtitan's train.py does.\n"
		"\n"
		"options:\n"
		"  --config FILE            TOML job config (torchtitan's sections and keys)\n"
		"  --module NAME --config NAME\n"
		"                           torchtitan 0.3.0's preset NAME (its CLI paths then\n"
		"                           override it: titan-config(5)), else the config\n"
		"                           NAME.toml of configs/ (TITAN_CONFIG_DIR), a\n"
		"                           model.name = NAME one\n"
		"  --section.key VALUE      override one key (booleans may be bare flags)\n"
		"  --job.print_config       print the resolved config as TOML and exit (a 0.3.0\n"
		"                           preset's --debug.print_config: as 0.3.0's JSON)\n"
		"  --list-flavors           print the model flavors and exit\n"
		"  --flavor NAME            the model's flavor NAME in place of the config's\n"
		"                           (a 0.3.0 preset sets it in code, not on its CLI)\n"
		"  --list-keys              print every config key (TSV: key, type, default,\n"
		"                           values, torchtitan key, support, why, description)\n"
		"                           and exit\n"
		"  --list-030-paths         print torchtitan 0.3.0's CLI paths (TSV: path, what,\n"
		"                           titan key, value accepted, why) and exit\n"
		"  --list-030-presets       print torchtitan 0.3.0's presets (TSV: module, preset,\n"
		"                           honoured or refused, why) and exit\n"
		"  --read-events FILE       print a TensorBoard event file (CRCs checked) and exit\n"
		"  --plot-loss FILE [--png OUT]\n"
		"                           plot the loss curves of a metrics.jsonl in the terminal\n"
		"                           (and as a PNG image) and exit\n"
		"  --threads N              CPU threads (default: OMP_NUM_THREADS or all)\n"
		"  --backend cpu|cuda|auto  where the ops run (default auto: the process's GPU\n"
		"                           when it has one, as torchtitan, else the CPU)\n"
		"  --no-step-graph          compile.enable without capturing the whole step\n"
		"                           (a CUDA graph): the fused ops only\n"
		"  --sample                 Flux: images of the inference.prompts_path prompts\n"
		"                           (0.3.0's infer.py) instead of training\n"
		"  --dry-run                plan memory and traffic per rank and exit\n"
		"  --world-size N           ranks to plan for (default: the launcher's)\n"
		"  --device-memory SIZE     memory per rank, e.g. 80GiB (default: the GPU's,\n"
		"                           else this machine's)\n"
		"  --json                   the plan as JSON\n"
		"  --print-schedule         print the pipeline schedule's action lists and exit\n"
		"  -h, --help               show this help and exit\n"
		"      --version            show the version and exit\n"
		"\nEvery key, its default and its torchtitan name: titan-config(5).\n"
		"See titan-train(1).\n");
}

/* Say why on stderr and return the exit status; callers free what they hold
 * before exiting (the leak checker runs at exit). */
static int fail(int code, const char *msg, int hint)
{
	fprintf(stderr, "titan-train: %s\n%s", msg, hint ? "Try 'titan-train --help'.\n" : "");
	return code;
}

static int plot_loss(const char *jsonl, const char *png)
{
	metrics_curve train, val;
	titan_err err;
	if (metrics_read_curves(jsonl, &train, &val, &err) != 0)
		return fail(TITAN_EXIT_FAIL, err.msg, 0);
	metrics_plot_ascii(stdout, &train, &val, 64, 16);
	printf("first loss %.4f at step %lld, last %.4f at step %lld\n", train.value[0],
	       (long long)train.step[0], train.value[train.n - 1], (long long)train.step[train.n - 1]);
	int rc = png != NULL ? metrics_plot_png(png, &train, &val, &err) : 0;
	metrics_curve_free(&train);
	metrics_curve_free(&val);
	return rc != 0 ? fail(TITAN_EXIT_FAIL, err.msg, 0) : TITAN_EXIT_OK;
}

static int print_event(void *ctx, const tb_event *ev, titan_err *err)
{
	(void)ctx;
	(void)err;
	if (ev->file_version != NULL)
		printf("%.6f\t%lld\tfile_version\t%s\n", ev->wall_time, (long long)ev->step,
		       ev->file_version);
	else if (ev->tag != NULL)
		printf("%.6f\t%lld\t%s\t%.9g\n", ev->wall_time, (long long)ev->step, ev->tag,
		       (double)ev->value);
	return 0;
}

/* --module NAME --config NAME: torchtitan's newer launch names a config by
 * module and name instead of a file.  One of 0.3.0's presets (lib/config/
 * tt030.h) sets *preset and leaves argv alone; any other name rewrites argv's
 * --config to the file (configs/NAME.toml, TITAN_CONFIG_DIR overriding
 * configs/) and removes --module.  *module is its value or NULL.  path holds
 * the file's name. */
static int named_config(int *argc, char **argv, const char **module, const char **preset,
			char *path, size_t n)
{
	*module = *preset = NULL;
	for (int i = 1; i + 1 < *argc; i++)
		if (strcmp(argv[i], "--module") == 0)
			*module = argv[i + 1];
	for (int i = 1; *module && i + 1 < *argc; i++)
		if (strcmp(argv[i], "--config") == 0 && tt030_is_preset(*module, argv[i + 1]))
			*preset = argv[i + 1];
	if (*preset)
		return 0;
	int cfg = -1;
	for (int i = 1; i + 1 < *argc; i++) {
		if (strcmp(argv[i], "--module") == 0) {
			*module = argv[i + 1];
			memmove(argv + i, argv + i + 2, (size_t)(*argc - i - 1) * sizeof *argv);
			*argc -= 2;
			i--;
		} else if (strcmp(argv[i], "--config") == 0) {
			cfg = i + 1;
		}
	}
	if (*module == NULL || cfg < 0 || strchr(argv[cfg], '/') != NULL ||
	    strstr(argv[cfg], ".toml") != NULL)
		return 0;
	const char *dir = getenv("TITAN_CONFIG_DIR");
	snprintf(path, n, "%s/%s.toml", dir != NULL && *dir ? dir : "configs", argv[cfg]);
	if (access(path, R_OK) != 0) {
		fprintf(stderr, "titan-train: --module %s --config %s: no %s\n", *module, argv[cfg], path);
		return -1;
	}
	argv[cfg] = path;
	return 0;
}

/* A run that follows 0.2.2 (a TOML config) given one of 0.3.0's paths that
 * 0.2.2 spells otherwise or lacks. */
static int mixed_030(int argc, char **argv, titan_err *err)
{
	for (int i = 1; i < argc; i++) {
		const char *p = tt030_path_of(argv[i]);
		if (p)
			return err_set(err, "--%s: torchtitan 0.3.0's path, and this run follows "
				       "0.2.2 (a TOML config; --module/--config name a 0.3.0 preset): "
				       "mixing the two is refused", p);
	}
	return 0;
}

/* The mesh's limits from the model's shape. */
static mesh_model model_limits(const job_config *c)
{
	mesh_model m = {c->model.flavor, 0, 0, 0, 0, 0, 0, c->training.seq_len,
			cp_balance_multiple(c->parallelism.context_parallel_load_balancer)};
	const model_family *f = model_family_find(c->model.name);
	const llama_args *a = f != NULL ? model_family_flavor(f, c->model.flavor) : NULL;
	if (a != NULL) {
		m.n_layers = a->n_layers;
		m.n_heads = a->n_heads;
		m.n_kv_heads = a->n_kv_heads;
		m.dim = a->dim;
		/* the rows tensor parallelism splits: the experts' with experts */
		m.ffn_hidden = a->moe.experts > 0 ? a->moe.inter_dim : flavor_ffn_hidden(a);
		m.n_experts = a->moe.experts;
	}
	return m;
}

/* Validation cuts its sequences over the cp ranks as training does. */
static int check_validation(const job_config *c, const mesh_degrees *d, titan_err *e)
{
	if (!c->validation.enable)
		return 0;
	return mesh_check_seq_len("validation.seq_len", c->validation.seq_len, d,
				  cp_balance_multiple(c->parallelism.context_parallel_load_balancer), e);
}

/* A failure the other ranks may not know of (main then ends them): said by
 * the first rank of the node to fail, not again by each rank it brings down. */
static int fail_alone(comm *world, const char *msg)
{
	return comm_claim_report(world) ? fail(TITAN_EXIT_FAIL, msg, 0) : TITAN_EXIT_FAIL;
}

/* Every rank must run the same job: one started with another degree or
 * flavor would crash inside a collective, one with another lr or seed would
 * train its shard differently.  Returns 0 when the ranks agree; -1 with err
 * set, *agreed when every rank refuses alike (the configs differ), not when
 * the exchange itself failed. */
static int agree_config(const job_config *c, comm *world, int *agreed, titan_err *err)
{
	size_t n, na, nb;
	char *mine = config_agreement_text(c, &n), *a, *b;
	int other;
	if (mine == NULL)
		return err_set(err, "out of memory");
	int rc = comm_agree_bytes(world, mine, n, &other, &a, &na, &b, &nb, err);
	free(mine);
	if (rc != 0 || other < 0)
		return rc;
	*agreed = 1;
	if (config_agreement_diff(a, na, 0, b, nb, other, err->msg, sizeof err->msg) != 1)
		err_set(err, "config differs across ranks: rank 0's and rank %d's checksums differ",
			other);
	free(a);
	free(b);
	return -1;
}

/* The job on the ranks of world: the mesh, then the trainer.  The ranks
 * first agree on the config, then on the checks' outcome, so that a check
 * that fails on some ranks only (a file one rank cannot read) stops all of
 * them: the lowest failing rank says why, every rank exits 2.  *agreed: a
 * failure every rank knows of (no rank waits for another). */
static int run_ranks(job_config *c, comm *world, int threads, int backend, int no_step_graph,
		     int *agreed)
{
	titan_err err = {{0}};
	int rank = comm_rank(world), n = comm_size(world);
	*agreed = 0;
	if (n > 1 && agree_config(c, world, agreed, &err) != 0)
		return !*agreed ? fail_alone(world, err.msg)
		       : rank == 0 ? fail(TITAN_EXIT_FAIL, err.msg, 0) : TITAN_EXIT_FAIL;
	const __typeof__(c->parallelism) *p = &c->parallelism;
	mesh_degrees want = {p->data_parallel_replicate_degree, p->data_parallel_shard_degree,
			     p->context_parallel_degree, p->tensor_parallel_degree,
			     p->pipeline_parallel_degree, p->expert_parallel_degree,
			     p->expert_tensor_parallel_degree}, d;
	mesh_model limits = model_limits(c);
	if (rank != 0)
		titan_set_warnings(c->metrics.save_for_all_ranks);
	pp_schedule *sched = NULL; /* the pipeline the run will build, refused here if bad */
	cp_balance bal;
	cp_rotate rot;
	int bad = mesh_resolve(&want, n, &d, &err) != 0 || mesh_check_model(&d, &limits, &err) != 0 ||
		  check_validation(c, &d, &err) != 0 || config_check_supported(c, n, &err) != 0 ||
		  cp_balance_parse(p->context_parallel_load_balancer, &bal, &err) != 0 ||
		  cp_balance_check(bal, (int)d.cp, c->follows_030, &err) != 0 ||
		  cp_rotate_parse(p->context_parallel_rotate_method, &rot, &err) != 0 ||
		  (d.pp > 1 && planner_schedule(c, n, &sched, &err) != 0);
	pp_schedule_free(sched);
	int first = bad ? rank : -1, nfailed = bad;
	if (n > 1) {
		titan_err aerr = {{0}};
		if (comm_agree_status(world, bad, &first, &nfailed, &aerr) != 0)
			return fail_alone(world, aerr.msg);
		*agreed = 1;
	}
	if (first >= 0) {
		if (rank == first && nfailed < n)
			err_prefix(&err, "rank %d", rank);
		return rank == first ? fail(TITAN_EXIT_USAGE, err.msg, 0) : TITAN_EXIT_USAGE;
	}
	*agreed = 0;
	mesh *m;
	if (mesh_create(world, &d, &m, &err) != 0)
		return fail_alone(world, err.msg);
	FILE *quiet = NULL;
	if (rank != 0 && !c->metrics.save_for_all_ranks && (quiet = fopen("/dev/null", "w")) == NULL)
		quiet = stderr;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESETHAND;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	int gpus = gpu_count();
	trainer_hooks h = {.stop = &stop_requested, .log = quiet != NULL ? quiet : stderr,
			   .color = metrics_use_color(STDERR_FILENO, c->metrics.disable_color_printing),
			   .threads = threads, .mesh = m,
			   .device = gpus > 0 ? comm_local_rank(world) % gpus : -1,
			   .backend = backend, .no_step_graph = no_step_graph};
	int rc = TITAN_EXIT_OK;
	if (trainer_run(c, &h, &err) != 0) {
		char own[32];
		int named = 0, r;
		snprintf(own, sizeof own, "rank %d: ", rank);
		/* a failure the ranks agreed on already names the rank it came from */
		if (sscanf(err.msg, "rank %d: %n", &r, &named) != 1)
			named = 0;
		if (n > 1 && strstr(err.msg, own) == NULL && !named)
			err_prefix(&err, "rank %d", rank);
		rc = fail_alone(world, err.msg);
	}
	if (quiet != NULL && quiet != stderr)
		fclose(quiet);
	mesh_free(m);
	return rc;
}

/* --world-size's bound: 2^20 ranks, past any job run (the planner walks the
 * ranks of each pipeline rank). */
#define MAX_WORLD_SIZE (1 << 20)

typedef struct plan_opts {
	int dry_run, json, print_schedule, world_size;
	uint64_t device_bytes;
} plan_opts;

/* --dry-run and --print-schedule: plan, print, exit. */
/* An encoder's config.json when the job names its folder (the planner's
 * defaults are T5-XXL's and CLIP-L's otherwise): 0, or -1 and err. */
static int encoder_shapes(const job_config *c, plan_flux_job *j, titan_err *err)
{
	char path[4096];
	if (c->flux.t5_encoder[0]) {
		snprintf(path, sizeof path, "%s/config.json", c->flux.t5_encoder);
		if (t5_config_read(&j->t5, path, err) != 0)
			return -1;
	}
	if (c->flux.clip_encoder[0]) {
		snprintf(path, sizeof path, "%s/config.json", c->flux.clip_encoder);
		if (clip_config_read(&j->clip, path, err) != 0)
			return -1;
	}
	if (c->flux.autoencoder_config[0] &&
	    flux_ae_config_read(&j->ae, c->flux.autoencoder_config, err) != 0)
		return -1;
	return 0;
}

/* --dry-run of a Flux job (lib/planner/flux.c): its memory per rank. */
static int plan_flux(const job_config *c, const plan_opts *o)
{
	titan_err err = {{0}};
	const flux_config *fc = flux_flavor(c->model.flavor);
	if (fc == NULL)
		return fail(TITAN_EXIT_USAGE, "model.flavor: not a Flux flavor", 0);
	if (o->json || o->print_schedule)
		return fail(TITAN_EXIT_USAGE, "--json and --print-schedule: a Flux plan is printed as "
			    "text (it has no pipeline)", 0);
	plan_flux_job j;
	planner_flux_defaults(&j, fc);
	int64_t rep = c->parallelism.data_parallel_replicate_degree;
	int64_t shard = c->parallelism.data_parallel_shard_degree;
	int64_t cp = c->parallelism.context_parallel_degree;
	j.dp_replicate = (int)(rep > 0 ? rep : 1);
	j.cp = (int)(cp > 0 ? cp : 1);
	j.dp_shard = (int)(shard > 0 ? shard : o->world_size / (j.dp_replicate * j.cp));
	j.local_batch = c->training.local_batch_size;
	j.img_size = c->flux.img_size;
	j.t5_len = c->flux.max_t5_encoding_len;
	j.ac_full = strcmp(c->activation_checkpoint.mode, "full") == 0;
	j.device_bytes = o->device_bytes ? o->device_bytes : planner_local_memory();
	plan_flux_report r;
	if (encoder_shapes(c, &j, &err) != 0 || planner_flux_run(&j, &r, &err) != 0)
		return fail(TITAN_EXIT_USAGE, err.msg, 0);
	return planner_flux_print(&r, stdout) != 0 ? fail(TITAN_EXIT_FAIL, "writing the plan failed", 0)
						  : TITAN_EXIT_OK;
}

static int plan_only(const job_config *c, const plan_opts *o)
{
	titan_err err = {{0}};
	plan_report r;
	int world = o->world_size;
	if (strcmp(c->model.name, "flux") == 0)
		return plan_flux(c, o);
	if (o->print_schedule) {
		pp_schedule *s = NULL;
		if (planner_schedule(c, world, &s, &err) != 0)
			return fail(TITAN_EXIT_USAGE, err.msg, 0);
		int rc = s ? pp_schedule_print(s, stdout, &err) : 0;
		if (s == NULL)
			printf("no pipeline: parallelism.pipeline_parallel_degree is 1\n");
		pp_schedule_free(s);
		return rc ? fail(TITAN_EXIT_FAIL, err.msg, 0) : TITAN_EXIT_OK;
	}
	if (planner_run(c, world, o->device_bytes ? o->device_bytes : planner_local_memory(), &r, &err))
		return fail(TITAN_EXIT_USAGE, err.msg, 0);
	int rc = o->json ? planner_print_json(&r, stdout, &err) : planner_print(&r, stdout);
	planner_report_free(&r);
	return rc ? fail(TITAN_EXIT_FAIL, "writing the plan failed", 0) : TITAN_EXIT_OK;
}

/* --job.print_config (0.3.0's --debug.print_config): a 0.3.0 run prints its
 * Trainer.Config as 0.3.0 logs it, a 0.2.2 run its TOML. */
static int print_config(const job_config *c)
{
	if (!c->follows_030) {
		config_print(c, stdout);
		return TITAN_EXIT_OK;
	}
	int64_t vocab = 0; /* Flux's MSELoss has no vocabulary */
	if (strcmp(c->model.name, "flux") == 0) {
		if (flux_flavor(c->model.flavor) == NULL)
			return fail(TITAN_EXIT_USAGE, "model.flavor: not a Flux flavor", 0);
	} else {
		const model_family *f = model_family_find(c->model.name);
		const llama_args *a = f != NULL ? model_family_flavor(f, c->model.flavor) : NULL;
		if (a == NULL)
			return fail(TITAN_EXIT_USAGE, "model.flavor: not a flavor of the family", 0);
		vocab = a->vocab_size;
	}
	return tt030_print_config(c, vocab, stdout) == 0 ? TITAN_EXIT_OK : TITAN_EXIT_FAIL;
}

/* 0.3.0's Decoder.update_from_config: a run's sequence fits the RoPE cache
 * the flavor builds (its max_seq_len); 0.2.2 builds it for the run's. */
static int check_rope_length(const job_config *c, titan_err *err)
{
	const model_family *f = model_family_find(c->model.name);
	const llama_args *a = f != NULL ? model_family_flavor(f, c->model.flavor) : NULL;
	if (!c->follows_030 || a == NULL || c->training.seq_len <= a->max_seq_len)
		return 0;
	return err_set(err, "training.seq_len %lld: exceeds the RoPE maximum sequence length "
		       "%d of flavor %s (torchtitan 0.3.0 refuses it)",
		       (long long)c->training.seq_len, a->max_seq_len, c->model.flavor);
}

/* --flavor NAME: a flavor of the configuration's model, or refused before
 * anything starts. */
static int set_flavor(job_config *c, const char *name, titan_err *err)
{
	const model_family *f = model_family_find(c->model.name);
	int known = strcmp(c->model.name, "flux") == 0 ? flux_flavor(name) != NULL
			  : f != NULL && model_family_flavor(f, name) != NULL;
	if (!known)
		return err_set(err, "--flavor %s: not a flavor of model.name \"%s\" (see "
			       "titan-train --list-flavors)", name, c->model.name);
	return config_set(c, "model.flavor", name, err);
}

/* Everything after the configuration is read; returns the exit status. */
static int run(job_config *c, int nrest, char **rest)
{
	titan_err err = {{0}};
	int threads = 0, backend = TRAINER_BACKEND_AUTO, no_step_graph = 0, sample = 0;
	plan_opts po = {0};
	for (int i = 1; i < nrest; i++) {
		if (strcmp(rest[i], "--list-keys") == 0) {
			config_list_keys(stdout);
			return TITAN_EXIT_OK;
		} else if (strcmp(rest[i], "--list-030-paths") == 0) {
			return tt030_list_paths(stdout) == 0 ? TITAN_EXIT_OK : TITAN_EXIT_FAIL;
		} else if (strcmp(rest[i], "--list-030-presets") == 0) {
			return tt030_list_presets(stdout) == 0 ? TITAN_EXIT_OK : TITAN_EXIT_FAIL;
		} else if (strcmp(rest[i], "--list-flavors") == 0) {
			trainer_list_flavors(stdout);
			fputc('\n', stdout);
			flux_print_flavors(stdout);
			return TITAN_EXIT_OK;
		} else if (strcmp(rest[i], "--read-events") == 0 && i + 1 < nrest) {
			if (tb_read_file(rest[i + 1], 1, print_event, NULL, &err) != 0)
				return fail(TITAN_EXIT_FAIL, err.msg, 0);
			return TITAN_EXIT_OK;
		} else if (strcmp(rest[i], "--plot-loss") == 0 && i + 1 < nrest) {
			const char *png = i + 3 < nrest && strcmp(rest[i + 2], "--png") == 0 ? rest[i + 3] : NULL;
			return plot_loss(rest[i + 1], png);
		} else if (strcmp(rest[i], "--flavor") == 0 && i + 1 < nrest) {
			if (set_flavor(c, rest[++i], &err) != 0)
				return fail(TITAN_EXIT_USAGE, err.msg, 1);
		} else if (strcmp(rest[i], "--threads") == 0 && i + 1 < nrest) {
			threads = atoi(rest[++i]);
		} else if (strcmp(rest[i], "--backend") == 0 && i + 1 < nrest) {
			const char *b = rest[++i];
			if (strcmp(b, "auto") == 0)
				backend = TRAINER_BACKEND_AUTO;
			else if (strcmp(b, "cpu") == 0)
				backend = TRAINER_BACKEND_CPU;
			else if (strcmp(b, "cuda") == 0)
				backend = TRAINER_BACKEND_CUDA;
			else
				return fail(TITAN_EXIT_USAGE, "--backend: expected cpu, cuda or auto", 1);
		} else if (strcmp(rest[i], "--no-step-graph") == 0) {
			no_step_graph = 1;
		} else if (strcmp(rest[i], "--sample") == 0) {
			sample = 1;
		} else if (strcmp(rest[i], "--dry-run") == 0) {
			po.dry_run = 1;
		} else if (strcmp(rest[i], "--json") == 0) {
			po.json = 1;
		} else if (strcmp(rest[i], "--print-schedule") == 0) {
			po.print_schedule = 1;
		} else if (strcmp(rest[i], "--world-size") == 0 && i + 1 < nrest) {
			char *end, msg[160];
			const char *v = rest[++i];
			errno = 0;
			long w = strtol(v, &end, 10);
			if (end == v || *end != '\0' || errno != 0 || w < 1 || w > MAX_WORLD_SIZE) {
				snprintf(msg, sizeof msg, "--world-size '%s': expected a number of ranks "
					 "from 1 to %d", v, MAX_WORLD_SIZE);
				return fail(TITAN_EXIT_USAGE, msg, 1);
			}
			po.world_size = (int)w;
		} else if (strcmp(rest[i], "--device-memory") == 0 && i + 1 < nrest) {
			if (planner_parse_bytes(rest[++i], &po.device_bytes, &err) != 0)
				return fail(TITAN_EXIT_USAGE, err.msg, 1);
		} else {
			char msg[300];
			snprintf(msg, sizeof msg, "unknown option '%s'", rest[i]);
			return fail(TITAN_EXIT_USAGE, msg, 1);
		}
	}
	if (config_validate(c, &err) != 0)
		return fail(TITAN_EXIT_USAGE, err.msg, 0);
	if (c->job.print_config)
		return print_config(c);
	if (check_rope_length(c, &err) != 0)
		return fail(TITAN_EXIT_USAGE, err.msg, 0);
	if ((po.json || po.world_size || po.device_bytes) && !po.dry_run && !po.print_schedule)
		return fail(TITAN_EXIT_USAGE, "--json, --world-size and --device-memory go with "
			    "--dry-run", 1);
	/* MPI starts here: a world of one when no launcher started us. */
	comm *world;
	if (comm_init(NULL, NULL, (double)c->comm.init_timeout_seconds, &world, &err) != 0)
		return fail(TITAN_EXIT_FAIL, err.msg, 0);
	if (po.dry_run || po.print_schedule) {
		/* a plan is rank 0's to print, for --world-size ranks or the launcher's */
		if (po.world_size == 0)
			po.world_size = comm_size(world);
		int rc = comm_rank(world) == 0 ? plan_only(c, &po) : TITAN_EXIT_OK;
		comm_finalize(world);
		return rc;
	}
	if (c->job.config_file == NULL && !c->follows_030 && comm_rank(world) == 0)
		fprintf(stderr, "titan-train: no --config given; using torchtitan's defaults\n");
	if (sample && strcmp(c->model.name, "flux") != 0) {
		comm_finalize(world);
		return fail(TITAN_EXIT_USAGE, "--sample: images come from a Flux model "
			    "(--module flux)", 1);
	}
	if (strcmp(c->model.name, "flux") == 0) { /* its own trainer: lib/fluxtrain */
		int gpus = gpu_count();
		fluxtrain_opts fo = {.threads = threads, .sample = sample, .backend = backend,
				     .device = gpus > 0 ? comm_local_rank(world) % gpus : -1};
		int frc = fluxtrain_run(c, world, &fo, &err);
		if (frc != 0)
			fprintf(stderr, "titan-train: %s\n", err.msg);
		if (frc != 0 && comm_size(world) > 1)
			comm_abort(world, TITAN_EXIT_FAIL);
		comm_finalize(world);
		return frc != 0 ? TITAN_EXIT_FAIL : TITAN_EXIT_OK;
	}
	int agreed = 0;
	int rc = run_ranks(c, world, threads, backend, no_step_graph, &agreed);
	/* A rank that failed alone may leave the others waiting on it (in a
	 * collective, or in MPI_Finalize, which waits for every rank): end them. */
	if (rc != TITAN_EXIT_OK && !agreed && comm_size(world) > 1)
		comm_abort(world, rc);
	comm_finalize(world);
	return rc;
}

int main(int argc, char **argv)
{
	titan_set_progname("titan-train");
	/* Non-config options are few; look at them before reading the config so
	 * that --help works whatever else is on the line. */
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			usage(stdout);
			return TITAN_EXIT_OK;
		}
		if (strcmp(argv[i], "--version") == 0) {
			printf("titan-train %s\n", TITAN_VERSION);
			return TITAN_EXIT_OK;
		}
	}
	job_config c;
	memset(&c, 0, sizeof c);
	titan_err err = {{0}};
	char **rest = calloc((size_t)argc + 1, sizeof *rest);
	int nrest = 0, rc;
	const char *module, *preset;
	char named[1024];
	if (named_config(&argc, argv, &module, &preset, named, sizeof named) != 0)
		rc = TITAN_EXIT_USAGE;
	else if (rest == NULL || config_defaults(&c, &err) != 0)
		rc = fail(TITAN_EXIT_FAIL, "out of memory", 0);
	else if (!preset && mixed_030(argc, argv, &err))
		rc = fail(TITAN_EXIT_USAGE, err.msg, 1);
	else if (preset ? tt030_config(&c, module, preset, argc, argv, &nrest, rest, &err) != 0
			: config_from_args(&c, argc, argv, &nrest, rest, &err) != 0)
		rc = fail(TITAN_EXIT_USAGE, err.msg, 1);
	else if (module != NULL && strcmp(module, c.model.name) != 0) {
		fprintf(stderr, "titan-train: --module %s: %s is a model.name = \"%s\" config\n",
			module, c.job.config_file ? c.job.config_file : "the default", c.model.name);
		rc = TITAN_EXIT_USAGE;
	} else {
		rc = cli_stdout_status(run(&c, nrest, rest)); /* listings: > /dev/full fails */
	}
	config_free(&c);
	free(rest);
	return rc;
}
