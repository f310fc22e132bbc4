#!/bin/sh
# titan-train --module llama3 --config sft_debugmodel: torchtitan 0.3.0's SFT
# preset on its own chat data (torchtitan's tests/assets/sft_test/data.json as
# tests/train/sft/data.jsonl) through titan-tokenize --chat --chat-fields
# question,answer (its sample_processor) and the loader's ChatDataLoader
# packing: 10 steps whose loss equals 0.3.0's (tests/train/golden/tt030_sft.tsv,
# scripts/tt030_golden.py sft_debugmodel: 0.3.0's ChatDataset, chunked loss
# over the unmasked tokens of the step, AdamW and schedule) within 1e-4 (1e-5
# at step 1), the grad norm within 1e-5 (GN32, tests/train/tt030.inc), the lr
# exactly; measured, the loss within 1.2e-7 and the grad norm 3e-7.
. tests/lib.sh
. tests/train/tt030.inc
t_need_fixture tokenizers/torchtitan_test

SFT=tests/train/golden/tt030_sft.tsv
"$BIN/titan-tokenize" -q --chat --chat-fields question,answer \
	--tokenizer "$(fx tokenizers/torchtitan_test)" tests/train/sft/data.jsonl >"$TMP/chat.tts"
"$BIN/titan-shard" -q --out "$TMP/chat" --val-fraction 0 "$TMP/chat.tts"
t_run "10 steps of sft_debugmodel as 0.3.0" "$TRAIN" --module llama3 --config sft_debugmodel \
	--training.local_batch_size 2 --training.seq_len 128 \
	--training.mixed_precision_param float32 --debug.seed 7 \
	--dataloader.dataset_path "$TMP/chat" --dump_folder "$TMP/a" \
	--checkpoint.enable --checkpoint.interval 5
steps_of "$TMP/a/metrics.jsonl" >"$TMP/a.tsv"
t_steps "the loss, grad norm and lr equal 0.3.0's at every step" "$SFT" "$TMP/a.tsv" 1 10 "" \
	1e-4 $GN32
# the loader's SFT position and the model, optimizer and schedule resume from
# step 5 to the same steps 6-10, bit for bit
t_run "resumed from step 5" "$TRAIN" --module llama3 --config sft_debugmodel \
	--training.local_batch_size 2 --training.seq_len 128 \
	--training.mixed_precision_param float32 --debug.seed 7 \
	--dataloader.dataset_path "$TMP/chat" --dump_folder "$TMP/a" \
	--checkpoint.enable --checkpoint.interval 5 --checkpoint.load_step 5
steps_of "$TMP/a/metrics.jsonl" | awk 'NR > 10' >"$TMP/a.resumed.tsv"
steps_of "$TMP/a/metrics.jsonl" | awk 'NR > 5 && NR <= 10' >"$TMP/a.first.tsv"
t_same "steps 6-10 after the resume are the run's" "$TMP/a.first.tsv" "$TMP/a.resumed.tsv"
# each dp rank packs its own block of the conversations (split_dataset_by_node)
t_fails "resuming on 2 dp ranks is refused" 1 env OMP_NUM_THREADS=1 $MPIRUN_REFUSED -np 2 \
	"$TRAIN" --module llama3 --config sft_debugmodel --training.local_batch_size 2 \
	--training.seq_len 128 --training.mixed_precision_param float32 --debug.seed 7 \
	--dataloader.dataset_path "$TMP/chat" --dump_folder "$TMP/a" --checkpoint.enable \
	--checkpoint.interval 5 --checkpoint.load_step 5
t_grep "saying the dp degree cannot change" 'SFT data loader state of 1 dp ranks, this run has 2' \
	"$TMP/.err"
# TP 2 (both ranks read the same rows): 0.3.0's steps too
t_run "10 steps under TP 2" env OMP_NUM_THREADS=1 $MPIRUN -np 2 "$TRAIN" --module llama3 \
	--config sft_debugmodel --training.local_batch_size 2 --training.seq_len 128 \
	--training.mixed_precision_param float32 --debug.seed 7 \
	--dataloader.dataset_path "$TMP/chat" --dump_folder "$TMP/tp" \
	--parallelism.tensor_parallel_degree 2
steps_of "$TMP/tp/metrics.jsonl" >"$TMP/tp.tsv"
t_steps "TP 2: the loss, grad norm and lr equal 0.3.0's at every step" "$SFT" "$TMP/tp.tsv" \
	1 10 "" 1e-4 $GN32

t_fails "training.sft outside a 0.3.0 run is refused" 1 "$TRAIN" --training.sft \
	--training.dataset_path "$TMP/chat" --training.steps 1 --job.dump_folder "$TMP/b"
t_grep "saying why" "training.sft: SFT chat data is torchtitan 0.3.0's ChatDataLoader" "$TMP/.err"
t_fails "chat shards without training.sft are refused (the prompts would be trained on)" 1 \
	"$TRAIN" --module llama3 --config llama3_debugmodel --dataloader.dataset_path "$TMP/chat" \
	--training.steps 1 --dump_folder "$TMP/c"
t_grep "saying so" "label-masked shards (SFT chat data" "$TMP/.err"
t_fails "sample_processor stays Python's" 2 "$TRAIN" --module llama3 --config sft_debugmodel \
	--dataloader.sample_processor x
t_done
