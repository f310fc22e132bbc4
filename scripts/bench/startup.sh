#!/bin/sh
# Start-up of titan-train: the seconds from exec to its "Training starts"
# line (everything before the first step: libraries, MPI when launched, the
# config, the data, the model, the MFU probe) and to the first step's line,
# on debugmodel (configs/debug_model.toml: torchtitan's llama3
# debug_model.toml, batch 8 x 2048, and a small batch 1 x 256 where the step
# itself is short), one process and 4 ranks under mpirun (FSDP 4).  Beside it,
# torchtitan's floor on the same machine: `import torchtitan.train` and the
# interpreter alone, in $PYTHON (torchtitan 0.2.2 cannot train on a machine
# without a GPU: its device_type falls back to "cuda").
#
# Each figure is the median of STARTUP_REPEAT runs (default 5); the load is
# printed with the table.
set -eu
BIN=${BIN:-bin}
PY=${PYTHON:-python3}
N=${STARTUP_REPEAT:-5}
W=$(mktemp -d "${TMPDIR:-/tmp}/titan-bench-startup.XXXXXX")
trap 'rm -rf "$W"' EXIT
export OMP_WAIT_POLICY=passive NO_COLOR=1
mpirun="mpirun --oversubscribe --bind-to none"
[ "$(id -u)" -ne 0 ] || mpirun="$mpirun --allow-run-as-root"

. scripts/bench/lib/fortunes_data.sh
fortunes_data "$BIN" "$W"

now() { date +%s.%N; }
# since START PATTERN: the seconds from START to the time stamped on the log's
# first line that matches PATTERN, by titan itself (its log lines carry the
# time to the millisecond), not when a reader of the pipe got the line: a
# shell that stamped each line as it came (a date and a bc each) fell 15 ms
# further behind at every line, some 0.1-0.2 s by "Training starts"
since() {
	t=$(grep -m1 "$2" "$W/log" | sed -n 's/^\[titan\] \([0-9-]* [0-9:]*\),\([0-9]*\) .*/\1.\2/p')
	if [ -n "$t" ]; then echo "$(date -d "$t" +%s.%N) - $1" | bc; fi
}
# median: of the numbers on standard input
median() { sort -n | awk '{ v[NR] = $1 } END { printf "%.3f", NR ? v[int((NR + 1) / 2)] : 0 }'; }

# run LABEL LAUNCH... -- ARGS: N runs of titan-train, 1 step; the two times
run() {
	label=$1
	shift
	: >"$W/ready"
	: >"$W/step"
	for _ in $(seq "$N"); do
		rm -rf "$W/run"
		s=$(now)
		"$@" --config configs/debug_model.toml --job.dump_folder "$W/run" \
			--training.dataset_path "$W/data" --training.steps 1 >"$W/log" 2>&1
		since "$s" 'Training starts' >>"$W/ready"
		since "$s" 'step:  *1 ' >>"$W/step"
	done
	printf "%-52s %9s %9s\n" "$label" "$(median <"$W/ready")" "$(median <"$W/step")"
}

echo "load: $(uptime | sed 's/.*load average: //')   cores: $(nproc)   runs: median of $N"
printf "%-52s %9s %9s\n" "seconds from exec" "to start" "to step 1"
run "titan, 1 process, batch 8 x 2048" "$BIN/titan-train"
run "titan, 1 process, batch 1 x 256" "$BIN/titan-train" --training.local_batch_size 1 \
	--training.seq_len 256
run "titan, 4 ranks (mpirun, FSDP 4), batch 1 x 256" $mpirun -np 4 "$BIN/titan-train" \
	--threads 1 --training.local_batch_size 1 --training.seq_len 256

: >"$W/v"
for _ in $(seq "$N"); do
	s=$(now)
	"$BIN/titan-train" --version >/dev/null
	echo "$(now) - $s" | bc >>"$W/v"
done
printf "%-52s %9s\n" "titan-train --version (exec and exit)" "$(median <"$W/v")"

if "$PY" -c 'import torchtitan' 2>/dev/null; then
	for what in "import torchtitan.train" "pass"; do
		: >"$W/t"
		for _ in $(seq "$N"); do
			s=$(now)
			"$PY" -c "$what" >/dev/null 2>&1
			echo "$(now) - $s" | bc >>"$W/t"
		done
		printf "%-52s %9s\n" "python -c '$what'" "$(median <"$W/t")"
	done
	echo "torchtitan $("$PY" -c 'import importlib.metadata as m; print(m.version("torchtitan"))'), torch $("$PY" -c 'import torch; print(torch.__version__)')"
else
	echo "torchtitan: skipped (\$PYTHON=$PY cannot import torchtitan)"
fi
