"""Golden mesh layouts from torchtitan 0.2.2's ParallelDims, for tests/mesh.

For each mesh below and each listed rank, the world ranks of the rank's group
in every dimension torchtitan builds (pp, batch, loss, dp_replicate, fsdp, cp,
tp, ep, efsdp, etp), from DeviceMesh over torch's fake process group (no
devices, no processes).  Writes tests/mesh/golden.txt:

    W dp_replicate dp_shard cp tp pp ep etp rank DIM ranks,comma,separated

Run: PYTHON=... $PYTHON scripts/mesh_golden.py > tests/mesh/golden.txt
"""
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
from torchtitan.distributed.parallel_dims import ParallelDims

# (world, dp_replicate, dp_shard, cp, tp, pp, ep, etp, ranks to list or None: all)
MESHES = [
    (1, 1, -1, 1, 1, 1, 1, 1, None),
    (8, 2, -1, 1, 2, 1, 2, 1, None),
    (8, 1, 4, 1, 2, 1, 1, 1, None),
    (12, 1, 3, 1, 2, 2, 1, 1, None),
    (16, 1, 2, 2, 2, 2, 1, 1, None),
    (16, 1, 2, 2, 4, 1, 4, 4, None),
    (8, 1, 2, 2, 2, 1, 2, 1, None),
    (256, 1, -1, 1, 8, 1, 1, 1, [0, 9, 255]),     # Llama 3 70B: FSDP 32 x TP 8
    (512, 1, -1, 1, 8, 8, 1, 1, [0, 77, 511]),    # Llama 3 405B: FSDP 8 x TP 8 x PP 8
]
DIMS = ["pp", "batch", "loss", "dp_replicate", "fsdp", "cp", "tp", "ep", "efsdp", "etp"]


def main():
    print("# torchtitan 0.2.2 ParallelDims layouts (scripts/mesh_golden.py)")
    for w, dpr, dps, cp, tp, pp, ep, etp, ranks in MESHES:
        for rank in ranks if ranks is not None else range(w):
            dist.init_process_group("fake", rank=rank, world_size=w, store=FakeStore())
            pd = ParallelDims(dp_replicate=dpr, dp_shard=dps, cp=cp, tp=tp, pp=pp, ep=ep,
                              etp=etp, world_size=w)
            pd.build_mesh()
            for d in DIMS:
                group = pd._meshes[d].mesh.flatten().tolist()
                print(w, dpr, dps, cp, tp, pp, ep, etp, rank, d, ",".join(map(str, group)))
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
