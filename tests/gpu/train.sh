#!/bin/sh
# titan-train on the CUDA backend (--backend cuda) against the CPU backend.
# Without a GPU: --backend cuda is refused with one line saying why, and the
# GPU half reports skipped.  With one: the same job (debugmodel, random tokens
# of a 256-word vocabulary, 4 x 64 tokens a step, torchtitan's default bf16
# autocast, 40 steps, seed 7) on both backends: the log names the CUDA
# backend, the device and its memory; the first step's loss agrees within
# 2e-3 relative (the same weights; bf16 products summed in another order:
# tests/gpu/test_gpu_model.c measures the step's loss within 1e-2 at worst),
# and the curves track: no step more than 0.05 apart and the last 10 steps'
# means within 0.02 (the CPU's own bf16 vs float32 curves stay within 0.01:
# tests/train/precision.sh).  Not yet run on a GPU: the bounds are derived,
# not measured.
# NCCL (TITAN_COMM_ALWAYS=1: FSDP's collectives through the communicators in a
# world of one): on the CPU the losses are those of the run without it, digit
# for digit (a reduction over one rank adds nothing); on the GPU the whole
# step goes through NCCL (the log counts its collectives) and its losses are
# the plain CUDA run's within 1e-3 at every step (the same computation but
# for cuDNN attention's atomics in the backward: those differences grow over
# the steps; with TITAN_COMM_ALWAYS the gathered weights are copies of the
# same floats), and so within the CPU bounds above too.
. tests/lib.sh

TRAIN="$BIN/titan-train"
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} NO_COLOR=1
if [ ! -x "$TRAIN" ] || [ ! -x "$BUILD/tests/shard/test_gen" ]; then
	t_skip "titan-train on the CUDA backend" "titan-train is not built (make GPU_CHECK=1 builds the GPU tests alone; scripts/gpu/check.sh runs a carried one)"
	t_done
fi
t_random_shards "$TMP/data" 12 400 256 120 0.05
cat >"$TMP/job.toml" <<EOF2
[model]
flavor = "debugmodel"
[optimizer]
lr = 2e-3
[lr_scheduler]
warmup_steps = 5
[training]
dataset_path = "$TMP/data"
local_batch_size = 4
seq_len = 64
steps = 40
[metrics]
log_freq = 10
[debug]
seed = 7
EOF2

t_fails "--backend: a name it does not know" 2 "$TRAIN" --config "$TMP/job.toml" --backend gpu
t_grep "--backend: the error names the choices" 'expected cpu, cuda or auto' "$TMP/.err"

# losses DUMP OUT: "step loss" lines of a run's metrics
losses() {
	grep '^{"step":[0-9]*,"loss"' "$1/metrics.jsonl" |
		sed 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/' >"$2"
}
for always in 0 1; do
	TITAN_COMM_ALWAYS=$always t_run "10 steps on the cpu backend, TITAN_COMM_ALWAYS=$always" \
		"$TRAIN" --config "$TMP/job.toml" --job.dump_folder "$TMP/cpu-always$always" \
		--backend cpu --training.steps 10 --metrics.log_freq 1
	losses "$TMP/cpu-always$always" "$TMP/cpu-always$always.loss"
done
if [ -s "$TMP/cpu-always0.loss" ] && cmp -s "$TMP/cpu-always0.loss" "$TMP/cpu-always1.loss"; then
	t_ok "  the same losses through the communicators ($(wc -l <"$TMP/cpu-always1.loss") steps)"
else
	t_not_ok "  the same losses through the communicators" "$(diff "$TMP/cpu-always0.loss" "$TMP/cpu-always1.loss" | head -4)"
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${gpus:-0}" -eq 0 ]; then
	t_fails "--backend cuda without a GPU: refused" 1 "$TRAIN" --config "$TMP/job.toml" \
		--job.dump_folder "$TMP/nogpu" --backend cuda
	t_grep "  saying why, in one line" '^titan-train: .*--backend cuda: no GPU for this process' "$TMP/.err"
	t_skip "the same job on the CUDA and the CPU backend" "no GPU on this machine"
	t_done
fi

for run in cpu cuda nccl; do
	be=$run always=0
	[ "$run" = nccl ] && be=cuda always=1
	TITAN_COMM_ALWAYS=$always t_run "40 steps on the $be backend$([ $always = 1 ] && echo ' through NCCL (world of one)')" \
		"$TRAIN" --config "$TMP/job.toml" --job.dump_folder "$TMP/$run" --backend "$be"
	cp "$TMP/.err" "$TMP/$run.log"
	losses "$TMP/$run" "$TMP/$run.loss"
done
t_grep "the log names the CUDA backend and its device" 'CUDA backend on device [0-9]* (' "$TMP/cuda.log"
t_grep "  and the arena's memory" 'memory: *[0-9.]*GiB' "$TMP/cuda.log"
t_grep "the NCCL run's log says NCCL" 'Collectives over NCCL' "$TMP/nccl.log"
n=$(sed -n 's/.*NCCL collectives: \([0-9]*\).*/\1/p' "$TMP/nccl.log")
if [ "${n:-0}" -gt 0 ]; then t_ok "  and counts $n collectives on it"; else t_not_ok "  collectives on NCCL" "$(tail -3 "$TMP/nccl.log")"; fi

# tracks RUN: the run's losses against the CPU's
tracks() {
	join "$TMP/cpu.loss" "$TMP/$1.loss" >"$TMP/both"
	if [ "$(wc -l <"$TMP/both")" -ne 40 ]; then
		t_not_ok "40 losses from the cpu and the $1 run" "$(wc -l <"$TMP/both") steps in common"
		return
	fi
	report=$(awk '
	{ d = $3 - $2; if (d < 0) d = -d; if (d > mx) { mx = d; at = $1 }
	  if ($1 == 1) first = d / ($2 < 0 ? -$2 : $2)
	  if ($1 > 30) { sc += $2; sg += $3; k++ } }
	END { m = (sg - sc) / k; if (m < 0) m = -m
	      printf "step 1 relative %.2e, largest %.4f (step %d), last 10 means %.4f\n", first, mx, at, m
	      exit !(first < 2e-3 && mx < 0.05 && m < 0.02) }' "$TMP/both")
	if [ $? -eq 0 ]; then t_ok "the $1 run tracks the CPU: $report"; else t_not_ok "the $1 run tracks the CPU" "$report"; fi
	awk -v r="$1" '{ d = $3 - $2; if (d < 0) d = -d; if (d > mx) mx = d }
	END { printf "result train %s_w1_vs_cpu_max_diff %.4f\n", r, mx }' "$TMP/both"
}
tracks cuda
tracks nccl
join "$TMP/cuda.loss" "$TMP/nccl.loss" >"$TMP/both"
report=$(awk '{ d = $3 - $2; if (d < 0) d = -d; if (d > mx) { mx = d; at = $1 } n++ }
	END { printf "%d steps, largest difference %.2e (step %d)\n", n, mx, at
	      printf "result train nccl_w1_vs_cuda_max_diff %.2e\n", mx
	      exit !(n == 40 && mx < 1e-3) }' "$TMP/both")
rc=$?
echo "$report" | grep '^result '
report=$(echo "$report" | grep -v '^result ')
if [ $rc -eq 0 ]; then t_ok "NCCL's losses are the plain CUDA run's: $report"; else t_not_ok "NCCL's losses are the plain CUDA run's" "$report"; fi
t_done
