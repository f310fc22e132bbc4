#!/usr/bin/env python3
"""Golden data for titan's pipeline schedules (tests/pp/test_pp_torch.c).

What torch.distributed.pipelining really EXECUTES, per rank, for each schedule
torchtitan 0.2.2 names, over a grid of pipeline degrees, stages per rank and
micro-batch counts: every rank's schedule object is built on real
PipelineStage objects over torch's "fake" process group (communication is a
no-op), and the stage's forward / backward / weight-backward entry points are
wrapped to record the order they are called in.  That order is the reference,
not the schedule's printable pipeline_order (which for 1F1B numbers the
micro-batches of the last rank wrongly).  Where torch refuses the arguments, its
message is recorded instead.

Also: torchtitan's generate_llm_fqn_per_model_part (the stage split) over a
grid, with its messages; and the pipeline_parallel_schedule_csv cases: torch's
compute-only CSV dumps (written next to the golden file) with the order torch
executes after loading them, and malformed CSVs with torch's refusal.

Writes tests/pp/golden/ (or the folder given as argv[1]):
  schedules.txt   "case NAME pp=P spr=S nmb=M" then "rank R: 0F0 0F1 ..." per
                  rank, or "error: MESSAGE"
  split.txt       "split stages=S layers=L in=I out=O" then "stage K: mods..." or
                  "error: MESSAGE"
  csv/*.csv       schedules as torch's _dump_csv writes them, and bad ones;
  csv.txt         "csv FILE pp=P stages=S nmb=M" then ranks or "error: MESSAGE"

Run with the interpreter in $PYTHON (torch, torchtitan 0.2.2); never needed by CI.
"""
import csv
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining import schedules as S
from torch.distributed.pipelining._utils import generate_rank_to_stage_mapping
from torch.testing._internal.distributed.fake_pg import FakeStore

from torchtitan.distributed.pipeline_parallel import generate_llm_fqn_per_model_part

SINGLE = ["GPipe", "1F1B"]
MULTI = ["Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble"]
V = ["ZBVZeroBubble", "DualPipeV"]


def one_line(msg):
    return " ".join(str(msg).split())


def make_stages(style, rank, pp, n_stages, rec):
    """This rank's stages ("loop" or "v" placement), their compute entry points
    recording into rec."""
    mine = generate_rank_to_stage_mapping(pp, n_stages, style)[rank]
    stages = []
    for si in mine:
        st = PipelineStage(nn.Linear(4, 4), si, n_stages, torch.device("cpu"),
                           input_args=(torch.randn(1, 4),), output_args=(torch.randn(1, 4),))
        fwd = st.forward_one_chunk

        def f(mb, *a, _f=fwd, _si=si, **k):
            rec.append(f"{_si}F{mb}")
            return _f(mb, *a, **k)

        # The backward is recorded, not run: a fake group receives no gradients.
        def b(mb, *a, full_backward=True, _st=st, _si=si, **k):
            rec.append(f"{_si}{'B' if full_backward else 'I'}{mb}")
            _st.bwd_cache[mb] = (None,)

        def w(mb, *a, _si=si, **k):
            rec.append(f"{_si}W{mb}")

        st.forward_one_chunk, st.backward_one_chunk, st.backward_weight_one_chunk = f, b, w
        stages.append(st)
    return stages


def run_rank(build, rank, pp, n_stages, nmb, style):
    """Build rank's schedule with build(stages) and step it once; its record."""
    dist.init_process_group("fake", rank=rank, world_size=pp, store=FakeStore())
    try:
        rec = []
        stages = make_stages(style, rank, pp, n_stages, rec)
        sch = build(stages)
        first = any(s.is_first for s in stages)
        last = any(s.is_last for s in stages)
        x, t = torch.randn(nmb, 4), torch.randn(nmb, 4)
        sch.step(*((x,) if first else ()), target=t if last else None,
                 losses=[] if last else None)
        return rec
    finally:
        dist.destroy_process_group()


def record(out, header, build, pp, n_stages, nmb, style):
    out.write(header + "\n")
    try:
        ranks = [run_rank(build, r, pp, n_stages, nmb, style) for r in range(pp)]
    except Exception as e:  # torch's refusal is the golden answer
        out.write(f"error: {one_line(e)}\n")
        return
    for r, rec in enumerate(ranks):
        out.write(f"rank {r}: {' '.join(rec)}\n")


def schedules(out):
    loss = lambda o, t: o.sum()  # noqa: E731
    for name in SINGLE + MULTI + V:
        cls = S.get_schedule_class(name)
        style = "v" if name in V else "loop"
        sprs = [1] if name in SINGLE else [2] if name in V else [2, 3]
        for pp in (1, 2, 3, 4) if name in SINGLE else (2, 3, 4):
            for spr in sprs:
                for nmb in (1, 2, 3, 4, 5, 6, 8):
                    n = pp * spr
                    if name in SINGLE:
                        build = lambda st, c=cls, m=nmb: c(st[0], m, loss_fn=loss)  # noqa: E731
                    else:
                        build = lambda st, c=cls, m=nmb: c(st, m, loss_fn=loss)  # noqa: E731
                    record(out, f"case {name} pp={pp} spr={spr} nmb={nmb}", build, pp, n, nmb, style)


def split(out):
    for stages in (1, 2, 3, 4, 5, 8):
        for layers in (1, 2, 3, 4, 6, 8, 16):
            for iw, ow in ((1, 1), (0, 0), (2, 1), (0, 3)):
                out.write(f"split stages={stages} layers={layers} in={iw} out={ow}\n")
                try:
                    parts = generate_llm_fqn_per_model_part(stages, layers, iw, ow)
                except Exception as e:
                    out.write(f"error: {one_line(e)}\n")
                    continue
                for k, p in enumerate(parts):
                    out.write(f"stage {k}: {' '.join(p)}\n")


def dump(path, order):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        for r in sorted(order):
            w.writerow(order[r])


def csv_cases(out, folder):
    loss = lambda o, t: o.sum()  # noqa: E731
    os.makedirs(folder, exist_ok=True)
    good = []
    # torch's own compute-only dumps of generated schedules (bubbles as empty cells)
    for name, pp, spr, nmb in (("Interleaved1F1B", 2, 2, 4), ("ZBVZeroBubble", 2, 2, 4),
                               ("LoopedBFS", 3, 2, 3), ("InterleavedZeroBubble", 2, 2, 4),
                               ("DualPipeV", 2, 2, 4)):
        cls = S.get_schedule_class(name)
        style = "v" if name in V else "loop"
        orders = {}
        for r in range(pp):
            dist.init_process_group("fake", rank=r, world_size=pp, store=FakeStore())
            try:
                st = make_stages(style, r, pp, pp * spr, [])
                orders[r] = cls(st, nmb, loss_fn=loss).pipeline_order[r]
            finally:
                dist.destroy_process_group()
        fname = f"{name.lower()}_pp{pp}_mb{nmb}.csv"
        dump(os.path.join(folder, fname), orders)
        good.append((fname, pp, pp * spr, nmb, style))
    # hand-written ones: a looped schedule without bubbles, and malformed ones
    hand = {
        "gpipe2x2_loop.csv": ["0F0,0F1,2F0,2F1,2B0,2B1,0B0,0B1",
                              "1F0,1F1,3F0,3F1,3B0,3B1,1B0,1B1"],
        "bad_missing_f.csv": ["0F0,2F0,2F1,2B0,2B1,0B0,0B1",
                              "1F0,1F1,3F0,3F1,3B0,3B1,1B0,1B1"],
        "bad_b_before_f.csv": ["0F0,0F1,2B0,2F0,2F1,2B1,0B0,0B1",
                               "1F0,1F1,3F0,3F1,3B0,3B1,1B0,1B1"],
        "bad_w_before_i.csv": ["0F0,0F1,2F0,2F1,2W0,2I0,2I1,2W1,0I0,0W0,0I1,0W1",
                               "1F0,1F1,3F0,3F1,3I0,3W0,3I1,3W1,1I0,1W0,1I1,1W1"],
        "bad_stage_two_ranks.csv": ["0F0,0F1,1F0,2F1,2B0,2B1,0B0,0B1",
                                    "1F1,3F0,3F1,2F0,3B0,3B1,1B0,1B1"],
        "bad_action.csv": ["0F0,0F1,2X0,2F1,2B0,2B1,0B0,0B1",
                           "1F0,1F1,3F0,3F1,3B0,3B1,1B0,1B1"],
        # rank 1 consumes micro-batch 1 before 0: fine, as receives follow sends
        "reorder_recv.csv": ["0F0,0F1,2F0,2F1,2B0,2B1,0B0,0B1",
                             "1F1,1F0,3F0,3F1,3B0,3B1,1B0,1B1"],
        "bad_three_rows.csv": ["0F0,0F1,2F0,2F1,2B0,2B1,0B0,0B1",
                               "1F0,1F1,3F0,3F1,3B0,3B1,1B0,1B1", "1F0"],
        "bad_extra_mb.csv": ["0F0,0F1,0F2,2F0,2F1,2B0,2B1,0B0,0B1",
                             "1F0,1F1,3F0,3F1,3B0,3B1,1B0,1B1"],
        "bad_cycle.csv": ["0F0,2F0,0F1,2F1,2B0,2B1,0B0,0B1",
                          "3F0,1F0,1F1,3F1,3B0,3B1,1B0,1B1"],
        "bad_i_without_w.csv": ["0F0,0F1,2F0,2F1,2I0,2B1,0B0,0B1",
                                "1F0,1F1,3F0,3F1,3B0,3B1,1B0,1B1"],
    }
    for fname, rows in hand.items():
        with open(os.path.join(folder, fname), "w") as f:
            f.write("\n".join(rows) + "\n")
        good.append((fname, 2, 4, 2, "loop"))
    for fname, pp, n, nmb, style in good:
        path = os.path.join(folder, fname)

        def build(st, p=path, m=nmb):
            sch = S._PipelineScheduleRuntime(st, m, loss_fn=loss)
            sch._load_csv(p)  # validates, then lowers to sends and receives
            return sch

        record(out, f"csv {fname} pp={pp} stages={n} nmb={nmb}", build, pp, n, nmb, style)


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "tests/pp/golden"
    os.makedirs(folder, exist_ok=True)
    head = f"# scripts/pp_schedules_golden.py, torch {torch.__version__}\n"
    with open(os.path.join(folder, "schedules.txt"), "w") as out:
        out.write(head)
        schedules(out)
    with open(os.path.join(folder, "split.txt"), "w") as out:
        out.write(head)
        split(out)
    with open(os.path.join(folder, "csv.txt"), "w") as out:
        out.write(head)
        csv_cases(out, os.path.join(folder, "csv"))


if __name__ == "__main__":
    main()
