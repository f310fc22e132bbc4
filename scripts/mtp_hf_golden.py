#!/usr/bin/env python3
"""Golden names of DeepSeek V3's HF export with multi-token prediction, as
torchtitan 0.3.0's DeepSeekV3StateDictAdapter.to_hf gives them (tests/ckpt/
mtp_hf.sh compares titan-ckpt-convert to-hf against it).

The model is 0.3.0's deepseek_v3 "debugmodel" with num_mtp_layers=1 (the
preset deepseek_v3_debugmodel_mtp's), built on the meta device: only the
names and shapes of its state dict matter.  to_hf runs on that state dict as
0.3.0's offline conversion does (plain tensors: experts split one per
expert).

Writes tests/ckpt/golden/tt030_mtp_hf/to_hf.tsv: one line per HF tensor,
"<hf name>\t<shape, comma-separated>", sorted by name.

Run: PYTHONPATH=<torchtitan 0.3.0> $PYTHON scripts/mtp_hf_golden.py
"""
import os

import torch

from torchtitan.models.deepseek_v3 import model_registry
from torchtitan.models.deepseek_v3.state_dict_adapter import DeepSeekV3StateDictAdapter

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ckpt",
                   "golden", "tt030_mtp_hf", "to_hf.tsv")


def main():
    spec = model_registry("debugmodel", num_mtp_layers=1)
    with torch.device("meta"):
        model = spec.model.build()
    sd = model.state_dict()
    assert any(k.startswith("mtp_layers.0.") for k in sd), "no MTP depth in the model"
    hf = DeepSeekV3StateDictAdapter(spec.model, None).to_hf(sd)
    with open(OUT, "w") as f:
        for name in sorted(hf):
            f.write("%s\t%s\n" % (name, ",".join(str(d) for d in hf[name].shape)))
    print("%d HF tensors, %d of the depth" % (
        len(hf), sum(1 for k in hf if k.startswith("model.layers.%d." % len(model.layers)))))


if __name__ == "__main__":
    main()
