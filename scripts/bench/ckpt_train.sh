#!/bin/sh
# Part of scripts/bench/ckpt.sh: titan-train's step time (debugmodel on the
# CPU) without checkpoints, with a synchronous save after every step and with
# an asynchronous one (checkpoint.async_mode = "async": the state is copied to
# host memory and written on a thread while the next step runs).  Each
# step's time_s in metrics.jsonl runs from the end of the step before, so it
# holds the save that step made the training loop wait for; the mean is over
# steps 2..N, and over two runs of each configuration.
#
#   sh scripts/bench/ckpt_train.sh [WORKDIR]   (CKPT_TRAIN_STEPS, default 10)
set -eu
B=${BIN:-bin}
STEPS=${CKPT_TRAIN_STEPS:-10}
W=${1:-$(mktemp -d "${TMPDIR:-/tmp}/titan-bench-ckpt-train.XXXXXX")}
mkdir -p "$W"
. scripts/bench/lib/fortunes_data.sh
fortunes_data "$B" "$W"

train() { # NAME, then overrides: mean time_s of steps 2..N
	name=$1
	shift
	rm -rf "$W/run-$name"
	"$B/titan-train" --config configs/debug_model.toml --job.dump_folder "$W/run-$name" \
		--training.dataset_path "$W/data" --training.steps "$STEPS" --training.seq_len 256 \
		--training.local_batch_size 4 --metrics.log_freq 1000 --activation_checkpoint.mode none \
		"$@" 2>"$W/train-$name.log" || { cat "$W/train-$name.log" >&2; exit 1; }
	grep '"loss"' "$W/run-$name/metrics.jsonl" | tail -n +2 |
		sed 's/.*"time_s":\([^,]*\),.*/\1/' | awk '{ s += $1; n++ } END { printf "%.3f", s / n }'
}
ckpt="--checkpoint.enable true --checkpoint.interval 1 --checkpoint.keep_latest_k 2"
run() { # NAME: one run of that configuration
	case $1 in
	none) train none ;;
	# shellcheck disable=SC2086
	sync) train sync $ckpt --checkpoint.async_mode disabled ;;
	# shellcheck disable=SC2086
	async) train async $ckpt --checkpoint.async_mode async ;;
	esac
}
# Each configuration twice, in the order none, sync, async, async, sync, none
# (the machine's load drifts), the mean of the two; the save-call times are
# the last run's.
none=0 sync=0 async=0
for name in none sync async async sync none; do
	eval "$name=\$(awk -v a=\"\$$name\" -v b=\"\$(run $name)\" 'BEGIN { printf \"%.3f\", a + b / 2 }')"
done
waited() { # NAME: mean seconds the loop waited for a save (the trainer's log line)
	sed -n 's/.*Finished saving the checkpoint.*in \([0-9.]*\) seconds.*/\1/p' "$W/train-$1.log" |
		awk '{ s += $1; n++ } END { printf "%.3f", n ? s / n : 0 }'
}
mb=$(du -sm "$(ls -d "$W/run-async/checkpoint/step-"* | tail -n 1)" | cut -f1)
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.0f%%", 100 * (a / b - 1) }'; }
echo "titan-train debugmodel, $STEPS steps of 4 x 256 tokens, a ${mb} MB checkpoint after every step:"
echo "  mean step time: no checkpoint $none s; sync save $sync s ($(pct "$sync" "$none"));" \
	"async save in flight $async s ($(pct "$async" "$none"))"
echo "  the save call took (trainer log): sync $(waited sync) s, async $(waited async) s (staging: a copy to host" \
	"memory; the write overlaps the next step)"
