#!/bin/sh
# run_train.sh: start titan-train on NGPU processes of this machine, as
# torchtitan's run_train.sh does with torchrun (here mpirun; SLURM jobs use
# scripts/slurm/multinode.sbatch).  Arguments pass through as overrides:
#
#   NGPU=8 CONFIG_FILE=configs/llama3_8b.toml ./run_train.sh --training.steps 100
#   MODULE=llama3 CONFIG=llama3_8b ./run_train.sh --training.steps 100
#
# NGPU         processes (default: the GPUs nvidia-smi lists, 1 without any);
#              each takes its local rank's GPU
# CONFIG_FILE  the TOML config (default configs/debug_model.toml)
# MODULE, CONFIG  a config by name, configs/CONFIG.toml of model.name MODULE
#              (torchtitan's newer form; CONFIG wins over CONFIG_FILE)
# TITAN_TRAIN  the program (default bin/titan-train, else titan-train on PATH)
# MPIRUN       the launcher (default mpirun); MPIRUN_ARGS more of its options
set -eu
cd "$(dirname "$0")"

if [ -z "${NGPU:-}" ]; then
	NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
	[ "${NGPU:-0}" -gt 0 ] || NGPU=1
fi
CONFIG_FILE=${CONFIG_FILE:-configs/debug_model.toml}
if [ -z "${TITAN_TRAIN:-}" ]; then
	TITAN_TRAIN=bin/titan-train
	[ -x "$TITAN_TRAIN" ] || TITAN_TRAIN=$(command -v titan-train || echo bin/titan-train)
fi
if [ -n "${CONFIG:-}" ]; then
	set -- --module "${MODULE:-llama3}" --config "$CONFIG" "$@"
else
	set -- --config "$CONFIG_FILE" "$@"
fi

# Processes are not bound to cores: each runs its own thread pool (OpenMP on
# the CPU, loader and checkpoint threads on a GPU node).
launcher="${MPIRUN:-mpirun} -np $NGPU --bind-to none"
[ "$(id -u)" -ne 0 ] || launcher="$launcher --allow-run-as-root"
[ "$NGPU" -le "$(nproc)" ] || launcher="$launcher --oversubscribe"
# shellcheck disable=SC2086
exec $launcher ${MPIRUN_ARGS:-} "$TITAN_TRAIN" "$@"
