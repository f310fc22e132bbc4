"""Golden for image_cc12m_draw (tests/image/test_flux_draws.c): the random draws
torchtitan 0.3.0's Flux loader makes over the cc12m test shard, from 0.3.0's own
FluxDataLoader (StatefulDataLoader, num_workers 0, batch 4, infinite, prompt
dropout 0.447, 256 px as flux_debugmodel has them) after torch.manual_seed(S),
which set_determinism calls on one rank with debug.seed = S.

    PYTHONPATH=<torchtitan 0.3.0> python scripts/flux_draws_golden.py \\
        ../shared/fixtures/torchtitan_assets/cc12m_test

writes tests/image/golden/flux_draws.txt:

    run S STEPS          torch.manual_seed(S); a DataLoader iterator
    base_seed V          the iterator's first draw (int64 random_)
    sample KEY W H OFFSET T5 CLIP
                         one yielded sample: its image's size, the crop
                         offset torch.randint drew, whether each prompt was
                         dropped (torch.rand(1) < 0.447)
    step B C H W         (STEPS cpu) a CPU training step's draws between
                         batches: randn_like of the (B, C, H, W) posterior's
                         mean, randn_like of the latents, rand(B)

Only the records are the script's: the draws are 0.3.0's, made by its dataset
class on the default generator; the tokenizer is a stand-in (no draws) whose
empty-string encoding marks a dropped prompt.
"""
import os
import sys

import torch
import torchtitan.models.flux.flux_datasets as fd
from torchtitan.models.flux.tokenizer import FluxTokenizerContainer

# importing it wraps torch.randint to record the offsets drawn (a pass-through)
from flux_pixels_golden import _offsets

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "image",
                   "golden", "flux_draws.txt")
BATCH, SIZE, DROPOUT = 4, 256, 0.447
LATENT = (BATCH, 16, SIZE // 8, SIZE // 8)

_sizes = []
_process = fd._process_cc12m_image


def _recording_process(img, output_size=256):
    _sizes.append(img.size)
    return _process(img, output_size=output_size)


fd._process_cc12m_image = _recording_process


def tokenizer():
    """A FluxTokenizerContainer in type only: 1 for a caption, 0 for ""."""
    tok = FluxTokenizerContainer.__new__(FluxTokenizerContainer)
    tok.encode = lambda text: {"t5": torch.tensor([int(text != "")]),
                               "clip": torch.tensor([int(text != "")])}
    return tok


def caption_keys(path):
    """Each caption's sample key (the shard's captions are distinct)."""
    ds = fd.load_dataset(path, split="train", data_files={"train": "*.tar"}, streaming=True)
    keys = {s["txt"]: s["__key__"] for s in ds}
    assert len(keys) == 32
    return keys


def run(path, seed, batches, cpu_steps, lines):
    keys = caption_keys(path)
    cfg = fd.FluxDataLoader.Config(dataset="cc12m-test", dataset_path=path,
                                   prompt_dropout_prob=DROPOUT, img_size=SIZE, infinite=True)
    dl = fd.FluxDataLoader(cfg, dp_world_size=1, dp_rank=0, local_batch_size=BATCH,
                           tokenizer=tokenizer())
    torch.manual_seed(seed)
    lines.append(f"run {seed} {'cpu' if cpu_steps else 'none'}")
    it = iter(dl)
    lines.append(f"base_seed {it._base_seed}")
    for _ in range(batches):
        _sizes.clear()
        _offsets.clear()
        inputs, labels = next(it)
        assert len(_sizes) == len(_offsets) == BATCH, "a skipped image: no draw for it"
        for i in range(BATCH):
            w, h = _sizes[i]
            t5 = int(inputs["t5"][i].item() == 0)
            clip = int(inputs["clip"][i].item() == 0)
            key = keys[inputs["prompt"][i]]
            lines.append(f"sample {key} {w} {h} {_offsets[i]} {t5} {clip}")
        if cpu_steps:
            # trainer.py's step on a CPU device: the posterior's sample in the
            # autoencoder, the noise, the timesteps
            mean, _ = torch.chunk(torch.zeros((LATENT[0], 2 * LATENT[1]) + LATENT[2:]), 2, dim=1)
            torch.randn_like(mean)
            torch.randn_like(torch.zeros(LATENT))
            torch.rand((BATCH,))
            lines.append("step " + " ".join(str(d) for d in LATENT))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: flux_draws_golden.py CC12M_TEST_DIR")
    lines = [f"# torchtitan 0.3.0 FluxDataLoader over {os.path.basename(sys.argv[1])}: "
             f"batch {BATCH}, {SIZE} px, prompt dropout {DROPOUT}, torch {torch.__version__}"]
    run(sys.argv[1], 0, 12, False, lines)  # 48 samples: the 32 of the shard, then again
    run(sys.argv[1], 42, 10, True, lines)
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{OUT}: {len(lines)} lines", file=sys.stderr)


if __name__ == "__main__":
    main()
