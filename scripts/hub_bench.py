#!/usr/bin/env python3
"""titan-hf-fetch -j N vs huggingface_hub.snapshot_download(max_workers=N) on the
fake Hub (tests/hub/fakehub.py) over loopback: wall time, MB/s, peak RSS.

Run by scripts/bench/hub.sh.  Files live in a temporary folder removed at the end.
  --files 4 --mb 256 --jobs 4 --bin bin/titan-hf-fetch
"""
import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run_measured(cmd, env):
    """(wall seconds, peak RSS in MiB, exit status) of one child process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.stderr.write(err)
    return wall, ru.ru_maxrss / 1024.0, p.returncode


def check_snapshot(cache, want):
    base = os.path.join(cache, "models--bench--big", "snapshots")
    snaps = os.listdir(base)
    for name, digest in want.items():
        h = hashlib.sha256()
        with open(os.path.join(base, snaps[0], name), "rb") as f:
            for b in iter(lambda: f.read(1 << 22), b""):
                h.update(b)
        if h.hexdigest() != digest:
            raise SystemExit("bench: %s differs after the download" % name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--bin", default=os.path.join(ROOT, "bin", "titan-hf-fetch"))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="titan-hub-bench.")
    server = None
    try:
        repo = os.path.join(tmp, "root", "models", "bench", "big")
        os.makedirs(repo)
        want = {}
        chunk = os.urandom(1 << 20)
        for i in range(a.files):
            name = "model-%05d-of-%05d.safetensors" % (i + 1, a.files)
            h = hashlib.sha256()
            with open(os.path.join(repo, name), "wb") as f:
                for k in range(a.mb):
                    # vary each MiB so no two blocks (or files) are alike
                    b = (i * a.mb + k).to_bytes(8, "little") + chunk[8:]
                    f.write(b)
                    h.update(b)
            want[name] = h.hexdigest()
        with open(os.path.join(repo, "config.json"), "w") as f:
            f.write('{"dim": 4096}\n')
        ports = os.path.join(tmp, "ports")
        server = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "hub", "fakehub.py"),
                                   "--root", os.path.join(tmp, "root"), "--port-file", ports],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            if os.path.exists(ports):
                break
            time.sleep(0.1)
        hp = int(open(ports).read().split()[0])
        env = dict(os.environ, HF_ENDPOINT="http://127.0.0.1:%d" % hp, HF_HUB_DISABLE_XET="1",
                   HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HOME=os.path.join(tmp, "hfhome"),
                   HF_HUB_DISABLE_TELEMETRY="1")
        env.pop("HF_TOKEN", None)
        total_mb = a.files * a.mb * 1048576 / 1e6
        rows = []
        c1 = os.path.join(tmp, "c-titan")
        w, rss, rc = run_measured([a.bin, "bench/big", "-q", "-j", str(a.jobs), "--cache-dir", c1], env)
        if rc != 0:
            raise SystemExit("bench: titan-hf-fetch failed")
        check_snapshot(c1, want)
        rows.append(("titan-hf-fetch -j %d" % a.jobs, w, rss))
        shutil.rmtree(c1)
        c2 = os.path.join(tmp, "c-py")
        code = ("import sys, huggingface_hub as h; h.snapshot_download('bench/big', cache_dir=sys.argv[1], "
                "max_workers=%d)" % a.jobs)
        w, rss, rc = run_measured([sys.executable, "-c", code, c2], env)
        if rc != 0:
            raise SystemExit("bench: snapshot_download failed")
        check_snapshot(c2, want)
        import huggingface_hub
        rows.append(("snapshot_download(max_workers=%d) [hf_hub %s]" % (a.jobs, huggingface_hub.__version__), w, rss))
        shutil.rmtree(c2)
        print("hub: %d x %d MiB safetensors (%.0f MB) from the fake Hub on loopback, -j %d"
              % (a.files, a.mb, total_mb, a.jobs))
        print("%-48s %9s %9s %12s" % ("tool", "wall s", "MB/s", "peak RSS MiB"))
        for name, w, rss in rows:
            print("%-48s %9.2f %9.0f %12.1f" % (name, w, total_mb / w, rss))
        print("ratio python/titan: wall %.2fx, peak RSS %.1fx"
              % (rows[1][1] / rows[0][1], rows[1][2] / rows[0][2]))
        return 0
    finally:
        if server is not None:
            server.kill()
            server.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
