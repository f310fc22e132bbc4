#!/usr/bin/env python3
"""Open titan's profiler output with the tools people use on it (manual check;
tests/prof/test_prof.c checks the format itself).

    $PYTHON scripts/prof_check.py TRACE_FOLDER [SNAPSHOT_FOLDER]

For every iteration_N/rankR_trace.json under TRACE_FOLDER: loads it into
Perfetto's trace processor (PyPI package `perfetto`; it needs its
trace_processor_shell binary, which it downloads on first use unless
TRACE_PROCESSOR_SHELL names one) and prints, per rank and thread, the number of
slices and the ops and collectives with their total time.  For every
rankR_memory_snapshot.pickle under SNAPSHOT_FOLDER: PyTorch's memory viewer
(torch.cuda._memory_viz) summarises it and writes its HTML timeline beside it.
Exits non-zero when a tool rejects a file.
"""
import glob
import os
import pickle
import sys


def check_traces(folder):
    try:
        from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig
    except ImportError:
        print("perfetto is not installed (pip install perfetto): traces not checked")
        return

    shell = os.environ.get("TRACE_PROCESSOR_SHELL")
    config = TraceProcessorConfig(bin_path=shell) if shell else TraceProcessorConfig()
    files = sorted(glob.glob(os.path.join(folder, "iteration_*", "rank*_trace.json")))
    if not files:
        sys.exit(f"{folder}: no iteration_N/rankR_trace.json")
    for path in files:
        tp = TraceProcessor(trace=path, config=config)
        rows = tp.query(
            "select p.name as proc, t.name as thread, s.category as cat, s.name as name,"
            " count(*) as n, sum(s.dur) as dur from slice s"
            " join thread_track tt on s.track_id = tt.id join thread t using(utid)"
            " left join process p using(upid) group by 1, 2, 3, 4 order by 1, 2, 6 desc")
        print(path)
        for r in rows:
            print(f"  {r.proc}  {r.thread:<14} {r.cat:<6} {r.name:<28} x{r.n:<5} {r.dur / 1e6:.3f} ms")
        tp.close()


def check_snapshots(folder):
    import torch.cuda._memory_viz as mv

    files = sorted(glob.glob(os.path.join(folder, "iteration_*", "rank*_memory_snapshot.pickle")))
    if not files:
        sys.exit(f"{folder}: no iteration_N/rankR_memory_snapshot.pickle")
    for path in files:
        with open(path, "rb") as f:
            snap = pickle.load(f)
        print(path)
        print(mv.segsum(snap).splitlines()[1])
        with open(path + ".html", "w") as f:
            f.write(mv.trace_plot(snap))
        print(f"  timeline: {path}.html")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    check_traces(sys.argv[1])
    if len(sys.argv) > 2:
        check_snapshots(sys.argv[2])


if __name__ == "__main__":
    main()
