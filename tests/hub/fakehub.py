#!/usr/bin/env python3
"""A fake Hugging Face Hub on 127.0.0.1 for titan-hf-fetch's tests (standard library only).

Two servers in one process: the Hub (API + /resolve) and a "CDN" on another port,
a different origin, that serves LFS objects by sha256 and fails any request that
carries an Authorization header (the token must never leave the Hub's origin).

Repositories are folders: ROOT/models/ORG/NAME/... and ROOT/datasets/ORG/NAME/...
A file ROOT/<type>/ORG/NAME.json may say {"gated": true} or {"private": true}, or
add hostile entries to the tree listing: {"extra_tree": [{"type": "file", ...}]}, or
make its last listing page link back to the first: {"loop_tree": true}.
LFS files: *.safetensors, *.gz, *.bin, *.model, *.zst, *.parquet.

Faults, set by the test: POST /_fault {"path": P, "kind": K, "times": N, ...}
  cut      send the headers and "at" bytes of the body, then drop the connection
  status   answer "status" (503, 429 with "retry_after" or "ratelimit") instead
  badsha   flip one byte of the body
  norange  ignore Range: send the whole file with 200
  badrange answer a range request with a 206 for the wrong range
P is a repo path (faults on its bytes) or "@revision" / "@tree" (API calls).
Faults of different kinds on one path apply together (a "cut" of a "norange" answer);
"skip": N lets N requests through before a fault starts.
GET /_stats -> {"auth_leaks": [...], "requests": [...]}; POST /_reset clears both.
Each file answer is logged too: {"method": "SERVE", "path", "code", "start", "faults"}.
"""
import argparse
import hashlib
import json
import os
import socket
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LFS_SUFFIXES = (".safetensors", ".gz", ".bin", ".model", ".zst", ".parquet")


class State:
    def __init__(self, root, page_size, tokens, cdn_host):
        self.root = root
        self.page_size = page_size
        self.tokens = set(tokens)
        self.cdn_host = cdn_host
        self.cdn_port = 0
        self.lock = threading.Lock()
        self.faults = []
        self.requests = []
        self.auth_leaks = []
        self.repos = {}  # (type, repo) -> repo dict, computed once
        self.blobs = {}  # sha256 -> file path

    def log(self, entry):
        with self.lock:
            if len(self.requests) < 20000:
                self.requests.append(entry)

    def take_faults(self, path):
        """The faults due on this request, by kind (one of each kind at most)."""
        due = {}
        with self.lock:
            for f in self.faults:
                if f["path"] != path or f["times"] <= 0 or f["kind"] in due:
                    continue
                if f.get("skip", 0) > 0:  # let this many requests through first
                    f["skip"] -= 1
                    continue
                f["times"] -= 1
                due[f["kind"]] = dict(f)
        return due

    def repo(self, rtype, repo_id):
        key = (rtype, repo_id)
        with self.lock:
            if key in self.repos:
                return self.repos[key]
        base = os.path.join(self.root, rtype, repo_id)
        if ".." in repo_id.split("/") or not os.path.isdir(base):
            return None
        files = {}
        for dirpath, _, names in os.walk(base):
            for n in names:
                full = os.path.join(dirpath, n)
                rel = os.path.relpath(full, base).replace(os.sep, "/")
                files[rel] = describe(full, rel)
        meta = {}
        mpath = base + ".json"
        if os.path.exists(mpath):
            with open(mpath) as f:
                meta = json.load(f)
        h = hashlib.sha1()
        for rel in sorted(files):
            h.update(("%s %s\n" % (rel, files[rel]["oid"])).encode())
        r = {"files": files, "commit": h.hexdigest(), "gated": meta.get("gated", False),
             "extra_tree": meta.get("extra_tree", []), "loop_tree": meta.get("loop_tree", False),
             "private": meta.get("private", False), "base": base}
        with self.lock:
            self.repos[key] = r
            for p, d in files.items():
                if d["lfs"]:
                    self.blobs[d["sha256"]] = (d["full"], p)
        return r


def describe(full, rel):
    size = os.path.getsize(full)
    sha = hashlib.sha256()
    git = hashlib.sha1(b"blob %d\0" % size)
    with open(full, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            sha.update(b)
            git.update(b)
    lfs = rel.endswith(LFS_SUFFIXES)
    d = {"full": full, "size": size, "sha256": sha.hexdigest(), "lfs": lfs}
    if lfs:
        # the git blob of an LFS file is its pointer file
        ptr = ("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n"
               % (d["sha256"], size)).encode()
        d["oid"] = hashlib.sha1(b"blob %d\0" % len(ptr) + ptr).hexdigest()
        d["pointer_size"] = len(ptr)
    else:
        d["oid"] = git.hexdigest()
    return d


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fakehub/1"
    is_cdn = False

    def log_message(self, fmt, *args):
        pass

    @property
    def st(self):
        return self.server.state

    # ---- helpers ----
    def send(self, code, body=b"", headers=None, ctype="application/json"):
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, code, ecode, msg):
        self.send(code, json.dumps({"error": msg}).encode(),
                  {"X-Error-Code": ecode, "X-Error-Message": msg})

    def auth_token(self):
        a = self.headers.get("Authorization", "")
        return a[7:] if a.lower().startswith("bearer ") else None

    def access(self, r):
        """None when allowed, else sends the Hub's error."""
        tok = self.auth_token()
        if r is None or (r["private"] and tok not in self.st.tokens):
            self.error(401, "RepoNotFound", "Repository not found")
            return False
        if r["gated"] and tok is None:
            self.error(401, "GatedRepo", "Access to this model is restricted. You must have access to it and be authenticated to access it. Please log in.")
            return False
        if r["gated"] and tok not in self.st.tokens:
            self.error(403, "GatedRepo", "Access to this model is restricted and you are not in the authorized list.")
            return False
        return True

    def status_fault(self, f):
        h = {}
        if f.get("retry_after") is not None:
            h["Retry-After"] = str(f["retry_after"])
        if f.get("ratelimit") is not None:
            h["RateLimit"] = f["ratelimit"]
        self.send(f.get("status", 503), b'{"error":"injected"}', h)

    def do_HEAD(self):
        self.route()

    def do_GET(self):
        self.route()

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        if self.path == "/_fault":
            f = json.loads(body)
            f.setdefault("times", 1)
            with self.st.lock:
                self.st.faults.append(f)
            self.send(200, b"{}")
        elif self.path == "/_reset":
            with self.st.lock:
                self.st.faults.clear()
                self.st.requests.clear()
                self.st.auth_leaks.clear()
            self.send(200, b"{}")
        else:
            self.send(404, b"{}")

    def route(self):
        u = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(u.path)
        self.st.log({"server": "cdn" if self.is_cdn else "hub", "method": self.command,
                     "path": path, "range": self.headers.get("Range"),
                     "auth": self.headers.get("Authorization") is not None})
        if self.is_cdn:
            return self.cdn(path)
        if path == "/_stats":
            with self.st.lock:
                d = {"auth_leaks": self.st.auth_leaks, "requests": self.st.requests}
                body = json.dumps(d).encode()
            return self.send(200, body)
        q = urllib.parse.parse_qs(u.query)
        parts = path.split("/")
        if len(parts) > 2 and parts[1] == "api" and parts[2] in ("models", "datasets"):
            return self.api(parts[2], parts[3:], q)
        rtype = "models"
        if len(parts) > 1 and parts[1] == "datasets":
            rtype = "datasets"
            parts = parts[1:]
        # /ORG/NAME/resolve/REV/PATH  or  /NAME/resolve/REV/PATH
        if "resolve" in parts:
            i = parts.index("resolve")
            repo_id = "/".join(parts[1:i])
            if len(parts) > i + 2:
                return self.resolve(rtype, repo_id, parts[i + 1], "/".join(parts[i + 2:]))
        self.send(404, b"{}")

    def api(self, rtype, parts, q):
        # models/ORG/NAME/revision/REV  or  models/ORG/NAME/tree/REV[/PATH]
        for kw in ("revision", "tree"):
            if kw in parts:
                i = parts.index(kw)
                break
        else:
            return self.send(404, b"{}")
        repo_id = "/".join(parts[:i])
        rev = parts[i + 1] if len(parts) > i + 1 else ""
        f = self.st.take_faults("@" + kw).get("status")
        if f:
            return self.status_fault(f)
        r = self.st.repo(rtype, repo_id)
        if not self.access(r):
            return
        if rev not in ("main", r["commit"]):
            return self.error(404, "RevisionNotFound", "Invalid rev id: " + rev)
        if kw == "revision":
            info = {"id": repo_id, "sha": r["commit"], "private": r["private"],
                    "gated": "manual" if r["gated"] else False, "disabled": False,
                    "siblings": [{"rfilename": p} for p in sorted(r["files"])]}
            return self.send(200, json.dumps(info).encode())
        entries = []
        dirs = set()
        for p in sorted(r["files"]):
            segs = p.split("/")
            for k in range(1, len(segs)):
                d = "/".join(segs[:k])
                if d not in dirs:
                    dirs.add(d)
                    entries.append({"type": "directory", "oid": "0" * 40, "size": 0, "path": d})
            d = r["files"][p]
            e = {"type": "file", "oid": d["oid"], "size": d["size"], "path": p}
            if d["lfs"]:
                e["lfs"] = {"oid": d["sha256"], "size": d["size"], "pointerSize": d["pointer_size"]}
            entries.append(e)
        entries += r["extra_tree"]  # hostile entries a test wants listed
        start = int(q.get("cursor", ["0"])[0])
        page = entries[start:start + self.st.page_size]
        h = {}
        if start + self.st.page_size < len(entries) or r["loop_tree"]:
            # loop_tree: the last page links back to the first, forever
            nxt = start + self.st.page_size if start + self.st.page_size < len(entries) else 0
            nq = {"recursive": "true", "cursor": str(nxt)}
            nxt = "http://%s:%d%s?%s" % (self.server.server_address[0], self.server.server_address[1],
                                         urllib.parse.quote(urllib.parse.urlsplit(self.path).path),
                                         urllib.parse.urlencode(nq))
            h["Link"] = '<%s>; rel="next"' % nxt
        self.send(200, json.dumps(page).encode(), h)

    def resolve(self, rtype, repo_id, rev, fpath):
        r = self.st.repo(rtype, repo_id)
        if not self.access(r):
            return
        if rev not in ("main", r["commit"]):
            return self.error(404, "RevisionNotFound", "Invalid rev id: " + rev)
        d = r["files"].get(fpath)
        if d is None:
            return self.send(404, b'{"error":"Entry not found"}',
                             {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": r["commit"],
                              "X-Error-Message": "Entry not found"})
        common = {"X-Repo-Commit": r["commit"], "Accept-Ranges": "bytes"}
        if d["lfs"]:
            loc = "http://%s:%d/blob/%s?sig=fake" % (self.st.cdn_host, self.st.cdn_port, d["sha256"])
            common.update({"Location": loc, "X-Linked-Etag": '"%s"' % d["sha256"],
                           "X-Linked-Size": str(d["size"]), "ETag": '"%s"' % d["oid"]})
            return self.send(302, b"", common, "text/plain")
        common["ETag"] = '"%s"' % d["oid"]
        self.serve_file(d["full"], fpath, common)

    def cdn(self, path):
        if self.headers.get("Authorization") is not None:
            with self.st.lock:
                self.st.auth_leaks.append(path)
            return self.send(400, b'{"error":"Authorization header sent to the CDN"}')
        parts = path.split("/")
        if len(parts) != 3 or parts[1] != "blob" or parts[2] not in self.st.blobs:
            return self.send(404, b"{}")
        full, rel = self.st.blobs[parts[2]]
        self.serve_file(full, rel, {"ETag": '"%s"' % parts[2], "Accept-Ranges": "bytes"})

    def serve_file(self, full, rel, headers):
        due = self.st.take_faults(rel) if self.command == "GET" else {}
        if "status" in due:
            return self.status_fault(due["status"])
        size = os.path.getsize(full)
        start, end, code = 0, size - 1, 200
        rng = self.headers.get("Range")
        if rng and "norange" not in due:
            try:
                a, b = rng.split("=", 1)[1].split("-", 1)
                start = int(a)
                end = int(b) if b else size - 1
            except ValueError:
                start = 0
            if start >= size:
                return self.send(416, b"", {"Content-Range": "bytes */%d" % size})
            code = 206
            if "badrange" in due:
                start = max(0, start - 7)
            headers = dict(headers, **{"Content-Range": "bytes %d-%d/%d" % (start, end, size)})
        length = end - start + 1
        self.st.log({"server": "cdn" if self.is_cdn else "hub", "method": "SERVE", "path": rel,
                     "code": code, "start": start, "faults": sorted(due)})
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.end_headers()
        if self.command == "HEAD":
            return
        cut = due["cut"]["at"] if "cut" in due else None
        flip = due["badsha"].get("offset", length // 2) if "badsha" in due else None
        sent = 0
        with open(full, "rb") as fh:
            fh.seek(start)
            while sent < length:
                n = min(1 << 20, length - sent)
                if cut is not None:
                    n = min(n, max(0, cut - sent))
                    if n == 0:
                        self.wfile.flush()
                        self.close_connection = True
                        try:
                            self.connection.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass
                        return
                b = fh.read(n)
                if not b:
                    break
                if flip is not None and sent <= flip < sent + len(b):
                    i = flip - sent
                    b = b[:i] + bytes([b[i] ^ 0xFF]) + b[i + 1:]
                self.wfile.write(b)
                sent += len(b)


class CDNHandler(Handler):
    is_cdn = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--port-file", required=True, help="written as 'HUBPORT CDNPORT' when ready")
    ap.add_argument("--page-size", type=int, default=1000)
    ap.add_argument("--token", action="append", default=[], help="a token that may read private and gated repos")
    ap.add_argument("--cdn-host", default="127.0.0.1")
    a = ap.parse_args()
    st = State(a.root, a.page_size, a.token, a.cdn_host)
    hub = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    cdn = ThreadingHTTPServer(("127.0.0.1", 0), CDNHandler)
    hub.daemon_threads = cdn.daemon_threads = True
    hub.state = cdn.state = st
    st.cdn_port = cdn.server_address[1]
    # index every repo now, so the CDN knows every blob before the first request
    for rtype in ("models", "datasets"):
        base = os.path.join(a.root, rtype)
        if not os.path.isdir(base):
            continue
        for org in sorted(os.listdir(base)):
            op = os.path.join(base, org)
            if not os.path.isdir(op):
                continue
            for name in sorted(os.listdir(op)):
                if os.path.isdir(os.path.join(op, name)):
                    st.repo(rtype, org + "/" + name)
    threading.Thread(target=cdn.serve_forever, daemon=True).start()
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d %d\n" % (hub.server_address[1], cdn.server_address[1]))
    os.rename(tmp, a.port_file)
    try:
        hub.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
