"""torchtitan 0.3.0's side of scripts/bench/encode.sh: the work titan-encode
does, in torchtitan's own Python path.  flux_datasets.FluxDataset over a
folder of webdataset shards ("cc12m-test": datasets' webdataset reader, PIL's
decode and _process_cc12m_image, FluxTokenizerContainer), the default
collate into batches, then utils.preprocess_data with two FluxEmbedders
(T5EncoderModel, CLIPTextModel from the given folders) and, with --ae, the
AutoEncoder (FLUX.1's config, the weights given), float32, on the CPU.
Prints one line: "torchtitan N samples S s X images/s (load L s)", the time
from the first sample to the last batch's encodings, models loaded before.
A reference tool: titan never needs it.

    PYTHONPATH=<torchtitan 0.3.0> python encode_torch.py --data DIR --t5 DIR \
        --clip DIR --t5-tokenizer DIR --clip-tokenizer DIR [--batch 8] [--limit N]
        [--threads N] [--ae ae.safetensors]
"""
import argparse
import time

import torch
from safetensors.torch import load_file

from torchtitan.models.flux.model.autoencoder import AutoEncoder
from torchtitan.models.flux.flux_datasets import FluxDataset
from torchtitan.models.flux.model.hf_embedder import FluxEmbedder
from torchtitan.models.flux.tokenizer import FluxTokenizerContainer
from torchtitan.models.flux.utils import preprocess_data


def main():
    ap = argparse.ArgumentParser()
    for a in ("--data", "--t5", "--clip", "--t5-tokenizer", "--clip-tokenizer"):
        ap.add_argument(a, required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--ae", default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    tok = FluxTokenizerContainer(FluxTokenizerContainer.Config(
        t5_tokenizer_path=args.t5_tokenizer, clip_tokenizer_path=args.clip_tokenizer,
        max_t5_encoding_len=256))
    t5 = FluxEmbedder(FluxEmbedder.Config(version=args.t5))
    clip = FluxEmbedder(FluxEmbedder.Config(version=args.clip))
    ae = None
    if args.ae:
        ae = AutoEncoder.Config().build().eval()
        ae.load_state_dict(load_file(args.ae))
    ds = FluxDataset("cc12m-test", args.data, tok, prompt_dropout_prob=0.0, img_size=256)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch, num_workers=0)
    load = time.perf_counter() - t0
    n = 0
    start = time.perf_counter()
    with torch.no_grad():
        for inputs, images in loader:
            batch = {"t5": inputs["t5"], "clip": inputs["clip"], "image": images}
            preprocess_data(torch.device("cpu"), torch.float32, autoencoder=ae,
                            clip_encoder=clip, t5_encoder=t5, batch=batch)
            n += images.shape[0]
            if args.limit and n >= args.limit:
                break
    s = time.perf_counter() - start
    print(f"torchtitan {n} samples {s:.3f} s {n / s:.3f} images/s (load {load:.1f} s)")


if __name__ == "__main__":
    main()
