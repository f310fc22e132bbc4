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
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${gpus:-0}" -eq 0 ]; then
	t_fails "--backend cuda without a GPU: refused" 1 "$TRAIN" --config "$TMP/job.toml" \
		--job.dump_folder "$TMP/nogpu" --backend cuda
	t_grep "  saying why, in one line" '^titan-train: .*--backend cuda: no GPU for this process' "$TMP/.err"
	t_skip "the same job on the CUDA and the CPU backend" "no GPU on this machine"
	t_done
fi

for be in cpu cuda; do
	t_run "40 steps on the $be backend" "$TRAIN" --config "$TMP/job.toml" \
		--job.dump_folder "$TMP/$be" --backend "$be"
	cp "$TMP/.err" "$TMP/$be.log"
	grep '^{"step":[0-9]*,"loss"' "$TMP/$be/metrics.jsonl" |
		sed 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/' >"$TMP/$be.loss"
done
t_grep "the log names the CUDA backend and its device" 'CUDA backend on device [0-9]* (' "$TMP/cuda.log"
t_grep "  and the arena's memory" 'memory: *[0-9.]*GiB' "$TMP/cuda.log"
join "$TMP/cpu.loss" "$TMP/cuda.loss" >"$TMP/both"
if [ "$(wc -l <"$TMP/both")" -ne 40 ]; then
	t_not_ok "40 losses from each backend" "$(wc -l <"$TMP/both") steps in common"
else
	report=$(awk '
	{ d = $3 - $2; if (d < 0) d = -d; if (d > mx) { mx = d; at = $1 }
	  if ($1 == 1) first = d / ($2 < 0 ? -$2 : $2)
	  if ($1 > 30) { sc += $2; sg += $3; k++ } }
	END { m = (sg - sc) / k; if (m < 0) m = -m
	      printf "step 1 relative %.2e, largest %.4f (step %d), last 10 means %.4f\n", first, mx, at, m
	      exit !(first < 2e-3 && mx < 0.05 && m < 0.02) }' "$TMP/both")
	if [ $? -eq 0 ]; then t_ok "CUDA tracks the CPU: $report"; else t_not_ok "CUDA tracks the CPU" "$report"; fi
fi
t_done
