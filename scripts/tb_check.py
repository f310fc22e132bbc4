#!/usr/bin/env python3
"""Load titan-train's TensorBoard folder with TensorBoard's own reader
(EventAccumulator) and print every scalar tag with its steps and values.

    $PYTHON scripts/tb_check.py DIR [--expect-tag TAG]... [--expect-steps 1,10,20]

DIR is dump_folder/tb (or one run folder under it).  Exits 1 when TensorBoard
finds no scalars, or an expected tag or step is missing.  Needs the tensorboard
package (PyPI); titan's CI checks the same files with its own reader instead.
"""
import argparse
import os
import sys

from tensorboard.backend.event_processing import event_accumulator


def runs(root):
    """Folders under root that hold event files."""
    found = []
    for dirpath, _, files in os.walk(root):
        if any(f.startswith("events.out.tfevents.") for f in files):
            found.append(dirpath)
    return sorted(found)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--expect-tag", action="append", default=[])
    ap.add_argument("--expect-steps", default="")
    a = ap.parse_args()
    folders = runs(a.dir)
    if not folders:
        print(f"tb_check: {a.dir}: no event files", file=sys.stderr)
        return 1
    ok = True
    for run in folders:
        acc = event_accumulator.EventAccumulator(run, size_guidance={"scalars": 0})
        acc.Reload()
        tags = acc.Tags()["scalars"]
        print(f"run {run}: {len(tags)} scalar tags")
        for tag in sorted(tags):
            ev = acc.Scalars(tag)
            pts = ", ".join(f"{e.step}:{e.value:.6g}" for e in ev[:6])
            print(f"  {tag}: {len(ev)} points  {pts}{' ...' if len(ev) > 6 else ''}")
        for tag in a.expect_tag:
            if tag not in tags:
                print(f"tb_check: {run}: tag {tag} missing", file=sys.stderr)
                ok = False
                continue
            if a.expect_steps:
                want = [int(s) for s in a.expect_steps.split(",")]
                got = [e.step for e in acc.Scalars(tag)]
                if got != want:
                    print(f"tb_check: {run}: {tag} steps {got}, expected {want}", file=sys.stderr)
                    ok = False
        if not tags:
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
