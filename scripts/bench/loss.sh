#!/bin/sh
# The loss's memory at Llama 3 8B's vocabulary (128256), one row of T tokens,
# float32: the planner's prediction (titan-train --dry-run on configs/llama3_8b.toml
# at that seq_len: its loss line) beside the peak each loss added to the
# process's resident memory, measured on the CPU with a model reduced to one
# layer of dim 64 (the logits depend on the rows and the vocabulary only):
#   titan        titan's head, chunks of 256 rows (tests/model/bench_loss T 0)
#   titan-whole  the same loss in one chunk (bench_loss T T)
#   torch        torchtitan's CrossEntropyLoss on the whole logits (0.2.2's loss)
#   torch-030    0.3.0's ChunkedLossWrapper, loss.num_chunks 8
# (scripts/loss_mem_torch.py; PYTHON with torch, TT030 the folder holding
# torchtitan 0.3.0's package; without them the torch rows say so.)
#
# Environment: BENCH_SEQS (default "2048 4096 8192"), BENCH_TORCH_MAX_MIB
# (skip a torch run predicted above this, default 12500: torch's plain loss at
# 8192 holds 11.7 GiB), PYTHON, TT030.
set -eu
BIN=${BIN:-bin}
BUILD=${BUILD:-build}
PY=${PYTHON:-python3}
TT030=${TT030:-}
SEQS=${BENCH_SEQS:-2048 4096 8192}
MAX=${BENCH_TORCH_MAX_MIB:-12500}
make -s "$BUILD/tests/model/bench_loss" "$BIN/titan-train" >&2
torch=1
PYTHONPATH="$TT030${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c \
	'from torchtitan.components.loss import ChunkedLossWrapper' 2>/dev/null || torch=0

get() { # key line
	printf '%s\n' "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"
}
mib() { # bytes
	awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'
}
printf '%-6s %-12s %12s %10s %12s %9s\n' seq loss "planned MiB" "+other" "measured MiB" "meas/plan"
for t in $SEQS; do
	plan=$(NO_COLOR=1 OMP_NUM_THREADS=1 "$BIN/titan-train" --config configs/llama3_8b.toml \
		--training.seq_len "$t" --training.local_batch_size 1 --training.dtype float32 \
		--training.mixed_precision_param float32 --dry-run --json --world-size 1 \
		--device-memory 1TiB)
	for kind in titan titan-whole torch torch-030; do
		case $kind in
		titan) key=bytes ;;
		titan-whole) key=unchunked_bytes ;;
		torch) key=torch_bytes ;;
		torch-030) key=torch_030_bytes ;;
		esac
		want=$(mib "$(printf '%s' "$plan" | jq ".loss.$key")")
		case $kind in
		titan) line=$("$BUILD/tests/model/bench_loss" "$t" 0) ;;
		titan-whole) line=$("$BUILD/tests/model/bench_loss" "$t" "$t") ;;
		torch | torch-030)
			if [ "$torch" = 0 ]; then
				printf '%-6s %-12s %12s %10s %12s   not available: %s cannot import torchtitan 0.3.0 (TT030)\n' \
					"$t" "$kind" "$want" - - "$PY"
				continue
			fi
			if awk -v w="$want" -v m="$MAX" 'BEGIN { exit !(w > m) }'; then
				printf '%-6s %-12s %12s %10s %12s   skipped: above BENCH_TORCH_MAX_MIB %s\n' \
					"$t" "$kind" "$want" - - "$MAX"
				continue
			fi
			mode=plain
			[ "$kind" = torch ] || mode=chunked
			line=$(PYTHONPATH="$TT030${PYTHONPATH:+:$PYTHONPATH}" "$PY" scripts/loss_mem_torch.py "$t" "$mode" 8) ;;
		esac
		got=$(get step_rss_mib "$line")
		# titan's step holds the reduced model's other activations too: the
		# model's own figure for them (model_activation_bytes less the loss)
		other=0
		case $kind in titan*)
			other=$(awk -v a="$(get planned_act_mib "$line")" -v l="$(get planned_loss_mib "$line")" \
				'BEGIN { printf "%.1f", a - l }') ;;
		esac
		printf '%-6s %-12s %12s %10s %12s %9s\n' "$t" "$kind" "$want" "$other" "$got" \
			"$(awk -v g="$got" -v w="$want" -v o="$other" 'BEGIN { printf "%.3f", g / (w + o) }')"
	done
done
echo "measured: the peak resident memory the step added (VmHWM reset before it); +other:" \
	"the rest of the reduced model's activations in titan's step, by the model's own figure"
