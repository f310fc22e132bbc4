#!/usr/bin/env python3
"""Cache interop between titan-hf-fetch and huggingface_hub (needs huggingface_hub).

  hub_interop.py load  --cache DIR --repo ID [--dataset] --ref DIR FILE...
      Load each FILE from the cache with hf_hub_download(local_files_only=True)
      and snapshot_download(local_files_only=True); compare the bytes with
      REF/FILE.  Exit 0 when all match.
  hub_interop.py fetch --cache DIR --repo ID [--dataset]
      snapshot_download the repo from HF_ENDPOINT into DIR (plain HTTP, no Xet),
      for titan-hf-fetch to read offline afterwards.

Run by tests/hub/interop.sh; by hand:
  HF_ENDPOINT=http://127.0.0.1:PORT PYTHON=venv/bin/python \
      $PYTHON scripts/hub_interop.py load --cache c --repo org/tiny --ref repo config.json
"""
import argparse
import os
import sys

# plain HTTP downloads, like the fake Hub offers; no telemetry from a test
os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("load", "fetch"))
    ap.add_argument("--cache", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--dataset", action="store_true")
    ap.add_argument("--ref")
    ap.add_argument("files", nargs="*")
    a = ap.parse_intermixed_args()
    import huggingface_hub as hh

    rtype = "dataset" if a.dataset else "model"
    if a.mode == "fetch":
        path = hh.snapshot_download(a.repo, repo_type=rtype, cache_dir=a.cache, max_workers=4)
        print(path)
        return 0
    bad = 0
    for f in a.files:
        p = hh.hf_hub_download(a.repo, f, repo_type=rtype, cache_dir=a.cache,
                               local_files_only=True)
        with open(p, "rb") as x, open(os.path.join(a.ref, f), "rb") as y:
            same = x.read() == y.read()
        print("%s %s -> %s" % ("same" if same else "DIFFERENT", f, p))
        bad += not same
    snap = hh.snapshot_download(a.repo, repo_type=rtype, cache_dir=a.cache, local_files_only=True)
    for f in a.files:
        if not os.path.isfile(os.path.join(snap, f)):
            print("snapshot lacks", f)
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
