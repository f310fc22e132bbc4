#!/usr/bin/env python3
"""Build the test corpora from Debian text packages, the same way on every machine.

    python3 scripts/fixtures_corpus.py OUT_DIR
    python3 scripts/fixtures_corpus.py --sources

writes OUT_DIR/en.jsonl, en.jsonl.gz, multi.jsonl (C4-shaped JSON Lines: one
{"text", "timestamp", "url"} object a line) and OUT_DIR/SOURCES (this script's
SHA-256, the packages and their versions); --sources prints what SOURCES would
hold, or fails naming the packages that are missing.  Standard library only; the packages are those
scripts/deps.sh installs:

  en      fortunes, fortunes-min, fortunes-zh (fortune cookies), jargon-text
          (the Jargon File), gnu-standards (the GNU Coding Standards, info)
  multi   fortunes-ru, fortunes-de, fortunes-es, fortunes-it, fortunes-pl,
          fortunes-bg

Documents: a fortune file is split at lines holding only "%"; the Jargon File
and the info file at blank lines, keeping paragraphs of at least 80 bytes (index and menu lines are
short).  Files are read in sorted order, text is decoded as UTF-8 (Latin-1 for
a file that is not UTF-8), and nothing depends on the clock or the locale, so
the same package versions give the same bytes.  The url says where a document
came from: debian://PACKAGE/FILE#N, N counting documents across the corpus.
"""
import gzip
import hashlib
import json
import os
import subprocess
import sys

TIMESTAMP = "2019-04-25T12:57:54Z"  # C4's shape; a constant keeps the bytes stable
CORPORA = {
    "en": ["fortunes", "fortunes-min", "fortunes-zh", "jargon-text", "gnu-standards"],
    "multi": ["fortunes-ru", "fortunes-de", "fortunes-es", "fortunes-it", "fortunes-pl",
              "fortunes-bg"],
}
PARAGRAPH_FILES = {"jargon-text": "jargon.txt.gz", "gnu-standards": "standards.info.gz"}
MIN_PARAGRAPH = 80


def dpkg(args):
    r = subprocess.run(["dpkg-query"] + args, capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else None


def package_files(pkg):
    out = dpkg(["-L", pkg])
    if out is None:
        sys.exit(f"fixtures_corpus.py: Debian package {pkg} is not installed (make deps)")
    return sorted(line for line in out.splitlines() if line)


def decode(raw):
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def fortune_docs(path):
    with open(path, "rb") as f:
        text = decode(f.read()).replace("\r", "")
    doc = []
    for line in text.split("\n") + ["%"]:
        if line == "%":
            body = "\n".join(doc).strip("\n")
            if body.strip():
                yield body
            doc = []
        else:
            doc.append(line)


def paragraph_docs(path):
    with gzip.open(path, "rb") as f:
        text = decode(f.read()).replace("\r", "")
    para = []
    for line in text.split("\n") + [""]:
        if line.strip() and "\x1f" not in line and not line.startswith("File: "):
            para.append(line)
            continue
        body = "\n".join(para)
        if len(body.encode("utf-8")) >= MIN_PARAGRAPH:
            yield body
        para = []


def sources(pkg):
    """(file label, path, reader) of a package's text files, in sorted order."""
    files = package_files(pkg)
    if pkg in PARAGRAPH_FILES:
        found = [f for f in files if os.path.basename(f) == PARAGRAPH_FILES[pkg]]
        if not found or not os.path.isfile(found[0]):
            sys.exit(f"fixtures_corpus.py: {pkg} has no {PARAGRAPH_FILES[pkg]} "
                     "(is /usr/share/doc excluded from this system's packages?)")
        yield None, found[0], paragraph_docs
        return
    for f in files:
        if "/games/fortunes" not in f or "/off/" in f or f.endswith((".dat", ".u8")):
            continue
        if os.path.islink(f) or not os.path.isfile(f):
            continue
        yield os.path.basename(f), f, fortune_docs


def build(name, pkgs, out_dir):
    path = os.path.join(out_dir, name + ".jsonl")
    tmp = path + ".tmp"
    n = 0
    with open(tmp, "w", encoding="utf-8", newline="\n") as out:
        for pkg in pkgs:
            for label, f, reader in sources(pkg):
                for text in reader(f):
                    url = f"debian://{pkg}/{label}#{n}" if label else f"debian://{pkg}#{n}"
                    out.write(json.dumps({"text": text, "timestamp": TIMESTAMP, "url": url},
                                         ensure_ascii=False) + "\n")
                    n += 1
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    return n


def source_lines():
    with open(os.path.abspath(__file__), "rb") as f:
        lines = ["script " + hashlib.sha256(f.read()).hexdigest()]
    missing = []
    for name, pkgs in CORPORA.items():
        for pkg in pkgs:
            status = dpkg(["-W", "-f=${db:Status-Status} ${Version}", pkg]) or ""
            if not status.startswith("installed "):
                missing.append(pkg)
            lines.append(f"{name} {pkg} {status.split(' ')[-1]}")
    if missing:
        sys.exit("fixtures_corpus.py: missing Debian packages " + " ".join(missing) +
                 " (make deps)")
    return "\n".join(lines) + "\n"


def main():
    if sys.argv[1:] == ["--sources"]:
        sys.stdout.write(source_lines())
        return
    if len(sys.argv) != 2:
        sys.exit("usage: fixtures_corpus.py OUT_DIR | --sources")
    out_dir = sys.argv[1]
    sources_text = source_lines()
    os.makedirs(out_dir, exist_ok=True)
    for name, pkgs in CORPORA.items():
        n = build(name, pkgs, out_dir)
        print(f"fixtures_corpus.py: {out_dir}/{name}.jsonl: {n} documents", file=sys.stderr)
    # en.jsonl.gz: gzip without a name or a time in its header, so it is reproducible.
    with open(os.path.join(out_dir, "en.jsonl"), "rb") as f:
        data = f.read()
    with open(os.path.join(out_dir, "en.jsonl.gz.tmp"), "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as g:
            g.write(data)
    os.replace(os.path.join(out_dir, "en.jsonl.gz.tmp"), os.path.join(out_dir, "en.jsonl.gz"))
    with open(os.path.join(out_dir, "SOURCES"), "w") as f:
        f.write(sources_text)


if __name__ == "__main__":
    main()
