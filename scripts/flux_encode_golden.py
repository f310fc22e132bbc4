#!/usr/bin/env python3
"""Goldens for titan-encode (tests/encode/cc12m.sh): what torchtitan 0.3.0's
Flux data path makes of the cc12m test shard with the tests' deterministic
tiny encoders, the inputs the trainer's step gets.

torchtitan's own code does the work: flux_datasets.FluxDataset over the
shard ("cc12m-test", prompt dropout 0, img_size 256) with
FluxTokenizerContainer (CLIP ViT-L/14's tokenizer, and the T5 path on the
ALBERT Unigram model the tokenizer tests use), then utils.preprocess_data
with two FluxEmbedders loading the encoders that `test_fluxin mkmodels`
writes (tests/support/flux_models.c), in batches of 4 (flux_debugmodel's),
float32, no autoencoder.  The crop offset, torch.randint in
_process_cc12m_image, is made the centre, ((high - 1) // 2), as titan-encode
--crop center takes it.

Writes tests/encode/golden/cc12m.safetensors: per kept sample in order
"t5_ids" (N, 256) and "clip_ids" (N, 77) int32, "t5" (N, 256, d) and "clip"
(N, d) float32, "offset" (N) int32, "pixels_sha256" (N, 32) uint8 (of the
image tensor's (3, 256, 256) uint8 planes, checked to map back to the tensor
exactly through x / 255 * 2 - 1); the empty string's "empty_t5_ids",
"empty_clip_ids", "empty_t5", "empty_clip" (what prompt dropout puts in);
metadata "keys" (space-separated), "t5_weights" and "clip_weights" (the
identities titan-encode computes, so the test knows the generator made the
same weights).

With --coco, the same for the COCO layout torchtitan's validation reads
("coco-validation": howard-hou/COCO-Text's parquet rows, _coco_data_processor
taking caption[0]), at img_size 64: first it writes
tests/encode/golden/coco/*.parquet, six rows (an image struct of bytes and
path from tests/image/golden/img, a caption list, an image_id, an OCR token
list) in the layouts pyarrow writes: SNAPPY with dictionaries and v1 pages in
row groups of 4 (as datasets writes them), ZSTD with v2 pages, GZIP plain,
uncompressed with a dictionary and v2 pages; then
tests/encode/golden/coco.safetensors from the first through torchtitan, with
"moments" (N, 2z, 64/f, 64/f) besides: the encoder's output of torchtitan's
AutoEncoder (lib/fluxae's tiny test config and the weights its
tests/fluxae/golden/weights.json draws, which test_fluxin mkmodels writes into
ae.safetensors) on each image tensor, what AutoEncoder.encode
samples from, and "ae_weights" in the metadata.

Run from the repository root, after make and make fixtures (local):
  PYTHONPATH=/path/to/torchtitan-0.3.0 python scripts/flux_encode_golden.py [--coco]
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import load_file, save_file

import torchtitan.models.flux.flux_datasets as fd
from torchtitan.hf_datasets import DatasetConfig
from torchtitan.models.flux.model.autoencoder import AutoEncoder
from torchtitan.models.flux.model.hf_embedder import FluxEmbedder
from torchtitan.models.flux.tokenizer import FluxTokenizerContainer
from torchtitan.models.flux.utils import preprocess_data

BUILD = os.environ.get("BUILD", "build")
FIXTURES = os.environ.get("TITAN_FIXTURES", "../shared/fixtures")
OUT = "tests/encode/golden/cc12m.safetensors"
TOKENIZERS = os.path.join(BUILD, "fixtures/tokenizers")
BATCH = 4


def weights_identity(folder):
    """fluxrec_weights_sha256: name, NUL, SHA-256 of each weight file in name order."""
    h = hashlib.sha256()
    for name in sorted(os.listdir(folder)):
        if name == "config.json" or name.endswith(".safetensors"):
            h.update(name.encode() + b"\0")
            h.update(hashlib.sha256(open(os.path.join(folder, name), "rb").read()).digest())
    return h.hexdigest()


def centre_randint(low, high, size):
    return torch.tensor([(high - 1) // 2])


def with_key(processor):
    def run(sample, tokenizer, output_size=256):
        d = processor(sample, tokenizer, output_size=output_size)
        d["key"] = sample["__key__"] if "__key__" in sample else sample["image_id"]
        return d
    return run


IMG = "tests/image/golden/img"
COCO_ROWS = [  # image, captions, image_id
    ("jpeg_200x150_s2.jpg", ["A dog asleep on a red sofa.", "A second caption."], "391895"),
    ("webp_lossy_64x200.webp", ["ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ: 東京タワーの夜景"], "522418"),
    ("png_grey2_160x48.png", ["Too small: skipped by both sides."], "184613"),
    ("jpeg_127x64_s1.jpg", [""], "318219"),
    ("jpeg_64x200_s0.jpg", ["a long caption " * 40], "554625"),
    ("webp_lossy_127x64.webp", ["Sign: STOP", "x"], "574769"),
]
COCO_VARIANTS = {  # file: pyarrow.parquet.write_table options
    "snappy_dict_v1": dict(compression="snappy", use_dictionary=True, data_page_version="1.0",
                           row_group_size=4),
    "zstd_v2": dict(compression="zstd", use_dictionary=False, data_page_version="2.0"),
    "gzip_plain": dict(compression="gzip", use_dictionary=False, data_page_version="1.0"),
    "none_dict_v2": dict(compression="none", use_dictionary=True, data_page_version="2.0"),
}


def coco_files(out_dir):
    """The rows as datasets writes them: its features in the schema's metadata."""
    import datasets
    import pyarrow.parquet as pq
    os.makedirs(out_dir, exist_ok=True)
    strings = datasets.Sequence(datasets.Value("string"))
    features = datasets.Features({"image": datasets.Image(),
                                  "coco_file_name": datasets.Value("string"),
                                  "image_id": datasets.Value("string"), "caption": strings,
                                  "ocr_tokens": strings})
    ds = datasets.Dataset.from_dict({
        "image": [{"bytes": open(os.path.join(IMG, f), "rb").read(), "path": f}
                  for f, _, _ in COCO_ROWS],
        "coco_file_name": [f"COCO_train2014_{i}.jpg" for _, _, i in COCO_ROWS],
        "image_id": [i for _, _, i in COCO_ROWS],
        "caption": [c for _, c, _ in COCO_ROWS],
        "ocr_tokens": [["stop", "sign"]] * len(COCO_ROWS)}, features=features)
    table = ds.data.table
    for name, opts in COCO_VARIANTS.items():
        pq.write_table(table, os.path.join(out_dir, f"coco_{name}.parquet"), **opts)


def main():
    coco = "--coco" in sys.argv
    global OUT
    if coco:
        OUT = "tests/encode/golden/coco.safetensors"
        coco_files("tests/encode/golden/coco")
    models = tempfile.mkdtemp(prefix="flux-golden-")
    subprocess.run([os.path.join(BUILD, "tests/encode/test_fluxin"), "mkmodels", models], check=True)
    t5_dir, clip_dir = os.path.join(models, "t5"), os.path.join(models, "clip")

    tok = FluxTokenizerContainer(FluxTokenizerContainer.Config(
        t5_tokenizer_path=os.path.join(TOKENIZERS, "sentencepiece_unigram"),
        clip_tokenizer_path=os.path.join(TOKENIZERS, "clip_vit_l14"),
        max_t5_encoding_len=256))
    name = "coco-validation" if coco else "cc12m-test"
    cfg = fd.DATASETS[name]
    fd.DATASETS[name] = DatasetConfig(path=cfg.path, loader=cfg.loader,
                                      sample_processor=with_key(cfg.sample_processor))
    if coco:  # datasets takes the split from the file's name
        data = os.path.join(models, "coco")
        os.makedirs(os.path.join(data, "data"))
        shutil.copy("tests/encode/golden/coco/coco_snappy_dict_v1.parquet",
                    os.path.join(data, "data/validation-00000-of-00001.parquet"))
    else:
        data = os.path.join(FIXTURES, "torchtitan_assets/cc12m_test")
    ds = fd.FluxDataset(name, data, tok, prompt_dropout_prob=0.0, img_size=64 if coco else 256)
    offsets = []
    real_randint = torch.randint

    def randint(low, high, size):
        offsets.append((high - 1) // 2)
        return centre_randint(low, high, size)
    torch.randint = randint
    samples = list(ds)
    torch.randint = real_randint

    t5 = FluxEmbedder(FluxEmbedder.Config(version=t5_dir))
    clip = FluxEmbedder(FluxEmbedder.Config(version=clip_dir))
    ae = None
    if coco:
        cfg = json.load(open(os.path.join(models, "ae.json")))
        cfg["ch_mult"] = tuple(cfg["ch_mult"])
        ae = AutoEncoder.Config(**cfg).build().eval()
        ae.load_state_dict(load_file(os.path.join(models, "ae.safetensors")))
    keys, t5_ids, clip_ids, t5_out, clip_out, px_sha, moments = [], [], [], [], [], [], []
    for i in range(0, len(samples), BATCH):
        chunk = samples[i:i + BATCH]
        batch = {"t5": torch.stack([s["t5"] for s, _ in chunk]),
                 "clip": torch.stack([s["clip"] for s, _ in chunk])}
        with torch.no_grad():
            out = preprocess_data(torch.device("cpu"), torch.float32, autoencoder=None,
                                  clip_encoder=clip, t5_encoder=t5, batch=batch)
        if ae is not None:
            with torch.no_grad():
                moments.append(ae.encoder(torch.stack([img for _, img in chunk])))
        for j, (s, img) in enumerate(chunk):
            keys.append(s["key"])
            t5_ids.append(s["t5"].reshape(-1).to(torch.int32))
            clip_ids.append(s["clip"].reshape(-1).to(torch.int32))
            t5_out.append(out["t5_encodings"][j])
            clip_out.append(out["clip_encodings"][j])
            u8 = torch.round((img + 1) / 2 * 255).to(torch.uint8)
            back = u8.float() / 255.0 * 2.0 - 1.0
            assert torch.equal(back, img), s["key"]
            px_sha.append(torch.tensor(list(hashlib.sha256(u8.numpy().tobytes()).digest()),
                                       dtype=torch.uint8))
    empty = tok.encode("")
    with torch.no_grad():
        e_t5 = t5(empty["t5"].reshape(1, -1).to(torch.int))[0]
        e_clip = clip(empty["clip"].reshape(1, -1).to(torch.int))[0]
    assert len(offsets) == len(samples), "a sample was skipped: the offsets would not line up"
    tensors = {
        "t5_ids": torch.stack(t5_ids), "clip_ids": torch.stack(clip_ids),
        "t5": torch.stack(t5_out).contiguous(), "clip": torch.stack(clip_out).contiguous(),
        "offset": torch.tensor(offsets, dtype=torch.int32),
        "pixels_sha256": torch.stack(px_sha),
        "empty_t5_ids": empty["t5"].reshape(-1).to(torch.int32),
        "empty_clip_ids": empty["clip"].reshape(-1).to(torch.int32),
        "empty_t5": e_t5.contiguous(), "empty_clip": e_clip.contiguous(),
    }
    meta = {"keys": " ".join(keys), "t5_weights": weights_identity(t5_dir),
            "clip_weights": weights_identity(clip_dir)}
    if ae is not None:
        tensors["moments"] = torch.cat(moments).contiguous()
        h = hashlib.sha256()
        h.update(b"ae.safetensors\0")
        h.update(hashlib.sha256(open(os.path.join(models, "ae.safetensors"), "rb").read()).digest())
        meta["ae_weights"] = h.hexdigest()
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    save_file(tensors, OUT, metadata=meta)
    print(f"{OUT}: {len(keys)} samples, T5 {tuple(tensors['t5'].shape)}, "
          f"CLIP {tuple(tensors['clip'].shape)}", file=sys.stderr)


if __name__ == "__main__":
    main()
