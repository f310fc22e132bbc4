#!/bin/sh
# Every family's debug flavor under the parallel plans trains as the single
# process does (test_family_plan under mpirun, one run per world size for all
# its cases: t_mpi_queue): 5 steps of
# 4 x 32 tokens, per-step loss and grad norm, the final parameters and the
# MoE layers' expert_bias within the tolerances of test_family_plan.c.  The
# MoE families run titan's small MoE flavors, as tests/family/train.sh does.
# Each line: the ranks, the case (TITAN_FAMILY_PLAN): FSDP 2, then TP 2,
# for every family.
. tests/lib.sh
# Under the sanitizers (SAN=1, several times slower) every case runs 2 steps
# (one from fresh weights, one with AdamW's state: the same code as 5 steps);
# the 5-step tolerances are judged in make check.
STEPS=
[ "${SAN:-0}" = 1 ] && STEPS=" steps=2"

T=$BUILD/tests/family/test_family_plan
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive

plan() { # NP CASE...
	np=$1
	shift
	t_mpi_queue "$np" "$T" TITAN_FAMILY_PLAN "$*$STEPS" "$*"
}

plan 2 qwen3:debugmodel shard=2
plan 2 qwen3:debugmodel_moe_small shard=2 accum=2
plan 2 deepseek_v3:debugmodel_small shard=2
plan 2 llama4:debugmodel shard=2
plan 2 gpt_oss:debugmodel_small shard=2
plan 2 qwen3:debugmodel tp=2
plan 2 qwen3:debugmodel_moe_small tp=2 async=1
plan 2 llama4:debugmodel tp=2
plan 2 deepseek_v3:debugmodel_small tp=2
plan 2 gpt_oss:debugmodel_small tp=2
t_done
