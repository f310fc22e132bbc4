#!/bin/sh
# Every parallel plan trains as the single process does (test_plan under
# mpirun, one run per world size for all its plans: t_mpi_queue): 5 steps of a small Llama, per-step loss and grad
# norm and the final parameters within the tolerances of test_plan.c, and the
# bytes each rank sends on every mesh dimension equal to titan-train(1)'s
# formula.  Each line: the plan (TITAN_PLAN_TEST), its ranks.  Pipeline plans
# are held to the same single process (it runs the whole batch as one
# micro-batch) and the same tolerances.  Context
# parallelism: CP 2 with each load balancer and rotate method, CP 4, and CP
# composed with FSDP, TP and both (8 ranks); each line prints its batch's
# seconds (CI runs this on 2 cores).
# f8=1: Float8 linears with FSDP's float8 all-gather, f8=2: with
# precomputed scales; recipe= another recipe (no float8 all-gather); under tp
# amax=shard is the negative control.
# dev=1 / always=1: the routes of the CUDA backend (NCCL) checked on the CPU.
# prec=fsdp: bf16 parameters and activations, float32 reduce, on both sides;
# mb=ranks: the single process runs the ranks' micro-batches in turn.
# docs=1: torchtitan 0.3.0's documents on both sides.
# muon=1: optimizer.param_groups on both sides, DistMuon for the layers'
# matrices (gathered whole over FSDP's and TP's boxes) beside two AdamW groups.
# bf16states=1: AdamW's states in bf16 (fused_opt_states_bf16) on both sides,
# the parameters' root mean square difference bounded too (refstates=float32:
# the negative control).  masked=1: SFT chat data's masked labels on both
# sides (prompts, rows and a half batch nearly all masked: the loss
# normalised by the global count of valid labels).
. tests/lib.sh
# Under the sanitizers (SAN=1, several times slower) every case runs 2 steps
# (one from fresh weights, one with AdamW's state: the same code as 5 or 200
# steps; the first steps= of a case counts); the tolerances over 5 and 200
# steps are judged in make check.
STEPS=
[ "${SAN:-0}" = 1 ] && STEPS="steps=2 "

T=$BUILD/tests/plan/test_plan
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive

plan() { # NP CASE...
	np=$1
	shift
	t_mpi_queue "$np" "$T" TITAN_PLAN_TEST "$STEPS$*" "$*"
}

plan 2 shard=2
plan 3 shard=3
plan 4 shard=4
plan 4 rep=2 shard=2
plan 2 rep=2 shard=1
plan 2 shard=2 reshard=always accum=2
plan 2 shard=2 reshard=never accum=3
plan 2 tp=2
plan 2 tp=2 lp=0
plan 2 tp=2 async=1 accum=2
plan 2 tp=2 ac=full
plan 2 tp=2 async=1 ac=op
plan 4 shard=2 tp=2 accum=2
plan 4 shard=2 tp=2 async=1 reshard=always ac=sel2
# pipeline parallelism (lib/pp's engine as the runner): every schedule, two
# virtual stages per rank (the multi-stage ones' default), three by
# layers_per_stage, a CSV schedule, four stages with first/last stage less
# layers, gradient accumulation, and the compositions with FSDP and TP
plan 2 pp=2 sched=GPipe mbs=2
plan 2 pp=2 sched=1F1B mbs=2 accum=2
plan 2 pp=2 sched=Interleaved1F1B mbs=2
plan 2 pp=2 sched=LoopedBFS mbs=2
plan 2 pp=2 sched=InterleavedZeroBubble mbs=2
plan 2 pp=2 sched=ZBVZeroBubble mbs=1 ac=full
plan 2 pp=2 sched=DualPipeV mbs=2
plan 2 pp=2 sched=Interleaved1F1B lps=1 layers=4 mbs=2
plan 2 pp=2 sched=ZBVZeroBubble mbs=3 csv=tests/pp/golden/csv/zbvzerobubble_pp2_mb4.csv
plan 4 pp=4 sched=1F1B mbs=2 layers=6
plan 4 pp=4 sched=GPipe mbs=1 layers=6 fl=0 ll=2
plan 4 pp=2 shard=2 sched=1F1B mbs=2
plan 4 pp=2 shard=2 sched=ZBVZeroBubble mbs=1 reshard=always accum=2
plan 4 pp=2 tp=2 sched=1F1B mbs=2 async=1
plan 8 pp=2 rep=2 shard=2 sched=1F1B mbs=1
plan 8 pp=2 shard=2 tp=2 sched=Interleaved1F1B mbs=2
# context parallelism: each load balancer and rotate method, CP 4, and the
# compositions with FSDP and TP
plan 2 cp=2
plan 2 cp=2 rot=alltoall
plan 2 cp=2 bal=none
plan 2 cp=2 bal=none rot=alltoall accum=2
plan 4 cp=4
plan 4 cp=4 rot=alltoall ac=full
plan 4 shard=2 cp=2
plan 4 cp=2 tp=2
plan 4 cp=2 tp=2 async=1 rot=alltoall ac=sel2
plan 8 shard=2 cp=2 tp=2
# torchtitan 0.3.0's documents (per-document positions, block-causal masks)
# under FSDP, TP with accumulation, a pipeline, and DDP with full AC; under
# context parallelism (ring attention masking by the whole rows' documents)
# with each load balancer (ptrr: torch's _PTRRLoadBalancer over blocks of 16,
# each row dealt by its documents) and rotate method, CP with FSDP, and CP
# under a pipeline (each stage's micro-batches their rows' share)
plan 2 shard=2 docs=1
plan 2 tp=2 docs=1 accum=2
plan 2 pp=2 sched=1F1B mbs=2 docs=1
plan 2 rep=2 shard=1 docs=1 ac=full
plan 2 cp=2 docs=1
plan 2 cp=2 bal=ptrr docs=1
plan 2 cp=2 bal=ptrr rot=alltoall docs=1 accum=2
plan 2 cp=2 bal=none rot=alltoall docs=1
plan 4 shard=2 cp=2 bal=ptrr docs=1
plan 4 pp=2 cp=2 sched=Interleaved1F1B mbs=2 bal=ptrr docs=1
# Float8 linears with FSDP's float8 all-gather
plan 2 shard=2 f8=1 accum=2
plan 4 rep=2 shard=2 f8=2 reshard=always
# Float8 linears under tensor parallelism (every scale the whole tensor's, as
# torchao's casts of DTensors): each recipe, async TP with full AC, FSDP's
# float8 all-gather beside TP (amax over both), under a pipeline, and the
# negative control (each tp rank's own amax must fail the bounds; test_plan.c)
plan 2 tp=2 f8=1
plan 2 tp=2 f8=1 recipe=rowwise accum=2
plan 2 tp=2 f8=1 recipe=rowwise_with_gw_hp lp=0
plan 2 tp=2 f8=1 async=1 ac=full
plan 2 tp=2 f8=1 amax=shard
plan 4 shard=2 tp=2 f8=1
plan 4 shard=2 tp=2 f8=2 reshard=always accum=2
plan 4 pp=2 tp=2 sched=1F1B mbs=2 f8=1
# FSDP2's mixed precision (mixed_precision_param bf16, reduce float32) against
# one process in the same mode, 200 steps (issue 12's bound; test_plan.c)
plan 2 shard=2 prec=fsdp steps=200
plan 2 shard=2 prec=fsdp accum=2 reshard=always
# the CUDA backend's routes on the CPU (test_plan.c dev=1, always=1): tensors
# to device-shaped communicators that take the backend's memory only (as
# NCCL), host scalars to their MPI twins; FSDP's collectives over one rank
# (a world of one on a GPU through NCCL)
plan 1 always=1
plan 1 dev=1 always=1 prec=fsdp
plan 2 shard=2 dev=1 accum=2
plan 2 rep=2 shard=1 dev=1
plan 4 rep=2 shard=2 dev=1 reshard=always
plan 4 shard=2 tp=2 async=1 dev=1
plan 2 cp=2 dev=1
plan 2 shard=2 f8=1 dev=1
plan 2 tp=2 f8=1 recipe=rowwise dev=1
plan 2 pp=2 sched=1F1B mbs=2 dev=1
# debugmodel: the single process on the ranks' micro-batches computes the same
# bits (step 1's gradients identical), on the whole batch step 1's gradients
# within float32 reordering (test_plan.c STEP1_GRAD_TOL)
plan 2 shard=2 prec=fsdp model=debugmodel mb=ranks
plan 2 shard=2 prec=fsdp model=debugmodel steps=3
# optimizer.param_groups with DistMuon: FSDP, HSDP, TP, CP, PP and FSDP x TP
plan 2 shard=2 muon=1
plan 2 tp=2 muon=1
plan 2 cp=2 muon=1
plan 2 pp=2 sched=1F1B mbs=2 muon=1
plan 4 rep=2 shard=2 muon=1
plan 4 shard=2 tp=2 muon=1
# optimizer.implementation = "fused_opt_states_bf16": FSDP, TP with
# accumulation, PP, CP, HSDP and FSDP x TP; the negative control (the single
# process keeps float32 states: the parameters' rms must exceed the bound)
plan 2 shard=2 bf16states=1
plan 2 tp=2 bf16states=1 accum=2
plan 2 pp=2 sched=1F1B mbs=2 bf16states=1
plan 2 cp=2 bf16states=1
plan 2 shard=2 bf16states=1 refstates=float32
plan 4 rep=2 shard=2 bf16states=1
plan 4 shard=2 tp=2 bf16states=1
# SFT's masked labels (tests/support/plan_harness.h, harness_tokens_mask):
# FSDP with accumulation (step 2: one rank holds 1 valid label, the other
# the rest), TP, PP 1F1B over micro-batches of one row (some without a valid
# label), CP by documents (ptrr), HSDP, PP x FSDP
plan 2 shard=2 masked=1 docs=1 accum=2
plan 2 tp=2 masked=1
plan 2 pp=2 sched=1F1B mbs=1 masked=1 docs=1
plan 2 cp=2 bal=ptrr masked=1 docs=1
plan 4 rep=2 shard=2 masked=1
plan 4 pp=2 shard=2 sched=1F1B mbs=2 masked=1
t_done
