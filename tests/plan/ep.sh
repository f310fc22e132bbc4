#!/bin/sh
# Expert parallelism trains DeepSeek V3's debugmodel_small (titan's debug
# flavor with 4 heads of a narrower latent attention) as the single process
# does (test_ep under mpirun, one run per world size for all its meshes:
# t_mpi_queue): 5 steps, per-step loss and
# grad norm and the final parameters within test_ep.c's tolerances, and the
# bytes each rank sends on fsdp, efsdp, ep and the loss dimension equal to
# titan-train(1)'s formula (tp's too under EP 2 x TP 2, where ep is borrowed
# from tp: torchtitan's expert_tensor_parallel_degree 1; also on GPT-OSS's
# small debug flavor, whose experts' biases are the other kind of expert
# tensor: mlp2's bias is replicated over tp without ep); every run also
# checks that EP with experts split over tp (ETP = TP) and with FSDP's float8
# all-gather is refused.  docs=1: torchtitan 0.3.0's documents on both sides;
# mtp=1: one multi-token prediction depth (0.3.0's deepseek_v3 MTP: its
# block's experts in the head unit, sharded and exchanged as the layers'; under
# TP 2 alone and EP 2 x TP 2 its sequence-parallel rows and its own loss).
# masked=1: SFT chat data's masked labels on both sides (test_plan.c's).
# Each line: the mesh (TITAN_EP_TEST), its ranks.
# Under the sanitizers (SAN=1, several times slower) 2 steps a run.
. tests/lib.sh

T=$BUILD/tests/plan/test_ep
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
few=
[ "${SAN:-0}" = 1 ] && few=" steps=2"

ep() { # NP CASE...
	np=$1
	shift
	t_mpi_queue "$np" "$T" TITAN_EP_TEST "$*$few" "$*"
}

# A case the sanitizers skip: its code runs under them in the cases beside it
# (the same plan with documents and MTP, or with accumulation and full AC);
# make check compares its numbers.
ep_numbers() {
	if [ "${SAN:-0}" = 1 ]; then
		t_skip "mesh $*" "its code runs under the sanitizers in the cases beside it"
	else
		ep "$@"
	fi
}

ep_numbers 2 ep=2 ac=op
ep 2 ep=2 docs=1 mtp=1 ac=op
ep 4 ep=2 shard=4
ep 2 ep=2 accum=2 ac=full
ep_numbers 4 ep=2 tp=2 ac=full
ep 4 ep=2 tp=2 mtp=1 docs=1 ac=op lp=0
ep 4 ep=2 tp=2 model=gpt_oss
ep 2 ep=2 dev=1
ep 2 ep=2 masked=1 docs=1 mtp=1 accum=2 steps=2
t_done
