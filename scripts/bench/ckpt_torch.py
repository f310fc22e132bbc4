"""torch.distributed.checkpoint's side of scripts/bench/ckpt.sh.

The state titan-ckpt-convert bench saves (tools/ckpt-convert/bench.c): np
parameters "layers.P.w" of (rows, 1024) float32, each with AdamW's
optimizer.state.layers.P.w.{exp_avg, exp_avg_sq} and a scalar .step, np and
rows chosen from --size the same way.  Saved or loaded with dcp.save /
dcp.load and their defaults (FileSystemWriter: one file per rank, fsync),
by one process alone or by every rank of torchrun (gloo on the CPU, each
tensor a DTensor split by rows, Shard(0), as titan's ranks split it).  Rank 0
prints "save X MB/s (...)" or "load X MB/s (...)", the wall time from a
barrier before to a barrier after.  A reference tool: titan never needs it.

    python ckpt_torch.py --dir D --size 1G --phase save
    torchrun --standalone --nproc-per-node 4 ckpt_torch.py --dir D --phase load
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

COLS = 1024
TENSOR_BYTES = 64 << 20


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def layout(size):
    per = 3 * TENSOR_BYTES
    np_ = max(1, (size + per // 2) // per)
    rows = max(1, size // (3 * np_ * COLS * 4))
    return np_, rows


def chunk_rows(rows, r, k):
    cs = (rows + k - 1) // k
    lo = min(r * cs, rows)
    return lo, min(lo + cs, rows)


def names(np_):
    for p in range(np_):
        w = f"layers.{p}.w"
        yield w, f"optimizer.state.{w}.exp_avg", f"optimizer.state.{w}.exp_avg_sq", f"optimizer.state.{w}.step"


def build(np_, rows, rank, world, fill):
    """The state dict: this rank's rows of every tensor (a DTensor when world > 1)."""
    lo, hi = chunk_rows(rows, rank, world)
    mesh = None
    if world > 1:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Shard

        mesh = init_device_mesh("cpu", (world,))
    sd, t = {}, 0
    for group in names(np_):
        for name in group[:3]:
            local = torch.empty(hi - lo, COLS, dtype=torch.float32)
            if fill:
                g = torch.arange(lo * COLS, hi * COLS, dtype=torch.float64)
                local.copy_(g.view_as(local))
                local.mul_(1e-7).add_(t)
            else:
                local.fill_(float("nan"))
            if mesh is not None:
                local = DTensor.from_local(local, mesh, [Shard(0)], run_check=False,
                                           shape=torch.Size((rows, COLS)), stride=(COLS, 1))
            sd[name] = local
            t += 1
        sd[group[3]] = torch.tensor(float(t) if fill else float("nan"))
    return sd, lo


def check(sd, lo):
    """The first and last element of every local piece (element g of tensor t
    is g * 1e-7 + t), and every step."""
    t = 0
    for group in names(len(sd) // 4):
        for name in group[:3]:
            v = sd[name]
            v = v.to_local() if hasattr(v, "to_local") else v
            if v.numel():
                first, last = lo * COLS * 1e-7 + t, (lo * COLS + v.numel() - 1) * 1e-7 + t
                if abs(v[0, 0].item() - first) > 1e-3 or abs(v[-1, -1].item() - last) > 1e-3:
                    raise SystemExit(f"{name}: loaded values differ from the saved ones")
            t += 1
        if sd[group[3]].item() != float(t):
            raise SystemExit(f"{group[3]}: loaded {sd[group[3]].item()}, saved {float(t)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--size", default="1G")
    ap.add_argument("--phase", choices=("save", "load"), required=True)
    a = ap.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    np_, rows = layout(parse_size(a.size))
    nbytes = 3 * np_ * rows * COLS * 4
    sd, lo = build(np_, rows, rank, world, a.phase == "save")

    def barrier():
        if world > 1:
            dist.barrier()

    barrier()
    t0 = time.perf_counter()
    if a.phase == "save":
        dcp.save(sd, checkpoint_id=a.dir)
    else:
        dcp.load(sd, checkpoint_id=a.dir)
    barrier()
    t = time.perf_counter() - t0
    if a.phase == "load":
        check(sd, lo)
    if rank == 0:
        what = f"{world} rank file{'s' if world > 1 else ''}" if a.phase == "save" else \
            f"{world} reader{'s' if world > 1 else ''}"
        print(f"{a.phase} {nbytes / 1e6 / t:.1f} MB/s ({t:.2f} s, {nbytes / 1e6:.0f} MB, {what})",
              flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
