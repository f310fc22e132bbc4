#!/bin/sh
# make demo-flux: Flux (torchtitan 0.3.0's flux-debug) learning to draw
# coloured shapes from their captions, on the CPU, in minutes, from the
# repository alone.
#
#   data         build/demo/flux_shapes --centred: DEMO_FLUX_N (2048) 64-px
#                images of a large circle, square or triangle in one of five
#                colours in the centre, captioned ("a red circle"), as a
#                cc12m-style webdataset tar: 15 kinds, one picture each (the
#                270 kinds of sizes and places were too many to learn in
#                minutes)
#   encoders     scripts/demo/flux/{t5,clip}: small T5 and CLIP text encoders
#                (one layer; d_model 4096 and hidden 768, flux-debug's input
#                widths) with tokenizers over the captions' words, their
#                weights drawn by build/demo/flux_encoders (untrained: the
#                encodings tell captions apart, which is what the flow model
#                needs)
#   autoencoder  scripts/demo/flux/ae.safetensors: FLUX's AutoEncoder at
#                width 32, trained on the shapes (scripts/demo_flux_ae.py)
#   training     titan-train --module flux --config flux_debugmodel on the
#                tar, encoding on the fly, DEMO_FLUX_STEPS (140) steps of
#                DEMO_FLUX_BATCH (16); captions dropped 10% of the time (what
#                the guidance needs), the lr warmed up over 10 steps and
#                decayed over the last 30%
#   samples      the 15 captions (flux_shapes --in-order; their pictures in
#                data.png) drawn by titan-train --sample before training, in
#                one PNG grid (build/demo/flux_grid) of a shape a row and a
#                colour a column, and from the run's last checkpoint after
#
# DEMO_DIR (default build/demo-flux) holds everything; it is started afresh.
# The samples use classifier-free guidance, DEMO_FLUX_CFG (2.0; 0.3.0's
# validator's 5.0 smears the colours), and 20 steps.  On 2 cores the
# defaults take about 7.5 minutes (2.8 s a step, 6.5 minutes of training;
# each grid about 25 s): the loss falls from 2.57 to 0.91 (the last ten
# steps' mean); the samples go from speckled noise to one shape in the
# centre of each picture, the rows' circles, squares and triangles
# recognisable in about two thirds of them and the colours right in about
# two thirds, the rest smeared or mixed with another colour.  Measured on
# shapes jittered and of varied radius: batch 4 for 150 steps ended in
# coloured specks at loss 1.34, batch 16 for 140 steps in blobs at 1.00.
set -eu
D=${DEMO_DIR:-build/demo-flux}
B=${BIN:-bin}
DB=${BUILD:-build}/demo
A=scripts/demo/flux
N=${DEMO_FLUX_N:-2048}
STEPS=${DEMO_FLUX_STEPS:-140}
BATCH=${DEMO_FLUX_BATCH:-16}
P=${DEMO_FLUX_PROMPTS:-15}
CFG=${DEMO_FLUX_CFG:-2.0}
start=$(date +%s)

say() { printf '\n== %s\n' "$*" >&2; }
# grid DIR OUT: DIR's samples in one picture in the prompts' order (their
# names count from image_prompt0), 5 a row: a shape a row, a colour a column
grid() {
	dir=$1 out=$2
	shift 2
	i=0
	while [ "$i" -lt "$P" ]; do
		set -- "$@" "$dir/image_prompt${i}_rank0.png"
		i=$((i + 1))
	done
	"$DB/flux_grid" --cols 5 -o "$out" "$@"
}

missing=""
for p in "$B/titan-train" "$DB/flux_shapes" "$DB/flux_encoders" "$DB/flux_grid"; do
	[ -x "$p" ] || missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "demo-flux: not built:$missing (run make)" >&2
	exit 1
fi

rm -rf "$D"
mkdir -p "$D"

say "1/5 data: $N captioned shapes (build/demo/flux_shapes)"
"$DB/flux_shapes" -n "$N" --seed 0 --centred -o "$D/shapes.tar"
"$DB/flux_shapes" -n "$P" --seed 1 --centred --in-order -o "$D/prompts.tar"
mkdir -p "$D/prompts"
tar -xf "$D/prompts.tar" -C "$D/prompts"
for f in "$D"/prompts/*.txt; do
	cat "$f"
	echo
done >"$D/prompts.txt"
"$DB/flux_grid" --cols 5 -o "$D/data.png" "$D"/prompts/*.jpg
echo "$(wc -c <"$D/shapes.tar") bytes in $D/shapes.tar; $P prompts in $D/prompts.txt, their images in $D/data.png" >&2

say "2/5 encoders: T5 and CLIP with drawn weights, the trained autoencoder"
cp -r "$A/t5" "$A/clip" "$D/"
"$DB/flux_encoders" t5 "$D/t5"
"$DB/flux_encoders" clip "$D/clip"
ls -l "$D/t5/model.safetensors" "$D/clip/model.safetensors" "$A/ae.safetensors" >&2

# flux_debugmodel on the demo's pieces, float32 (the Flux trainer's CPU
# precision), the same seed for the samples before training and the run
flux() {
	"$B/titan-train" --module flux --config flux_debugmodel \
		--training.mixed_precision_param float32 --debug.seed 0 \
		--dataloader.img_size 64 --tokenizer.max_t5_encoding_len 8 \
		--encoder.t5_encoder "$D/t5" --encoder.clip_encoder "$D/clip" \
		--encoder.autoencoder_path "$A/ae.safetensors" \
		--tokenizer.t5_tokenizer_path "$D/t5" --tokenizer.clip_tokenizer_path "$D/clip" \
		--inference.prompts_path "$D/prompts.txt" --inference.img_size 64 \
		--inference.local_batch_size "$P" --inference.sampling.denoising_steps 20 \
		--inference.sampling.enable_classifier_free_guidance \
		--inference.sampling.classifier_free_guidance_scale "$CFG" "$@"
}

say "3/5 samples before training: titan-train --sample (the initial weights)"
flux --sample --dump_folder "$D/start" --inference.save_img_folder samples
grid "$D/start/samples" "$D/samples-start.png"

say "4/5 training: titan-train --module flux --config flux_debugmodel ($STEPS steps)"
flux --dataloader.dataset_path "$D/shapes.tar" --training.steps "$STEPS" \
	--training.local_batch_size "$BATCH" --dataloader.prompt_dropout_prob 0.1 \
	--lr_scheduler.warmup_steps 10 --lr_scheduler.decay_ratio 0.3 \
	--validator.enable --validator.freq "$STEPS" --validator.steps 1 --validator.dataloader.img_size 64 \
	--validator.dataloader.dataset_path "$D/prompts.tar" --validator.save_img_count 1 \
	--validator.save_img_folder validation \
	--checkpoint.enable --checkpoint.interval "$STEPS" --checkpoint.last_save_model_only \
	--dump_folder "$D/run"

say "5/5 samples after training: titan-train --sample (the run's last checkpoint)"
flux --sample --checkpoint.enable --dump_folder "$D/run" --inference.save_img_folder samples
grid "$D/run/samples" "$D/samples-end.png"
# the training lines' losses: the first, and the mean of the last ten
losses=$(sed -n 's/^{"step":[0-9]*,"loss":\([^,]*\),.*/\1/p' "$D/run/metrics.jsonl")
first=$(echo "$losses" | head -1)
last=$(echo "$losses" | tail -10 | awk '{ s += $1; n++ } END { if (n) printf "%.4f", s / n }')
cat <<EOF2

data              $D/shapes.tar ($N samples); prompts $D/prompts.txt
their images      $D/data.png
encoders          $D/t5 $D/clip (drawn), autoencoder $A/ae.safetensors (trained)
samples (start)   $D/samples-start.png
samples (end)     $D/samples-end.png
run               $D/run (metrics.jsonl, the last checkpoint)
loss              ${first:-?} at step 1 -> ${last:-?} (mean of the last 10 steps)
time              $(($(date +%s) - start)) s
EOF2
