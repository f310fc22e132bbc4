#include "trainer/trainer.h"
#include "trainer/convert.h"
#include "trainer/groups.h"
#include "trainer/precision.h"
#include "trainer/state.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cuda.h"
#include "core/afile.h"
#include "dcp/dcp.h"
#include "gpu/gpu.h"
#include "loader/loader.h"
#include "metrics/metrics.h"
#include "model/model.h"
#include "optim/optim.h"
#include "plan/plan.h"
#include "planner/planner.h"
#include "prof/prof.h"
#include "shard/shard.h"
#include "tb/tb.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double trainer_wall_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int is_dir(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A folder of the run, key's value sub, joined to job.dump_folder as
 * torchtitan's os.path.join does: an absolute sub is used as given (a
 * checkpoint folder on another filesystem), a relative one goes under the
 * dump folder. */
int trainer_under_dump(const job_config *c, const char *key, const char *sub, char *buf,
		       size_t n, titan_err *err)
{
	int len = sub[0] == '/' ? snprintf(buf, n, "%s", sub)
				: snprintf(buf, n, "%s/%s", c->job.dump_folder, sub);
	if (len < 0 || (size_t)len >= n)
		return err_set(err, "%s \"%s\" under job.dump_folder \"%s\": longer than %zu bytes",
			       key, sub, c->job.dump_folder, n - 1);
	return 0;
}

int trainer_tb_dir(const job_config *c, const char *suffix, char *buf, size_t n, titan_err *err)
{
	char stamp[32], tb[1024];
	time_t t = time(NULL);
	struct tm tm;
	localtime_r(&t, &tm);
	strftime(stamp, sizeof stamp, "%Y%m%d-%H%M", &tm);
	if (trainer_under_dump(c, "metrics.save_tb_folder", c->metrics.save_tb_folder, tb, sizeof tb,
			       err) != 0)
		return -1;
	int len = snprintf(buf, n, "%s/%s%s", tb, stamp, suffix);
	if (len < 0 || (size_t)len >= n)
		return err_set(err, "metrics.save_tb_folder \"%s\": longer than %zu bytes", tb, n - 1);
	return 0;
}

int trainer_dataset_dir(const job_config *c, char *buf, size_t n, titan_err *err)
{
	if (c->training.dataset_path != NULL) {
		snprintf(buf, n, "%s", c->training.dataset_path);
		if (!is_dir(buf))
			return err_set(err, "training.dataset_path: %s: no such folder (make one with "
				       "titan-shard --out %s)", buf, buf);
		return 0;
	}
	if (trainer_under_dump(c, "training.dataset", c->training.dataset, buf, n, err) != 0)
		return -1;
	if (!is_dir(buf))
		return err_set(err, "training.dataset \"%s\": no folder %s; set training.dataset_path "
			       "to a titan-shard folder", c->training.dataset, buf);
	return 0;
}

/* The data's ids must be rows of the embedding. */
static int trainer_check_vocab(const char *dir, uint32_t data_vocab, const llama_args *a,
			       titan_err *err)
{
	if (data_vocab <= (uint32_t)a->vocab_size)
		return 0;
	return err_set(err, "%s holds ids of a %u-token vocabulary, more than the %d of model.flavor "
		       "\"%s\" (the embedding has vocab_size rows, as torchtitan's): tokenize with a "
		       "smaller vocabulary or pick a flavor that fits", dir, data_vocab,
		       a->vocab_size, a->name);
}

void trainer_list_flavors(FILE *out)
{
	const model_family *f;
	for (int i = 0; (f = model_family_at(i)) != NULL; i++) {
		fprintf(out, "%smodel.name = \"%s\": %s\n", i ? "\n" : "", f->name, f->description);
		fprintf(out, "%-20s %6s %6s %5s %8s %8s %6s %7s %7s %16s %16s\n", "flavor", "dim",
			"layers", "heads", "kv_heads", "head_dim", "ffn", "experts", "vocab",
			"active", "parameters");
		for (const llama_args *a = f->flavors; a->name != NULL; a++) {
			char p[48], act[48], ex[24] = "-";
			metrics_commas(p, sizeof p, flavor_param_count(a));
			metrics_commas(act, sizeof act, flavor_active_params(a));
			if (a->moe.experts > 0)
				snprintf(ex, sizeof ex, "%d/%d", a->moe.top_k, a->moe.experts);
			fprintf(out, "%-20s %6d %6d %5d %8d %8d %6d %7s %7d %16s %16s\n", a->name,
				a->dim, a->n_layers, a->n_heads, a->n_kv_heads, flavor_head_dim(a),
				a->moe.experts > 0 ? a->moe.inter_dim : flavor_ffn_hidden(a), ex,
				a->vocab_size, act, p);
		}
	}
}

/* Everything the job holds; freed by job_close. */
typedef struct job {
	const job_config *c;
	const trainer_hooks *h;
	const llama_args *args; /* model.name's flavor model.flavor */
	FILE *log;
	char data_dir[1024], ckpt_dir[1024];
	backend *be;
	plan *p;                /* what this rank holds and does: model, shards, optimizer */
	const model *gm;        /* the global model's table (plan_global_model) */
	lr_schedule sched;
	loader *train;
	int accum;              /* micro-batches per step */
	int dp, dp_rank;        /* the batch dimension: data parallel ranks, this one's */
	int non_dp;             /* cp x tp x pp: ranks that share a batch (throughput per rank) */
	int cp;                 /* context parallel ranks: each computes on its chunks */
	int rank, world;
	int64_t B, T;
	int32_t *inputs, *labels; /* (accum, B, T) */
	int32_t *cp_inputs, *cp_labels; /* (accum, B, T / cp): this rank's chunks */
	int32_t *positions;     /* (accum, B, T) per-document positions (0.3.0), or NULL */
	tb_writer tb;
	int tb_open;
	metrics_jsonl jl;
	int jl_open;
	double flops_per_token, peak_flops; /* flops_per_token: torchtitan's count */
	double step_flops;      /* the last step's work on this rank's batch (model_train_flops) */
	gpu_info gpu;           /* the CUDA backend's device (name "" on the CPU) */
	int64_t step, ntokens_seen; /* ntokens_seen: this rank's (torchtitan's train_state) */
	double lr, max_loss;
	int prof;               /* the profiler is started */
	tstate_saver *pending;  /* async checkpoint in flight */
	int64_t pending_step;
	char pending_dir[1100];
	int lock_fd;            /* job.dump_folder, locked for this run (-1: not yet) */
	/* pipeline parallelism (pp > 1): the plan's engine runs this schedule */
	int pp, pp_mb;          /* pipeline ranks; micro-batches of a schedule step */
	pp_split pp_split;
	pp_schedule *pp_sched;
	int8_t *pp_hold;        /* the units of this rank's stages */
	double pp_run_s, pp_busy_s; /* forward-backward time and compute in it, steps after
	                               the run's first (the measured bubble) */
	int graph_told;         /* the step graph's capture (1) or failure (2) logged */
	int loader030_told;     /* why the data position has no 0.3.0 equivalent, logged */
} job;

static void job_close(job *j)
{
	titan_err e;
	/* a save left in flight by a failure: this rank's files are finished; only
	 * a world of one commits them (the other ranks may be gone) */
	if (j->pending != NULL && (tstate_save_wait(j->pending, &e) != 0 ||
				   (j->world == 1 && dcp_save_commit(j->pending_dir, 1, &e) != 0)))
		titan_warn("%s", e.msg);
	if (j->lock_fd >= 0)
		close(j->lock_fd);
	if (j->tb_open)
		tb_close(&j->tb, NULL);
	if (j->jl_open)
		metrics_jsonl_close(&j->jl, NULL);
	if (j->train != NULL)
		loader_close(j->train);
	if (j->prof)
		prof_stop();
	plan_free(j->p);
	pp_schedule_free(j->pp_sched);
	pp_split_free(&j->pp_split);
	free(j->pp_hold);
	if (j->h != NULL && j->h->mesh != NULL)
		mesh_drop_device_comms(j->h->mesh); /* they wait on the backend's stream */
	if (j->be != NULL)
		backend_free(j->be);
	free(j->inputs);
	free(j->labels);
	free(j->cp_inputs);
	free(j->cp_labels);
	free(j->positions);
}

static uint64_t seed_of(const job_config *c)
{
	return c->debug.seed_set ? (uint64_t)c->debug.seed : 0;
}

/* Tell what is configured but has no effect here, rather than ignore it. */
static void warn_inert(job *j)
{
	const job_config *c = j->c;
	if (c->profiling.enable_memory_snapshot)
		titan_warn("profiling.enable_memory_snapshot: not available; no snapshots are written");
}

/* torchtitan's precision mode for this job's mesh (one process, or replication
 * alone: autocast with training.mixed_precision_param; FSDP's policy when
 * sharding), logged; the plan puts it on the model. */
static int choose_precision(job *j, train_prec *p, titan_err *err)
{
	prec_degrees d = {1, 1, 1, 1, 1};
	if (j->h->mesh != NULL) {
		const mesh_degrees *md = &j->h->mesh->d;
		d = (prec_degrees){(int)md->dp_replicate, (int)md->dp_shard, (int)md->tp,
				   (int)md->pp, (int)md->cp};
	}
	if (train_prec_choose(j->c, &d, p, err) != 0)
		return -1;
	metrics_log(j->log, "%s", p->line);
	metrics_log(j->log, "Precision: %s", p->detail);
	return 0;
}

/* The mesh's layout for this job: data parallel ranks read their own rows
 * of every batch (loader_opts.dp_rank), the others share them. */
static void read_layout(job *j)
{
	const mesh *m = j->h->mesh;
	j->dp = m != NULL ? m->size[MESH_BATCH] : 1;
	j->dp_rank = m != NULL ? m->coord[MESH_BATCH] : 0;
	j->non_dp = m != NULL ? m->size[MESH_CP] * m->size[MESH_TP] * m->size[MESH_PP] : 1;
	j->pp = m != NULL ? m->size[MESH_PP] : 1;
	j->cp = m != NULL ? m->size[MESH_CP] : 1;
	j->rank = m != NULL ? m->rank : 0;
	j->world = m != NULL ? m->world_size : 1;
}

static int open_data(job *j, titan_err *err)
{
	const job_config *c = j->c;
	if (trainer_dataset_dir(c, j->data_dir, sizeof j->data_dir, err) != 0)
		return -1;
	j->B = c->training.local_batch_size;
	j->T = c->training.seq_len;
	int64_t global = c->training.global_batch_size == -1 ? j->B * j->dp
							     : c->training.global_batch_size;
	if (global <= 0 || global % (j->B * j->dp) != 0)
		return err_set(err, "training.global_batch_size %lld is not a multiple of "
			       "local_batch_size %lld x data parallel degree %d", (long long)global,
			       (long long)j->B, j->dp);
	j->accum = (int)(global / (j->B * j->dp));
	if (c->training.sft && !c->follows_030)
		return err_set(err, "training.sft: SFT chat data is torchtitan 0.3.0's "
			       "ChatDataLoader, whose block-causal attention needs a 0.3.0 run "
			       "(--module and --config)");
	loader_opts o = {.dir = j->data_dir, .split = SHARD_TRAIN, .seq_len = j->T,
			 .local_batch = j->B, .dp_rank = j->dp_rank, .dp_degree = j->dp,
			 .seed = seed_of(c), .shuffle = 0, .prefetch = 2,
			 .documents = c->follows_030 && !c->training.sft, .sft = c->training.sft};
	j->train = loader_open(&o, err);
	if (j->train == NULL)
		return err_prefix(err, "training data");
	size_t n = (size_t)(j->accum * j->B * j->T);
	j->inputs = malloc(n * sizeof(int32_t));
	j->labels = malloc(n * sizeof(int32_t));
	j->cp_inputs = malloc(n / (size_t)j->cp * sizeof(int32_t));
	j->cp_labels = malloc(n / (size_t)j->cp * sizeof(int32_t));
	if (c->follows_030 && !(j->positions = malloc(n * sizeof(int32_t))))
		return err_set(err, "out of memory");
	if (j->inputs == NULL || j->labels == NULL || j->cp_inputs == NULL || j->cp_labels == NULL)
		return err_set(err, "out of memory");
	return 0;
}

/* model.name names a family of the registry, model.flavor one of its flavors. */
static int find_flavor(job *j, titan_err *err)
{
	const job_config *c = j->c;
	const model_family *f = model_family_find(c->model.name);
	if (f == NULL)
		return err_set(err, "model.name \"%s\": no such model family (see titan-train "
			       "--list-flavors)", c->model.name);
	j->args = model_family_flavor(f, c->model.flavor);
	if (j->args == NULL)
		return err_set(err, "model.flavor \"%s\": not a flavor of model.name \"%s\" (see "
			       "titan-train --list-flavors)", c->model.flavor, c->model.name);
	return 0;
}

/* torchtitan's pipeline_llm: the stage split and the schedule (refused with
 * torchtitan's messages before any work), and the units of this rank's
 * stages. */
static int build_pipeline(job *j, titan_err *err)
{
	const job_config *c = j->c;
	if (j->pp == 1)
		return 0;
	int L = j->args->n_layers, r = j->h->mesh->coord[MESH_PP];
	if (planner_pipeline(c, j->pp, L, &j->pp_split, &j->pp_sched, &j->pp_mb, err) != 0)
		return -1;
	if (!(j->pp_hold = malloc((size_t)L + 2)))
		return err_set(err, "out of memory");
	plan_pipeline_hold(&j->pp_split, r, L + 2, j->pp_hold);
	if (j->pp_mb < j->pp_split.n_stages)
		titan_warn("Number of microbatches (%d) is less than the total number of stages (%d) "
			   "which may result in a bubble in the pipeline.", j->pp_mb, j->pp_split.n_stages);
	for (int s = 0; s < j->pp_split.n_stages; s++)
		if (j->pp_split.stage_rank[s] == r)
			metrics_log(j->log, "PP rank %d is building stage_idx %d with units %d..%d "
				    "(0: tok_embeddings, %d: norm and output)", r, s, j->pp_split.u0[s],
				    j->pp_split.u1[s], L + 1);
	metrics_log(j->log, "Using pipeline schedule %s with %d microbatches and %d stages.",
		    j->pp_sched->name, j->pp_mb, j->pp_split.n_stages);
	return 0;
}

#define GIB (1024.0 * 1024.0 * 1024.0)

/* TITAN_COMM_ALWAYS=1: FSDP's collectives through the communicators even in a
 * world of one (plan_opts.comm_always; on a GPU over NCCL): a check of the
 * comm path on one device, titan-train(1). */
static int comm_always(void)
{
	const char *v = getenv("TITAN_COMM_ALWAYS");
	return v != NULL && strcmp(v, "1") == 0;
}

/* NCCL allocates its buffers (per communicator, channel and peer) as its
 * collectives first connect, after the arena took the device: leave them
 * this much besides what the CUDA libraries keep. */
#define NCCL_RESERVE_BYTES ((size_t)2 << 30)

int trainer_nccl_arena(int dev, struct backend_cuda_opts *o, titan_err *err)
{
	size_t free_b, total_b, keep = BACKEND_CUDA_RESERVE_BYTES + NCCL_RESERVE_BYTES;
	if (gpu_set_device(dev, err) != 0 || gpu_mem_info(&free_b, &total_b, err) != 0)
		return -1;
	if (free_b <= 2 * keep)
		return err_set(err, "%zu bytes free on device %d: too little for an arena beside "
			       "NCCL's buffers", free_b, dev);
	o->arena_bytes = free_b - keep;
	return 0;
}

/* The backend of --backend (trainer_hooks.backend): the CPU's, or the CUDA
 * backend on the process's device with one arena of all its free memory
 * (less what the CUDA libraries keep for themselves). */
static int open_backend(job *j, titan_err *err)
{
	int want = j->h->backend, dev = j->h->device;
	if (want == TRAINER_BACKEND_AUTO)
		want = dev >= 0 ? TRAINER_BACKEND_CUDA : TRAINER_BACKEND_CPU;
	if (want == TRAINER_BACKEND_CPU) {
		if (!(j->be = backend_cpu_create(j->h->threads, err)))
			return -1;
		char how[384];
		backend_cpu_describe(how, sizeof how);
		metrics_log(j->log, "CPU backend: %s", how);
		return 0;
	}
	if (dev < 0)
		return err_set(err, "--backend cuda: no GPU for this process (%s)", gpu_why_none());
	const mesh *m = j->h->mesh;
	/* lib/pp's engine posts lone sends and receives: on one NCCL stream per
	 * communicator two stages would wait on each other (1F1B) */
	if (m != NULL && m->size[MESH_PP] > 1)
		return err_set(err, "--backend cuda with pipeline_parallel_degree %d: the pipeline's "
			       "sends and receives do not run over NCCL yet; use --backend cpu",
			       m->size[MESH_PP]);
	int nccl = m != NULL && (m->world_size > 1 || comm_always());
	backend_cuda_opts o = {.device = dev};
	if (gpu_device_info(dev, &j->gpu, err) != 0 || (nccl && trainer_nccl_arena(dev, &o, err) != 0) ||
	    !(j->be = backend_cuda_create(&o, err)))
		return err_prefix(err, "--backend cuda");
	/* The plans' tensors go over NCCL on the backend's stream, one
	 * communicator per mesh dimension; their host scalars stay on MPI. */
	if (nccl && mesh_use_nccl(j->h->mesh, dev, backend_cuda_stream(j->be), err) != 0)
		return err_prefix(err, "--backend cuda: NCCL");
	if (nccl)
		metrics_log(j->log, "Collectives over NCCL: a communicator per mesh dimension on "
			    "device %d, host scalars over MPI", dev);
	return 0;
}

/* The collectives of the run on the device communicators (NCCL), when the
 * mesh has them: what shows that a GPU run went through NCCL. */
static void log_device_collectives(job *j)
{
	const mesh *m = j->h->mesh;
	uint64_t n = 0;
	for (int k = 0; m != NULL && k < MESH_DIM_COUNT; k++)
		for (int op = 0; m->dims[k] != m->host[k] && op < COMM_OP_COUNT; op++)
			n += comm_get_stats(m->dims[k])->calls[op];
	if (m != NULL && m->dims[MESH_FSDP] != m->host[MESH_FSDP])
		metrics_log(j->log, "NCCL collectives: %llu (rank %d)", (unsigned long long)n, j->rank);
}

/* The log's memory: the CPU process's resident peak, or on a GPU the arena's
 * real peak (titan's whole device memory in a step) and its share of the
 * device, as torchtitan reports max_reserved. */
static void job_memory(const job *j, double *gib, double *pct)
{
	if (!j->gpu.name[0]) {
		metrics_cpu_memory(gib, pct);
		return;
	}
	*gib = (double)backend_cuda_high_water(j->be) / GIB;
	*pct = j->gpu.mem_bytes ? 100.0 * *gib * GIB / (double)j->gpu.mem_bytes : 0;
}

/* compile.enable: torchtitan compiles each block ("model") and the loss
 * ("loss"); titan runs its fused ops there (model_set_fusion). */
static int apply_compile(job *j, titan_err *err)
{
	const job_config *c = j->c;
	unsigned flags = 0;
	/* 0.3.0's Llama 3 and Qwen3 fuse q, k, v into qkv_linear.wqkv: a Float8
	 * tensorwise cast scales the fused weight, and the fused output's
	 * gradient, as one tensor, which titan's one q, k, v product does */
	const char *recipe = c->float8.recipe_name;
	if (c->follows_030 && !c->qkv_apart030 &&
	    cfg_strlist_has(&c->model.converters, "quantize.linear.float8") &&
	    (recipe == NULL || strcmp(recipe, "tensorwise") == 0) &&
	    (j->h->mesh == NULL || j->h->mesh->size[MESH_TP] == 1)) {
		flags |= MODEL_FUSE_BLOCKS;
		metrics_log(j->log, "Float8 tensorwise on 0.3.0's fused wqkv: q, k and v run as one "
			    "product, cast with one scale");
	}
	if (!c->compile.enable)
		return flags ? model_set_fusion(plan_model(j->p), flags, err) : 0;
	for (int i = 0; i < c->compile.components.n; i++) {
		const char *s = c->compile.components.v[i];
		if (strcmp(s, "model") == 0)
			flags |= MODEL_FUSE_BLOCKS;
		else if (strcmp(s, "loss") == 0)
			flags |= MODEL_FUSE_LOSS;
		else
			return err_set(err, "compile.components: \"%s\" is not \"model\" or \"loss\"", s);
	}
	if (flags & MODEL_FUSE_BLOCKS)
		metrics_log(j->log, "Compiling each TransformerBlock: fused q, k, v product with "
			    "RoPE, norms' backward fused with the residual gradient");
	if (flags & MODEL_FUSE_LOSS)
		metrics_log(j->log, "Compiling the loss function: output projection and "
			    "cross-entropy fused over the logits' chunks");
	return model_set_fusion(plan_model(j->p), flags, err);
}

/* compile.enable's whole step (plan_set_graph): on the CUDA backend captured
 * once as a CUDA graph and replayed; on the CPU the same step, queued without
 * a wait.  Where the plan's step cannot run so, the log says why, once, and
 * the steps run op by op. */
static int apply_step_graph(job *j, titan_err *err)
{
	if (!j->c->compile.enable || j->h->no_step_graph)
		return 0;
	const char *why = plan_graph_refusal(j->p);
	if (why) {
		metrics_log(j->log, "Compiling the whole step: not done, steps run op by op: %s", why);
		return 0;
	}
	metrics_log(j->log, "Compiling the whole step (forward, backward, grad norm, clipping, "
		    "AdamW): %s", backend_is_cuda(j->be)
		    ? "one CUDA graph, captured at the second step and replayed"
		    : "queued without waiting for the backend (no CUDA graph on the CPU)");
	return plan_set_graph(j->p, 1, err);
}

/* The step graph's news, once each: its capture, or why capturing failed. */
static void note_step_graph(job *j)
{
	const char *why = plan_graph_failure(j->p);
	if (why && !(j->graph_told & 2)) {
		metrics_log(j->log, "Step graph: capturing failed, steps run uncaptured: %s", why);
		j->graph_told |= 2;
	} else if (!why && plan_graph_captures(j->p) > 0 && !(j->graph_told & 1)) {
		metrics_log(j->log, "Step graph: step %lld captured as one CUDA graph, replayed from "
			    "then on", (long long)j->step);
		j->graph_told |= 1;
	}
}

/* 0.3.0's ChunkedLossWrapper runs the output projection on num_chunks
 * chunks of the sequence: with a Float8 output projection each chunk has
 * its own scales, so titan runs the same chunks (without Float8 the chunks
 * change nothing but the order of the loss's sums). */
static int seq_chunks(job *j, titan_err *err)
{
	const job_config *c = j->c;
	if (!c->follows_030 || !c->loss030.chunked ||
	    !cfg_strlist_has(&c->model.converters, "quantize.linear.float8") ||
	    (j->h->mesh != NULL && j->h->mesh->size[MESH_TP] > 1))
		return 0;
	int k = c->loss030.num_chunks > 0 ? (int)c->loss030.num_chunks : 8;
	metrics_log(j->log, "Float8 output projection under ChunkedLossWrapper: %d chunks of the "
		    "sequence, each cast with its own scales", k);
	return model_set_seq_chunks(plan_model(j->p), k, err);
}

/* torchtitan's parallelize_llama on this rank: the plan (the model with its
 * tensor-parallel shapes, FSDP's shards, the optimizer over them), each rank
 * drawing its own shards of torchtitan's initial weights. */
static int build_plan(job *j, titan_err *err)
{
	const job_config *c = j->c;
	llama_args fa = *j->args;
	const llama_args *a = &fa;
	fa.moe.force_balance = c->debug.moe_force_load_balance; /* MoEArgs' debug switch */
	fa.mtp_layers = (int)c->model.num_mtp_layers; /* 0.3.0's model_registry argument */
	fa.mtp_scale = c->model.mtp_scale;            /* and its MTPLoss */
	fa.lora_rank = c->lora030.rank;               /* the preset's LoRAConverter */
	fa.lora_alpha = c->lora030.alpha;
	if (fa.lora_rank > 0 && (fa.mla.kv_lora_rank > 0 || (j->h->mesh != NULL &&
							     j->h->mesh->size[MESH_TP] > 1)))
		return err_set(err, "LoRA (preset %s): built for grouped-query attention's wo "
			       "without tensor parallelism (the adapters' TP sharding is not)",
			       c->preset030);
	if (fa.lora_rank > 0) { /* 0.3.0's LoRAConverter's lines for its preset */
		metrics_log(j->log, "LoRA training active with rank=%d, alpha=%.1f, target_modules="
			    "['wkv', 'wo', 'wq']", fa.lora_rank, fa.lora_alpha);
		metrics_log(j->log, "LoRA target_modules ['wkv', 'wq'] did not match any "
			    "Linear.Config in the model config tree.");
	}
	/* torchtitan's update_from_config: the model is built for the training
	 * sequence (DeepSeek V3's YaRN applies only beyond its original 4096) */
	fa.max_seq_len = (int)c->training.seq_len;
	/* 0.3.0 builds its RoPE cache for the flavor's length whatever the run's:
	 * DeepSeek V3's YaRN (and its softmax mscale) apply at every length */
	if (c->follows_030) {
		fa.rope.beyond_orig = 0;
		/* and its final norm is RMSNorm.Config's default eps 1e-5 (0.2.2's
		 * DeepSeek V3 left nn.RMSNorm's, float32's epsilon) */
		fa.final_norm_eps = 0;
	}
	/* torchtitan sizes the embedding and the output by the flavor's
	 * vocab_size, not by the tokenizer's: checkpoints then cross both ways. */
	int vocab = a->vocab_size;
	if (c->loss030.global_vocab_size > 0 && c->loss030.global_vocab_size != vocab)
		return err_set(err, "loss.loss_fn.global_vocab_size %lld: the model's vocabulary is "
			       "%d (0.3.0's presets derive it from the model)",
			       (long long)c->loss030.global_vocab_size, vocab);
	if (trainer_check_vocab(j->data_dir, loader_vocab_size(j->train), a, err) != 0)
		return err_prefix(err, "training data");
	if (open_backend(j, err) != 0)
		return -1;
	/* context parallelism: a rank computes on its T / cp tokens of each
	 * sequence (T divides: lib/mesh refused it before) */
	plan_opts o = {.be = j->be, .mesh = j->h->mesh, .args = a, .vocab_size = vocab,
		       .b = (int)j->B, .t = (int)(j->T / j->cp), .reduce = BE_F32,
		       .loss_parallel = !c->parallelism.disable_loss_parallel,
		       .async_tp = c->parallelism.enable_async_tensor_parallel,
		       .no_decay_norms_embeddings = c->optimizer.no_decay_norms_embeddings,
		       .f8_all_gather = c->float8.enable_fsdp_float8_all_gather,
		       .f8_precompute = c->float8.precompute_float8_dynamic_scale_for_fsdp,
		       .comm_always = comm_always()};
	train_prec prec;
	if (cp_balance_parse(c->parallelism.context_parallel_load_balancer, &o.cp_balance, err) ||
	    cp_rotate_parse(c->parallelism.context_parallel_rotate_method, &o.cp_rotate, err) ||
	    planner_ac_mode(c, &o.ac, &o.ac_every, err) != 0 || train_adamw_config(c, &o.adamw, err) != 0 ||
	    plan_reshard_parse(c->parallelism.fsdp_reshard_after_forward, &o.reshard, err) != 0 ||
	    choose_precision(j, &prec, err) != 0)
		return -1;
	if (cp_balance_check(o.cp_balance, j->cp, c->follows_030, err) != 0)
		return -1;
	if (backend_is_cuda(j->be) && j->be->ops->ce_vocab_stats == NULL && o.loss_parallel &&
	    j->h->mesh != NULL && j->h->mesh->size[MESH_TP] > 1)
		return err_set(err, "--backend cuda: loss parallelism's vocabulary-sharded "
			       "cross-entropy is not on the CUDA backend yet; set "
			       "parallelism.disable_loss_parallel = true");
	o.prec = prec.model;
	o.reduce = prec.reduce;
	o.master = prec.master;
	if (j->pp > 1) {
		o.b = (int)c->parallelism.pipeline_parallel_microbatch_size;
		o.pp = 1;
		o.hold = j->pp_hold;
	}
	if ((j->p = plan_create(&o, err)) == NULL || train_param_groups(j->p, c, err) != 0)
		return -1;
	if (train_prec_apply(plan_model(j->p), &prec, err) != 0 || apply_compile(j, err) != 0 ||
	    plan_init_weights(j->p, seed_of(c), 1, err) != 0 ||
	    (j->pp > 1 && plan_set_pipeline(j->p, &j->pp_split, j->pp_sched, err) != 0))
		return -1;
	if (train_convert(plan_model(j->p), c, j->log, err) != 0 || seq_chunks(j, err) != 0)
		return -1;
	j->gm = plan_global_model(j->p);
	const llama_args *ma = model_args(j->gm);
	j->flops_per_token = model_flops_per_token(j->gm, (int)j->T);
	/* MFU against the peak of the type the linears compute in: measured on
	 * the CPU; torchtitan's table (bf16 dense) for a GPU it knows */
	be_dtype mm = model_get_prec(plan_model(j->p))->act;
	j->peak_flops = j->gpu.name[0] ? metrics_device_peak_flops(j->gpu.name) : 0;
	if (j->peak_flops <= 0) {
		j->peak_flops = metrics_matmul_peak_flops(j->be, mm);
		/* the measurement's operands are not the run's: the peak starts after */
		backend_reset_peak(j->be);
	}
	char np[48];
	metrics_commas(np, sizeof np, (int64_t)model_num_params(j->gm));
	metrics_log(j->log, "Building %s %s with vocab_size %d, dim %d, n_layers %d, n_heads %d, "
		    "n_kv_heads %d", c->model.name, a->name, vocab, ma->dim, ma->n_layers,
		    ma->n_heads, ma->n_kv_heads);
	metrics_log(j->log, "Model %s %s size: %s total parameters", c->model.name, a->name, np);
	metrics_log(j->log, c->follows_030
				    ? "Following torchtitan 0.3.0 (--module/--config preset): documents "
				      "packed, attention block-causal with per-document positions"
				    : "Following torchtitan 0.2.2 (TOML config): windows of seq_len + 1, "
				      "causal attention");
	/* torchtitan's MFU counts every query against seq_len keys: twice a causal
	 * model's attention, past 100 % under sliding windows (torchtitan #4300) */
	metrics_log(j->log, "FLOPs for tflops and mfu: the (query, key) pairs attention's masks "
		    "leave, counted per batch (%.4g per token with one document per row%s); "
		    "torchtitan counts %.4g per token (every query against seq_len keys): "
		    "tflops_torchtitan and mfu_torchtitan in metrics.jsonl",
		    model_train_flops(j->gm, 1, j->T, NULL) / (double)j->T,
		    c->follows_030 ? ", fewer with the documents of each batch" : "",
		    j->flops_per_token);
	if (ma->mtp_layers > 0)
		metrics_log(j->log, "Multi-token prediction: %d depth(s) after layer %d (mtp_layers.0.. in "
			    "the head), mtp_scale %g: loss = (main + mtp_scale x the depths' mean) / "
			    "main labels, as 0.3.0's MTPLoss", ma->mtp_layers, ma->n_layers - 1,
			    ma->mtp_scale);
	if (a->moe.experts > 0) {
		char act[48];
		metrics_commas(act, sizeof act, model_num_params_active(j->gm));
		metrics_log(j->log, "Mixture of experts: %d experts, top %d; %s parameters active per "
			    "token (flops and MFU count these)", a->moe.experts, a->moe.top_k, act);
	}
	if (j->gpu.name[0])
		metrics_log(j->log, "CUDA backend on device %d (%s, %.1f GiB), arena %.1f GiB; "
			    "peak FLOP/s for MFU: %.3g (%s)", j->h->device, j->gpu.name,
			    (double)j->gpu.mem_bytes / GIB, (double)backend_cuda_arena_bytes(j->be) / GIB,
			    j->peak_flops, metrics_device_peak_flops(j->gpu.name) > 0
						   ? "the device's bf16 dense peak, as torchtitan"
						   : "measured matmul");
	else
		metrics_log(j->log, "CPU backend, %d threads; peak FLOP/s for MFU: %.3g (measured %s "
			    "matmul)", j->be->threads, j->peak_flops, be_dtype_name(mm));
	plan_describe(j->p, j->log);
	return apply_step_graph(j, err);
}

static int build_schedule(job *j, titan_err *err)
{
	const job_config *c = j->c;
	double ratio = isnan(c->lr_scheduler.decay_ratio) ? -1 : c->lr_scheduler.decay_ratio;
	/* torchtitan: lr_scheduler.total_steps, when set, is the schedule's length. */
	int64_t total = c->lr_scheduler.total_steps_set ? c->lr_scheduler.total_steps : c->training.steps;
	if (c->lr_scheduler.warmup_steps > total)
		titan_warn("lr_scheduler.warmup_steps %lld is more than the %lld steps of the "
			   "schedule; clamped", (long long)c->lr_scheduler.warmup_steps, (long long)total);
	return lr_schedule_init(&j->sched, total, c->lr_scheduler.warmup_steps, ratio,
				c->lr_scheduler.decay_type, c->lr_scheduler.min_lr_factor, err);
}

/* with_loader: the loader's item too, malloc'd into s->loader (the caller
 * frees it once the saver has its copy). */
static int fill_state(job *j, tstate *s, int with_loader, titan_err *err)
{
	memset(s, 0, sizeof *s);
	s->p = j->p;
	s->rank = j->rank;
	s->world = j->world;
	s->dp_rank = j->dp_rank;
	s->base_lr = train_base_lr(j->c);
	/* torchtitan saves after scheduler.step(): the optimizer's lr and the
	 * scheduler's _last_lr are already the next step's. */
	s->cur_lr = train_base_lr(j->c) * lr_schedule_factor(&j->sched, j->step);
	s->step = j->step;
	s->ntokens_seen = j->ntokens_seen;
	s->dp_world = j->dp;
	s->names_030 = j->c->follows_030;
	s->qkv_apart = j->c->qkv_apart030;
	if (!with_loader)
		return 0;
	/* every rank of a dp index holds the same loader: the first writes it */
	const mesh *m = j->h->mesh;
	s->write_loader = m == NULL || (m->coord[MESH_CP] == 0 && m->coord[MESH_TP] == 0 &&
					m->coord[MESH_PP] == 0);
	uint8_t *buf;
	if (loader_save(j->train, &buf, &s->loader_len, err) != 0)
		return -1;
	s->loader = buf;
	return 0;
}

/* Every rank waits for its files; once all have (a barrier), rank 0 commits
 * the folder and prunes the old ones. */
static int finish_pending(job *j, titan_err *err)
{
	if (j->pending == NULL)
		return 0;
	tstate_saver *p = j->pending;
	j->pending = NULL;
	if (tstate_save_wait(p, err) != 0)
		return -1;
	if (j->world > 1 && comm_barrier(j->h->mesh->world, err) != 0)
		return -1;
	if (j->rank != 0)
		return 0;
	if (dcp_save_commit(j->pending_dir, j->world, err) != 0)
		return -1;
	return dcp_purge(j->ckpt_dir, (int)j->c->checkpoint.keep_latest_k, err);
}

/* In a 0.3.0 run the loader's item is what 0.3.0's ParallelAwareDataloader
 * saves, a pickle of its state (so 0.3.0 resumes the data where titan is),
 * with titan's own record in it; when titan's position has no 0.3.0
 * equivalent the pickle holds titan's record alone, and rank 0 says why once. */
static int loader_item_030(job *j, tstate *s, uint8_t **pickle, titan_err *err)
{
	loader_state ls;
	loader_state_get(j->train, &ls);
	const char *why;
	if (loader_state_030_encode(j->train, &ls, j->B, j->dp, pickle, &s->loader_len, &why,
				    err) != 0)
		return err_prefix(err, "dataloader.dp_rank_%d", j->dp_rank);
	s->loader = *pickle;
	if (why != NULL && j->rank == 0 && !j->loader030_told) {
		titan_warn("dataloader.dp_rank_%d: titan's data position has no torchtitan 0.3.0 "
			   "equivalent (%s); the item holds titan's state alone and 0.3.0 resumes "
			   "this checkpoint only with --checkpoint.exclude_from_loading dataloader",
			   j->dp_rank, why);
		j->loader030_told = 1;
	}
	return 0;
}

static int save_checkpoint(job *j, int model_only, const char *dtype, titan_err *err)
{
	const job_config *c = j->c;
	if (finish_pending(j, err) != 0)
		return -1;
	snprintf(j->pending_dir, sizeof j->pending_dir, "%s/step-%lld", j->ckpt_dir, (long long)j->step);
	double t0 = now_s();
	int async = strcmp(c->checkpoint.async_mode, "disabled") != 0 && !model_only;
	metrics_log(j->log, "Saving the checkpoint (or staging if async is enabled).");
	uint8_t *pickle = NULL;
	tstate s;
	if (fill_state(j, &s, !model_only, err) != 0)
		return -1;
	uint8_t *lbuf = (uint8_t *)s.loader;
	if (!model_only && s.names_030 && s.write_loader && loader_item_030(j, &s, &pickle, err) != 0) {
		free(lbuf);
		return -1;
	}
	tstate_save_opts o = {.model_only = model_only, .export_dtype = dtype,
			      .async = async};
	tstate_saver *sv = tstate_save_begin(j->pending_dir, &s, &o, err);
	free(pickle); /* the saver holds its own copy */
	free(lbuf);
	if (sv == NULL)
		return -1;
	j->pending = sv;
	j->pending_step = j->step;
	if (!async && finish_pending(j, err) != 0)
		return -1;
	metrics_log(j->log, "Finished saving the checkpoint (or staging if async is enabled)in "
		    "%.2f seconds.", now_s() - t0);
	return 0;
}

/* torchtitan's last_save_in_hf: the last step's model as HF safetensors, in
 * the files model.hf_assets_path's index names (one file without it). */
static int save_hf(job *j, titan_err *err)
{
	const job_config *c = j->c;
	if (finish_pending(j, err) != 0)
		return -1;
	char dir[1100], index[1100];
	snprintf(dir, sizeof dir, "%s/step-%lld", j->ckpt_dir, (long long)j->step);
	snprintf(index, sizeof index, "%s/model.safetensors.index.json", c->model.hf_assets_path);
	struct stat st;
	int have_index = stat(index, &st) == 0 && S_ISREG(st.st_mode);
	if (!have_index)
		titan_warn("model.safetensors.index.json not found at hf_assets_path: %s; saving a "
			   "single safetensors file", index);
	double t0 = now_s();
	metrics_log(j->log, "Saving a model only checkpoint in %s at last step, step %lld, as "
		    "HF safetensors.", c->checkpoint.export_dtype, (long long)j->step);
	tstate s;
	if (fill_state(j, &s, 0, err) != 0)
		return -1;
	if (tstate_save_hf(dir, &s, c->checkpoint.export_dtype, have_index ? index : NULL, err) != 0 ||
	    dcp_purge(j->ckpt_dir, (int)c->checkpoint.keep_latest_k, err) != 0)
		return -1;
	metrics_log(j->log, "Finished saving the checkpoint in %.2f seconds.", now_s() - t0);
	return 0;
}

static int list_has_part(const cfg_strlist *l, const char *part)
{
	for (int i = 0; i < l->n; i++)
		if (strcmp(l->v[i], part) == 0)
			return 1;
	return 0;
}

/* A checkpoint torchtitan wrote holds its own loader's state (a pickle) or
 * none.  Its loader reads the same windows in the same order as titan's
 * unshuffled one, so train_state.ntokens_seen / seq_len windows are behind. */
static int seek_by_tokens(job *j, int64_t ntokens_seen, const char *dir, titan_err *err)
{
	if (ntokens_seen <= 0)
		return 0;
	if (ntokens_seen % j->T != 0)
		titan_warn("%s: train_state.ntokens_seen %lld is not a multiple of seq_len %lld",
			   dir, (long long)ntokens_seen, (long long)j->T);
	loader_state ls;
	loader_state_get(j->train, &ls);
	ls.windows = (uint64_t)(ntokens_seen / j->T);
	titan_warn("%s: no titan data loader state (a torchtitan checkpoint?); the data resumes "
		   "after train_state.ntokens_seen = %lld tokens (%llu windows)", dir,
		   (long long)ntokens_seen, (unsigned long long)ls.windows);
	if (loader_state_set(j->train, &ls, err) != 0)
		return err_prefix(err, "%s", dir);
	return 0;
}

/* The checkpoint's dataloader.dp_rank_0: titan's record (raw, or in the
 * pickle of its 0.3.0 runs) or 0.3.0's own loader state, mapped onto titan's
 * documents.  1: a loader state titan's cannot continue (said why). */
static int set_loader(job *j, const tstate *s, int64_t world_size, const char *dir,
		      titan_err *err)
{
	loader_state ls;
	char why[256] = "";
	int titan = loader_state_is_titan(s->loader, s->loader_len);
	int rc = titan ? loader_load(j->train, s->loader, s->loader_len, &ls, err)
		       : loader_state_030_decode(j->train, s->loader, s->loader_len, world_size,
						 &ls, why, sizeof why, err);
	if (rc == 1) {
		titan_warn("%s: dataloader.dp_rank_0 is a data loader state titan's cannot "
			   "continue: %s", dir, why);
		return 1;
	}
	if (rc == 0 && !titan)
		rc = loader_state_set(j->train, &ls, err);
	if (rc != 0)
		return err_prefix(err, "%s: dataloader.dp_rank_0", dir);
	metrics_log(j->log, "The data resumes after %llu windows of seq_len %lld (loader state: %s).",
		    (unsigned long long)ls.windows, (long long)ls.seq_len,
		    why[0] ? why : "titan's");
	return 0;
}

/* Where a rank loaded from, and the parts of storage records it read without
 * checking them (dcp_load_parts), to be checked with the other ranks'. */
typedef struct ckpt_read {
	char dir[1100];
	dcp_parts parts;
} ckpt_read;

/* torchtitan's CheckpointManager.load: the run's own latest step first, then
 * initial_load_path; step 0 (a seed checkpoint) is model only.  *loaded is
 * set when something was loaded. */
static int load_rank(job *j, int *loaded, ckpt_read *rd, titan_err *err)
{
	const job_config *c = j->c;
	*loaded = 0;
	if (!c->checkpoint.enable)
		return 0;
	int64_t step = c->checkpoint.load_step;
	if (step == -1) {
		step = dcp_latest_step(j->ckpt_dir, err);
		if (step < -1)
			return -1;
	}
	char *dir = rd->dir;
	int model_only, hf = 0;
	if (step >= 0) {
		snprintf(dir, sizeof rd->dir, "%s/step-%lld", j->ckpt_dir, (long long)step);
		model_only = step == 0;
		hf = dcp_is_hf_step(dir); /* a last save in HF safetensors */
		if (c->checkpoint.initial_load_in_hf)
			titan_warn("checkpoint.initial_load_in_hf is true but %s holds checkpoints: "
				   "loading from them, not from HF safetensors", j->ckpt_dir);
	} else if (c->checkpoint.initial_load_in_hf) {
		/* torchtitan: initial_load_path, else model.hf_assets_path. */
		const char *from = c->checkpoint.initial_load_path ? "checkpoint.initial_load_path"
								   : "model.hf_assets_path";
		snprintf(dir, sizeof rd->dir, "%s", c->checkpoint.initial_load_path
							? c->checkpoint.initial_load_path
							: c->model.hf_assets_path);
		metrics_log(j->log, "loading HF safetensors from --%s: %s", from, dir);
		hf = model_only = 1;
	} else if (c->checkpoint.initial_load_path != NULL) {
		snprintf(dir, sizeof rd->dir, "%s", c->checkpoint.initial_load_path);
		model_only = c->checkpoint.initial_load_model_only;
	} else {
		return 0;
	}
	*loaded = 1;
	metrics_log(j->log, "Loading the checkpoint from %s.", dir);
	tstate s;
	if (fill_state(j, &s, 0, err) != 0)
		return -1;
	if (hf) {
		if (tstate_load_hf(dir, &s, err) != 0)
			return -1;
		if (step > 0) {
			titan_warn("%s holds the model only (HF safetensors); training continues "
				   "after step %lld with a fresh optimizer", dir, (long long)step);
			j->step = step;
			j->ntokens_seen = step * j->accum * j->B * j->T;
			if (seek_by_tokens(j, j->ntokens_seen, dir, err) != 0)
				return -1;
		}
		return 0;
	}
	tstate_loaded got;
	int rc = tstate_load(dir, &s, model_only, &c->checkpoint.exclude_from_loading,
			     j->world > 1 ? &rd->parts : NULL, &got, err);
	int seek = rc == 0 && got.train_state &&
		   !list_has_part(&c->checkpoint.exclude_from_loading, "dataloader");
	if (rc == 0 && got.dataloader) {
		rc = set_loader(j, &s, got.loader_world, dir, err);
		seek = seek && rc == 1;
		rc = rc < 0 ? -1 : 0;
	}
	if (seek)
		rc = seek_by_tokens(j, s.ntokens_seen, dir, err);
	free(s.loader);
	if (rc != 0)
		return -1;
	plan_weights_changed(j->p); /* the masters were written behind the model's back */
	if (got.train_state) {
		j->step = s.step;
		j->ntokens_seen = s.ntokens_seen;
	}
	if (!model_only && !got.had_train_state)
		titan_warn("%s holds the model only; training starts at step 1 with a fresh "
			   "optimizer", dir);
	return 0;
}

/* The records this rank read in parts, checked with every rank's parts,
 * gathered: every rank comes here, one that failed with none (rc, its
 * status, returned unless the check fails). */
static int check_parts(comm *w, const ckpt_read *rd, int rc, titan_err *err)
{
	const dcp_parts *mine = &rd->parts;
	uint8_t *all;
	size_t n_all;
	titan_err e2;
	if (comm_all_gather_bytes(w, mine->p, rc == 0 ? mine->n * sizeof *mine->p : 0, &all, &n_all,
				  &e2) != 0)
		return rc != 0 ? -1 : err_set(err, "%s", e2.msg);
	if (rc == 0)
		rc = dcp_parts_check(rd->dir, mine, (const dcp_part *)all, n_all / sizeof(dcp_part), err);
	free(all);
	return rc;
}

/* Every rank loads its own shards; the load is finished (and logged as such)
 * only when every rank's succeeded, so the ranks agree on the result first:
 * the lowest rank that failed, if any, whose message every rank then holds
 * (the job's failure is said once, by whichever rank comes first to say it,
 * and it must name the file that failed, not "another rank"). */
static int load_checkpoint(job *j, titan_err *err)
{
	double t0 = now_s();
	ckpt_read rd = {0};
	int loaded, rc = load_rank(j, &loaded, &rd, err);
	if (j->world > 1) {
		comm *w = j->h->mesh->world;
		rc = check_parts(w, &rd, rc, err);
		dcp_parts_free(&rd.parts);
		int32_t mine = rc != 0 ? j->rank : INT32_MAX, first;
		titan_err e2;
		if (comm_all_reduce(w, &mine, &first, 1, COMM_I32, COMM_MIN, &e2) != 0)
			return rc != 0 ? -1 : err_set(err, "%s", e2.msg);
		if (first != INT32_MAX) {
			char why[sizeof err->msg];
			snprintf(why, sizeof why, "%s", first == j->rank ? err->msg : "");
			if (comm_broadcast(w, why, sizeof why, COMM_U8, (int)first, &e2) != 0)
				return rc != 0 ? -1 : err_set(err, "%s", e2.msg);
			why[sizeof why - 1] = '\0';
			return err_set(err, "rank %d: %s", (int)first, why);
		}
	}
	if (rc == 0 && loaded)
		metrics_log(j->log, "Finished loading the checkpoint in %.2f seconds.", now_s() - t0);
	return rc;
}

static int open_outputs(job *j, titan_err *err)
{
	const job_config *c = j->c;
	int rank = j->h->mesh != NULL ? j->h->mesh->rank : 0;
	char mine[32] = "", jsonl[48] = "metrics.jsonl"; /* torchtitan's rank_N when all write */
	if (rank != 0 && !c->metrics.save_for_all_ranks)
		return 0;
	if (c->metrics.save_for_all_ranks && j->h->mesh != NULL && j->h->mesh->world_size > 1) {
		snprintf(mine, sizeof mine, "/rank_%d", rank);
		snprintf(jsonl, sizeof jsonl, "metrics_rank_%d.jsonl", rank);
	}
	if (mkdir_p(c->job.dump_folder, err) != 0)
		return -1;
	char path[1100];
	snprintf(path, sizeof path, "%s/%s", c->job.dump_folder, jsonl);
	if (metrics_jsonl_open(&j->jl, path, err) != 0)
		return -1;
	j->jl_open = 1;
	if (!c->metrics.enable_tensorboard)
		return 0;
	if (trainer_tb_dir(c, mine, path, sizeof path, err) != 0)
		return -1;
	if (tb_open(&j->tb, path, trainer_wall_s(), err) != 0)
		return -1;
	j->tb_open = 1;
	metrics_log(j->log, "TensorBoard logging enabled. Logs will be saved at %s", path);
	return 0;
}

static int tb_scalar(job *j, const char *tag, double v, titan_err *err)
{
	return tb_add_scalar(&j->tb, tag, (float)v, j->step, trainer_wall_s(), err);
}

typedef struct window {
	double t0;            /* start of the interval since the last log */
	double data_s;        /* seconds spent waiting for data in it */
	int64_t tokens, steps;
	double flops;         /* the work of its steps on this rank's batch */
} window;

static int log_step(job *j, window *w, double loss, double gnorm, titan_err *err)
{
	double dt = now_s() - w->t0;
	metrics_step s = {.step = j->step, .loss = loss, .grad_norm = gnorm};
	job_memory(j, &s.mem_gib, &s.mem_pct);
	/* torchtitan's tps: the tokens of this rank's batch per second, over the
	 * ranks that share it (cp x tp x pp) */
	s.tps = dt > 0 ? (double)w->tokens / dt / j->non_dp : 0;
	metrics_set_rates(&s, w->flops / j->non_dp, j->flops_per_token * (double)w->tokens / j->non_dp,
			  dt, j->peak_flops);
	char line[512];
	metrics_format_line(line, sizeof line, &s, j->h->color);
	metrics_log(j->log, "%s", line);
	if (j->tb_open) {
		double active = (double)backend_peak_bytes(j->be) / (1024.0 * 1024 * 1024);
		double total = s.mem_pct > 0 ? s.mem_gib * 100.0 / s.mem_pct : 0;
		if (tb_scalar(j, "loss_metrics/global_avg_loss", loss, err) ||
		    tb_scalar(j, "loss_metrics/global_max_loss", j->max_loss, err) ||
		    tb_scalar(j, "grad_norm", gnorm, err) || tb_scalar(j, "lr", j->lr, err) ||
		    tb_scalar(j, "throughput(tps)", s.tps, err) || tb_scalar(j, "tflops", s.tflops, err) ||
		    tb_scalar(j, "mfu(%)", s.mfu, err) ||
		    tb_scalar(j, "memory/max_active(GiB)", active, err) ||
		    tb_scalar(j, "memory/max_active(%)", total > 0 ? 100 * active / total : 0, err) ||
		    tb_scalar(j, "memory/max_reserved(GiB)", s.mem_gib, err) ||
		    tb_scalar(j, "memory/max_reserved(%)", s.mem_pct, err) ||
		    tb_scalar(j, "time_metrics/end_to_end(s)", dt / (double)w->steps, err) ||
		    tb_scalar(j, "time_metrics/data_loading(s)", w->data_s / (double)w->steps, err) ||
		    tb_scalar(j, "time_metrics/data_loading(%)", dt > 0 ? 100 * w->data_s / dt : 0, err) ||
		    tb_scalar(j, "n_tokens_seen", (double)j->ntokens_seen, err) || tb_flush(&j->tb, err))
			return -1;
	}
	w->t0 = now_s();
	w->data_s = 0;
	w->tokens = 0;
	w->steps = 0;
	w->flops = 0;
	return 0;
}

/* Read the step's micro-batches first: the loss is normalised by the valid
 * tokens of the whole step. */
static int read_step_batches(job *j, titan_err *err)
{
	size_t per = (size_t)(j->B * j->T);
	for (int k = 0; k < j->accum; k++) {
		const loader_batch *b;
		int rc = loader_next(j->train, &b, err);
		if (rc != 1)
			return rc == 0 ? err_set(err, "training data ended") : -1;
		memcpy(j->inputs + k * per, b->inputs, per * sizeof(int32_t));
		memcpy(j->labels + k * per, b->labels, per * sizeof(int32_t));
		if (j->positions)
			memcpy(j->positions + k * per, b->positions, per * sizeof(int32_t));
	}
	return 0;
}

static int train_step(job *j, window *w, double *loss, double *gnorm, titan_err *err)
{
	double t0 = now_s();
	PROF_T0(pt);
	if (read_step_batches(j, err) != 0)
		return -1;
	PROF_PHASE(pt, "data");
	w->data_s += now_s() - t0;
	/* LambdaLR: training step i (1-based) uses the factor of index i - 1. */
	j->lr = train_base_lr(j->c) * lr_schedule_factor(&j->sched, j->step);
	/* each rank's chunks of the sequences (torchtitan's context_parallel
	 * shards the batch's buffers in place) */
	int64_t rows = (int64_t)j->accum * j->B;
	if (plan_cp_share(j->p, j->inputs, j->cp_inputs, rows, j->T, j->positions, err) != 0 ||
	    plan_cp_share(j->p, j->labels, j->cp_labels, rows, j->T, j->positions, err) != 0)
		return -1;
	/* under pipeline parallelism each accumulation step is pp_mb micro-batches */
	plan_batch b = {.inputs = j->cp_inputs, .labels = j->cp_labels, .positions = j->positions,
			.n_mb = j->accum * (j->pp > 1 ? j->pp_mb : 1)};
	plan_result r;
	if (plan_step(j->p, &b, j->lr, j->c->training.max_norm, &r, err) != 0)
		return err_prefix(err, "step %lld", (long long)j->step + 1);
	*loss = r.loss;
	*gnorm = r.grad_norm;
	if (w->steps > 0 || j->step > 0) { /* the run's first step warms up */
		j->pp_run_s += r.run_s;
		j->pp_busy_s += r.busy_s;
	}
	j->max_loss = r.max_loss;
	j->step++;
	note_step_graph(j);
	/* tokens of the global batch (titan's train_state counts them all) */
	int64_t local = (int64_t)j->accum * j->B * j->T;
	j->ntokens_seen += local * j->dp;
	w->tokens += local;
	/* the pairs of this batch's documents (0.3.0), or of its causal rows */
	j->step_flops = model_train_flops(j->gm, rows, j->T, j->positions);
	w->flops += j->step_flops;
	w->steps++;
	if (!isfinite(*loss))
		return err_set(err, "step %lld: loss is %g; stopping", (long long)j->step, *loss);
	return 0;
}

/* One validation batch on this rank's chunks of its sequences. */
static int eval_batch(job *j, const loader_batch *b, double *loss_sum, int64_t *n_valid,
		      titan_err *err)
{
	size_t n = (size_t)(b->B * b->T) / (size_t)j->cp;
	int32_t *in = malloc(n * sizeof *in), *lab = malloc(n * sizeof *lab);
	int rc = in == NULL || lab == NULL ? err_set(err, "out of memory") : 0;
	if (rc == 0 && (plan_cp_share(j->p, b->inputs, in, b->B, b->T, b->positions, err) != 0 ||
			plan_cp_share(j->p, b->labels, lab, b->B, b->T, b->positions, err) != 0))
		rc = err_prefix(err, "validation.seq_len");
	if (rc == 0)
		rc = plan_eval(j->p, in, lab, b->positions, (int)b->B, (int)(b->T / j->cp), loss_sum,
			       n_valid, err);
	free(in);
	free(lab);
	return rc;
}

static int validate(job *j, titan_err *err)
{
	const job_config *c = j->c;
	char dir[1024];
	snprintf(dir, sizeof dir, "%s", c->validation.dataset_path ? c->validation.dataset_path : j->data_dir);
	loader_opts o = {.dir = dir, .split = SHARD_VAL, .seq_len = c->validation.seq_len,
			 .local_batch = c->validation.local_batch_size, .dp_rank = j->dp_rank,
			 .dp_degree = j->dp, .prefetch = 1, .tokenizer = loader_fingerprint(j->train),
			 .documents = c->follows_030};
	loader *l = loader_open(&o, err);
	if (l == NULL)
		return err_prefix(err, "validation data");
	double loss_sum = 0;
	int64_t n_valid = 0;
	int rc = 0;
	for (int64_t k = 0; c->validation.steps == -1 || k < c->validation.steps; k++) {
		const loader_batch *b;
		rc = loader_next(l, &b, err);
		if (rc != 1)
			break;
		double ls = 0;
		int64_t nv = 0;
		rc = eval_batch(j, b, &ls, &nv, err);
		if (rc != 0)
			break;
		loss_sum += ls;
		n_valid += nv;
		rc = 1;
	}
	loader_close(l);
	if (rc < 0)
		return -1;
	if (n_valid == 0)
		return err_set(err, "validation: %s has no validation tokens", dir);
	double loss = loss_sum / (double)n_valid;
	double gib, pct;
	job_memory(j, &gib, &pct);
	char line[256];
	metrics_format_validation_line(line, sizeof line, j->step, loss, gib, pct, j->h->color);
	metrics_log(j->log, "%s", line);
	if (j->jl_open && metrics_jsonl_validation(&j->jl, j->step, loss, n_valid, err) != 0)
		return -1;
	if (j->tb_open && (tb_scalar(j, "validation_metrics/loss", loss, err) || tb_flush(&j->tb, err)))
		return -1;
	return 0;
}

static int should_save(const job *j, int last)
{
	const job_config *c = j->c;
	if (!c->checkpoint.enable || c->checkpoint.load_only)
		return 0;
	return last || j->step % c->checkpoint.interval == 0 ||
	       (j->step == 1 && c->checkpoint.enable_first_step_checkpoint);
}

/* torchtitan's maybe_enable_profiling: every rank writes its trace of the
 * last profiler_active steps of every profile_freq (lib/prof). */
static int start_profiler(job *j, titan_err *err)
{
	const job_config *c = j->c;
	if (!c->profiling.enable_profiling)
		return 0;
	char dir[1100];
	if (trainer_under_dump(c, "profiling.save_traces_folder", c->profiling.save_traces_folder, dir,
		       sizeof dir, err) != 0)
		return -1;
	prof_opts o = {.trace_folder = dir, .rank = j->rank, .freq = c->profiling.profile_freq,
		       .active = c->profiling.profiler_active};
	if (prof_start(&o, err) != 0)
		return -1;
	j->prof = 1;
	metrics_log(j->log, "Profiling active. Traces will be saved at %s", dir);
	return 0;
}

/* This pipeline rank's bubble, measured (1 - the units' compute / the
 * forward-backward time, over the steps after the first) next to the
 * schedule's formula and its simulation at unit costs (lib/pp). */
static int log_bubble(job *j, titan_err *err)
{
	if (j->pp_run_s <= 0)
		return 0;
	const pp_schedule *s = j->pp_sched;
	pp_kind k;
	pp_sim sim;
	if (pp_simulate(s, &PP_COSTS_UNIT, &sim, NULL, err) != 0)
		return -1;
	double f = pp_kind_parse(j->c->parallelism.pipeline_parallel_schedule, &k, err) == 0
			   ? pp_bubble_formula(k, s->n_ranks, s->n_stages / s->n_ranks, s->n_mb) : NAN;
	metrics_log(j->log, "Pipeline bubble of rank %d: %.1f%% measured (1 - compute / "
		    "forward-backward time), %.1f%% by %s's formula, %.1f%% simulated at unit "
		    "costs", j->rank, 100 * (1 - j->pp_busy_s / j->pp_run_s), 100 * f, s->name,
		    100 * sim.bubble);
	return 0;
}

static int run_loop(job *j, titan_err *err)
{
	const job_config *c = j->c;
	window w = {.t0 = now_s()};
	double t_start = now_s();
	metrics_log(j->log, "Training starts at step %lld", (long long)j->step + 1);
	int64_t first = j->step + 1;
	while (j->step < c->training.steps) {
		double loss = 0, gnorm = 0;
		if (j->prof)
			prof_step_begin(j->step + 1);
		if (train_step(j, &w, &loss, &gnorm, err) != 0)
			return -1;
		if (j->prof && j->step % j->c->profiling.profile_freq == 0)
			metrics_log(j->log, "Dumping profiler traces at step %lld", (long long)j->step);
		if (j->prof && prof_step_end(j->step, err) != 0)
			return -1;
		double dt = now_s() - t_start;
		double tokens = (double)j->accum * (double)(j->B * j->T);
		metrics_step ms = {.step = j->step, .loss = loss, .grad_norm = gnorm,
				   .tps = tokens / dt / j->non_dp};
		metrics_set_rates(&ms, j->step_flops / j->non_dp,
				  j->flops_per_token * tokens / j->non_dp, dt, j->peak_flops);
		job_memory(j, &ms.mem_gib, &ms.mem_pct);
		if (j->jl_open && metrics_jsonl_step(&j->jl, &ms, j->lr, j->ntokens_seen, dt, err) != 0)
			return -1;
		t_start = now_s();
		if ((j->step == 1 || j->step % c->metrics.log_freq == 0) && log_step(j, &w, loss, gnorm, err) != 0)
			return -1;
		if (c->validation.enable && j->step % c->validation.freq == 0 && validate(j, err) != 0)
			return -1;
		int last = j->step == c->training.steps;
		int stop = j->h->stop != NULL && *j->h->stop;
		if (stop && !last) {
			metrics_log(j->log, "Stop requested: saving at step %lld and exiting.", (long long)j->step);
			if (should_save(j, 1) && save_checkpoint(j, 0, NULL, err) != 0)
				return -1;
			return 0;
		}
		if (should_save(j, last) &&
		    (last && c->checkpoint.last_save_in_hf
			     ? save_hf(j, err)
			     : save_checkpoint(j, last && c->checkpoint.last_save_model_only,
					       c->checkpoint.export_dtype, err)) != 0)
			return -1;
		/* torchtitan tightens the timeout once the first step (warm-up,
		 * first collectives) is over; comm_set_timeout holds a barrier first. */
		if (j->step == first && j->h->mesh != NULL &&
		    comm_set_timeout(j->h->mesh->world, (double)c->comm.train_timeout_seconds, err) != 0)
			return -1;
	}
	if (j->pp > 1 && log_bubble(j, err) != 0)
		return -1;
	/* the backend's high-water mark, what --dry-run's peak predicts */
	metrics_log(j->log, "Peak backend memory: %zu bytes (rank %d)", backend_peak_bytes(j->be),
		    j->rank);
	log_device_collectives(j);
	metrics_log(j->log, "Training completed");
	return 0;
}

/* torchtitan's memory_estimation.enable: the plan of this job, logged before
 * anything is built (titan-train --dry-run prints the same).  Not fitting is
 * a warning: the plan is an estimate, the allocator the judge. */
static int estimate_memory(job *j, titan_err *err)
{
	plan_report r;
	if (planner_run(j->c, j->world, planner_local_memory(), &r, err) != 0)
		return err_prefix(err, "memory_estimation");
	planner_print(&r, j->log);
	if (!r.fits)
		titan_warn("memory_estimation: the plan does not fit the device's memory");
	planner_report_free(&r);
	return 0;
}

/* One run per dump folder: two would mix their checkpoints and metrics.
 * What a killed run left half done is cleaned up once the folder is ours.
 * The job's ranks are one run: rank 0 holds the lock and cleans, the others
 * wait for it. */
static int lock_dump_folder(job *j, titan_err *err)
{
	const job_config *c = j->c;
	if (j->rank == 0 &&
	    ((j->lock_fd = dir_lock(c->job.dump_folder, "titan-train is running in", err)) < 0 ||
	     dcp_clean_stale(j->ckpt_dir, err) != 0))
		return -1;
	return j->world > 1 ? comm_barrier(j->h->mesh->world, err) : 0;
}

int trainer_run(const job_config *c, const trainer_hooks *h, titan_err *err)
{
	job j = {.c = c, .h = h, .log = h->log ? h->log : stderr, .lock_fd = -1};
	if (trainer_under_dump(c, "checkpoint.folder", c->checkpoint.folder, j.ckpt_dir, sizeof j.ckpt_dir,
		       err) != 0)
		return -1;
	metrics_log(j.log, "Starting job: %s", c->job.description);
	warn_inert(&j);
	int rc = -1;
	read_layout(&j);
	if (c->checkpoint.last_save_in_hf && j.world > 1) {
		err_set(err, "checkpoint.last_save_in_hf: the weights are sharded over %d ranks; save "
			"DCP and convert with titan-ckpt-convert to-hf", j.world);
		goto out;
	}
	if (c->memory_estimation.enable && estimate_memory(&j, err) != 0)
		goto out;
	if (lock_dump_folder(&j, err) != 0)
		goto out;
	if (find_flavor(&j, err) != 0 || build_pipeline(&j, err) != 0 || open_data(&j, err) != 0 ||
	    build_plan(&j, err) != 0 || build_schedule(&j, err) != 0)
		goto out;
	if (c->checkpoint.create_seed_checkpoint) {
		if (!c->checkpoint.enable) {
			err_set(err, "checkpoint.create_seed_checkpoint needs checkpoint.enable");
			goto out;
		}
		rc = save_checkpoint(&j, 1, "float32", err) == 0 ? finish_pending(&j, err) : -1;
		if (rc == 0)
			metrics_log(j.log, "Created seed checkpoint at %s/step-0", j.ckpt_dir);
		goto out;
	}
	if (load_checkpoint(&j, err) != 0 || open_outputs(&j, err) != 0 ||
	    start_profiler(&j, err) != 0)
		goto out;
	if (j.step >= c->training.steps) {
		metrics_log(j.log, "Step %lld already reached (training.steps %lld); nothing to do",
			    (long long)j.step, (long long)c->training.steps);
		rc = 0;
		goto out;
	}
	rc = run_loop(&j, err);
	if (rc == 0)
		rc = finish_pending(&j, err);
out:
	job_close(&j);
	return rc;
}
