#!/usr/bin/env python3
"""Load titan-written checkpoints with PyTorch (tests/ckpt/torch_interop.sh).

  ckpt_torch_check.py load DIR REF.safetensors REF.json
      dcp.load into a state dict of empty tensors and placeholder values (one
      process), then every tensor must equal the reference and every value
      reference.json's
  ckpt_torch_check.py load2 DIR REF.safetensors
      two processes (gloo) load every tensor as a DTensor sharded on its last dim
  ckpt_torch_check.py pt FILE.pt REF.safetensors
      torch.load(weights_only=True) of a torch.save file; nested dicts flattened
  ckpt_torch_check.py to_pt DIR OUT.pt
      format_utils.dcp_to_torch_save
Exit status 0 when everything matches.
"""
import json
import os
import sys

import torch
import torch.distributed.checkpoint as dcp


def ref_tensors(path):
    from safetensors.torch import load_file
    return load_file(path)


def flatten(d, prefix=""):
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def check_values(sd, ref_json):
    vals = json.load(open(ref_json))["values"]
    for k, want in vals.items():
        got = sd[k]
        if isinstance(want, dict) and "bytes_hex" in want:
            want = bytes.fromhex(want["bytes_hex"])
        if isinstance(got, tuple):
            got = list(got)
        assert got == want, (k, got, want)
    return len(vals)


def cmd_load(d, ref, ref_json):
    md = dcp.FileSystemReader(d).read_metadata()
    sd = {}
    for k, m in md.state_dict_metadata.items():
        sd[k] = torch.empty(m.size, dtype=m.properties.dtype) if hasattr(m, "size") else None
    try:
        dcp.load(sd, checkpoint_id=d, no_dist=True)
    except TypeError:  # torch <= 2.3: no no_dist; without a process group it runs alone
        dcp.load(sd, storage_reader=dcp.FileSystemReader(d))
    r = ref_tensors(ref)
    n = 0
    for k, v in sd.items():
        if isinstance(v, torch.Tensor):
            assert torch.equal(v, r[k]), k
            n += 1
    nv = check_values(sd, ref_json) if ref_json else 0
    print(f"torch {torch.__version__} dcp.load: {n} tensors and {nv} values equal the reference")


def rank_load(rank, d, ref):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    dist.init_process_group("gloo", rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    md = dcp.FileSystemReader(d).read_metadata()
    sd = {k: distribute_tensor(torch.zeros(m.size, dtype=m.properties.dtype), mesh,
                               [Shard(max(len(m.size) - 1, 0))] if len(m.size) else [])
          for k, m in md.state_dict_metadata.items() if hasattr(m, "size") and len(m.size)}
    dcp.load(sd, checkpoint_id=d)
    r = ref_tensors(ref)
    for k, v in sd.items():
        assert torch.equal(v.full_tensor(), r[k]), k
    if rank == 0:
        print(f"2-process load, sharded on the last dim: {len(sd)} tensors equal")
    dist.destroy_process_group()


def cmd_pt(path, ref):
    sd = flatten(torch.load(path, weights_only=True))
    r = ref_tensors(ref)
    n = 0
    for k, v in sd.items():
        if isinstance(v, torch.Tensor):
            assert torch.equal(v, r[k]), k
            n += 1
    assert n > 0
    print(f"torch.load(weights_only=True): {n} tensors equal")


def main():
    cmd = sys.argv[1]
    if cmd == "load":
        cmd_load(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
    elif cmd == "load2":
        torch.multiprocessing.spawn(rank_load, args=(sys.argv[2], sys.argv[3]), nprocs=2, join=True)
    elif cmd == "pt":
        cmd_pt(sys.argv[2], sys.argv[3])
    elif cmd == "to_pt":
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
        dcp_to_torch_save(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
