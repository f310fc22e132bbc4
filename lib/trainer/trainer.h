/* trainer.h: the training job behind titan-train.
 *
 * config -> data (titan-shard folder) -> model -> AdamW + LR schedule -> steps
 * with gradient accumulation -> log line, TensorBoard, metrics JSONL ->
 * validation -> checkpoints (PyTorch DCP, torchtitan's keys) and automatic
 * resume from the latest complete one.
 *
 * A step is torchtitan's: the micro-batches of the global batch are read
 * first, so that the loss of every token is divided by the number of valid
 * tokens of the whole step; forward+backward per micro-batch (gradients add
 * up); clip by global norm; AdamW with lr = optimizer.lr x schedule(step - 1). */
#ifndef TITAN_TRAINER_H
#define TITAN_TRAINER_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "core/err.h"
#include "mesh/mesh.h"

typedef struct trainer_hooks {
	/* Set (by a signal handler) to ask for a stop: the current step finishes, a
	 * checkpoint is saved (when checkpoint.enable), and trainer_run returns 0. */
	volatile sig_atomic_t *stop;
	FILE *log;   /* log lines; stderr when NULL */
	int color;   /* ANSI colours in the log line */
	int threads; /* CPU threads (0: OpenMP's default) */
	/* The device mesh (every dimension a communicator; a world of one is a
	 * mesh too), NULL in tests that train without one.  Rank 0 writes the
	 * metrics and TensorBoard events; with metrics.save_for_all_ranks every
	 * rank does, in a rank_N folder of its own, as torchtitan. */
	mesh *mesh;
	int device;  /* the CUDA device of this process (its local rank's), -1: none */
	int backend; /* enum trainer_backend */
	/* compile.enable without its whole-step graph (plan_set_graph): the
	 * fused ops only (titan-train --no-step-graph; the GPU check compares) */
	int no_step_graph;
} trainer_hooks;

/* Where the ops run: AUTO is torchtitan's choice, the process's GPU when it
 * has one, else the CPU. */
enum trainer_backend {
	TRAINER_BACKEND_AUTO,
	TRAINER_BACKEND_CPU,
	TRAINER_BACKEND_CUDA,
};

/* The CUDA backend's arena on device dev beside NCCL's buffers: o->arena_bytes
 * set to the free memory less what the CUDA libraries and NCCL keep.  0, or
 * -1 and err (too little free). */
struct backend_cuda_opts;
int trainer_nccl_arena(int dev, struct backend_cuda_opts *o, titan_err *err);

/* Run the whole job.  Returns 0 when every step ran (or a stop was honoured),
 * -1 with err set otherwise. */
int trainer_run(const job_config *c, const trainer_hooks *h, titan_err *err);

/* The shard folder the job reads: training.dataset_path when set, else
 * {job.dump_folder}/{training.dataset}.  Writes it to buf. */
int trainer_dataset_dir(const job_config *c, char *buf, size_t n, titan_err *err);
/* TensorBoard's event folder of a run started now: {dump}/{save_tb_folder}/
 * YYYYmmdd-HHMM then suffix ("" or "/rank_N"), as torchtitan names it. */
int trainer_tb_dir(const job_config *c, const char *suffix, char *buf, size_t n, titan_err *err);
/* Seconds since the epoch: an event's wall_time. */
double trainer_wall_s(void);
/* sub under job.dump_folder (an absolute sub as it is) into buf; key names
 * the setting in the error when it does not fit. */
int trainer_under_dump(const job_config *c, const char *key, const char *sub, char *buf,
		       size_t n, titan_err *err);

/* Print the flavors (name, dims, parameters) as a table. */
void trainer_list_flavors(FILE *out);

#endif
