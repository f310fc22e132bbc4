#!/usr/bin/env python3
"""Goldens for lib/image: torchtitan 0.3.0's _process_cc12m_image (PIL) on
generated JPEG/PNG/WebP images, and on the cc12m test shard.

    PYTHONPATH=<torchtitan 0.3.0> python scripts/flux_pixels_golden.py [--cc12m TAR]

Writes tests/image/golden/:
  img/<case>.<ext>    the generated images (deterministic: numpy seed 1234)
  hostile/<case>      images titan refuses (and what PIL does with them)
  unit.f32            torch's float32 of uint8 v / 255.0 * 2.0 - 1.0, v = 0..255
  cases.tsv           case, file, n, offset, status (ok|skip|refuse), sha256 of
                      the (3, n, n) float32 tensor (little-endian), the u8 file
                      (its preimage through unit.f32: the pixels, CHW) or -,
                      and for refuse a word of titan's message and PIL's outcome
  cc12m.tsv           (with --cc12m) key, caption sha256, width, height,
                      offset, tensor sha256 of each sample as datasets and
                      torchtitan produce them (n = 256)

Images are opened as torchtitan gets them: datasets' Image feature
(PIL.Image.open, load, exif_transpose).  The crop offset torchtitan draws with
torch.randint is recorded by wrapping torch.randint.
"""
import argparse
import hashlib
import io
import os
import struct
import sys
import zlib

import numpy as np
import PIL.Image
import torch
import datasets

from torchtitan.models.flux import flux_datasets as fd

OUT = "tests/image/golden"
rng = np.random.default_rng(1234)

_offsets = []
_randint = torch.randint


def _recording_randint(*a, **k):
    r = _randint(*a, **k)
    _offsets.append(int(r.item()))
    return r


torch.randint = _recording_randint


def decode_as_datasets(data):
    return datasets.Image().decode_example({"path": None, "bytes": data})


def process(data, n):
    """torchtitan's pixels for image bytes: (tensor or None, offset)."""
    _offsets.clear()
    t = fd._process_cc12m_image(decode_as_datasets(data), output_size=n)
    return t, (_offsets[0] if _offsets else 0)


def unit_table():
    return torch.arange(256, dtype=torch.uint8).float() / 255.0 * 2.0 - 1.0


def tensor_sha(t):
    return hashlib.sha256(t.contiguous().numpy().astype("<f4").tobytes()).hexdigest()


def preimage(t, table):
    """The uint8 pixels whose unit values are t, checked to give t exactly."""
    u8 = torch.round((t + 1.0) / 2.0 * 255.0).clamp(0, 255).to(torch.uint8)
    assert torch.equal(table[u8.long()], t), "unit table does not give the tensor back"
    return u8


def picture(w, h, channels, seed_shift=0.0, noise=3.0):
    """Smooth colour fields with edges and a little noise: JPEG-friendly sizes."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    planes = []
    for c in range(channels):
        f = (np.sin(x / (7 + 3 * c) + seed_shift) * np.cos(y / (11 + 2 * c)) * 90 + 128
             + 40 * ((x // 13 + y // 17 + c) % 2))
        f += rng.normal(0, noise, size=(h, w)) if noise else 0
        planes.append(f)
    a = np.clip(np.stack(planes, -1), 0, 255).astype(np.uint8)
    return a


# --- a small PNG writer, for what PIL does not write (2/4/16-bit grey,
# interlacing, chunks in chosen places) ---
def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(
        ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def pack_rows(a, depth):
    """a: (h, w*samples) ints; rows packed big-endian at depth bits."""
    rows = []
    for r in a:
        if depth == 16:
            rows.append(b"".join(struct.pack(">H", int(v)) for v in r))
        elif depth == 8:
            rows.append(bytes(int(v) for v in r))
        else:
            bits = "".join(format(int(v), f"0{depth}b") for v in r)
            bits += "0" * (-len(bits) % 8)
            rows.append(bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8)))
    return rows


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2)]


def png_bytes(a, color, depth, interlace=False, before_idat=b"", after_idat=b"", plte=None):
    h, w = a.shape[:2]  # a: (h, w) or (h, w, samples)
    samples = a.reshape(h, w, -1)
    raw = b""
    if interlace:
        for x0, y0, dx, dy in ADAM7:
            sub = samples[y0::dy, x0::dx]
            if sub.size == 0:
                continue
            for row in pack_rows(sub.reshape(sub.shape[0], -1), depth):
                raw += b"\0" + row
    else:
        for row in pack_rows(samples.reshape(h, -1), depth):
            raw += b"\0" + row
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, 1 if interlace else 0)
    out = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr)
    if plte is not None:
        out += png_chunk(b"PLTE", plte)
    out += before_idat + png_chunk(b"IDAT", zlib.compress(raw, 9)) + after_idat
    return out + png_chunk(b"IEND", b"")


def exif_orientation_block(o, endian="<"):
    """A TIFF header and IFD0 holding Orientation (SHORT) = o."""
    bo = b"II*\0" if endian == "<" else b"MM\0*"
    ifd = struct.pack(endian + "H", 1) + struct.pack(endian + "HHIHH", 0x0112, 3, 1, o, 0)
    return bo + struct.pack(endian + "I", 8) + ifd + struct.pack(endian + "I", 0)


def save(im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    return b.getvalue()


def generated_cases():
    """(name, ext, bytes, n) of the images whose pixels must equal torchtitan's."""
    cases = []
    n = 32
    sizes = [(32, 32), (40, 32), (32, 40), (33, 100), (100, 33), (300, 32), (45, 45),
             (127, 64), (200, 150), (64, 200), (31, 64), (64, 31), (97, 35), (35, 97)]
    for i, (w, h) in enumerate(sizes):
        rgb = PIL.Image.fromarray(picture(w, h, 3, i))
        sub = i % 3
        cases.append((f"jpeg_{w}x{h}_s{sub}", "jpg", save(rgb, "JPEG", quality=85,
                                                             subsampling=sub), n))
        cases.append((f"png_rgb_{w}x{h}", "png", save(rgb, "PNG"), n))
        cases.append((f"webp_lossy_{w}x{h}", "webp", save(rgb, "WEBP", quality=80), n))
    for w, h in [(50, 40), (40, 77), (160, 48)]:
        rgb = PIL.Image.fromarray(picture(w, h, 3, 0.5))
        grey = PIL.Image.fromarray(picture(w, h, 1)[:, :, 0])
        alpha = picture(w, h, 1, 2.0)[:, :, 0]
        alpha[::5, :] = 0
        alpha[:, ::7] = 255
        rgba = PIL.Image.fromarray(np.dstack([np.asarray(rgb), alpha]))
        la = PIL.Image.fromarray(np.dstack([np.asarray(grey), alpha]), "LA")
        pal = rgb.quantize(colors=37)
        tag = f"{w}x{h}"
        cases += [
            (f"jpeg_prog_{tag}", "jpg", save(rgb, "JPEG", quality=90, progressive=True), n),
            (f"jpeg_grey_{tag}", "jpg", save(grey, "JPEG", quality=90), n),
            (f"jpeg_q100_444_{tag}", "jpg", save(rgb, "JPEG", quality=100, subsampling=0), n),
            (f"png_grey_{tag}", "png", save(grey, "PNG"), n),
            (f"png_la_{tag}", "png", save(la, "PNG"), n),
            (f"png_rgba_{tag}", "png", save(rgba, "PNG"), n),
            (f"png_pal_{tag}", "png", save(pal, "PNG"), n),
            (f"png_pal_trns_{tag}", "png", save(pal, "PNG", transparency=3), n),
            (f"png_bit1_{tag}", "png", save(grey.convert("1"), "PNG"), n),
            (f"webp_lossless_{tag}", "webp", save(rgb, "WEBP", lossless=True), n),
            (f"webp_rgba_lossy_{tag}", "webp", save(rgba, "WEBP", quality=75), n),
            (f"webp_rgba_lossless_{tag}", "webp", save(rgba, "WEBP", lossless=True), n),
        ]
        g = picture(w, h, 1)[:, :, 0]
        for depth in (2, 4):
            cases.append((f"png_grey{depth}_{tag}", "png", png_bytes(g >> (8 - depth), 0, depth), n))
        cases.append((f"png_pal4_{tag}", "png",
                      png_bytes(g >> 4, 3, 4, plte=bytes(range(0, 48))), n))  # 16 entries
        cases.append((f"png_rgb_adam7_{tag}", "png",
                      png_bytes(np.asarray(rgb), 2, 8, interlace=True), n))
        cases.append((f"png_pal_short_{tag}", "png",  # indices past the 5-entry PLTE
                      png_bytes(g >> 5, 3, 8, plte=bytes(range(100, 115))), n))
    # EXIF and XMP orientations in each format
    base = PIL.Image.fromarray(picture(70, 40, 3, 1.5))
    for o in range(1, 9):
        ex = b"Exif\0\0" + exif_orientation_block(o, "<" if o % 2 else ">")
        cases.append((f"jpeg_exif_o{o}", "jpg", save(base, "JPEG", quality=90, exif=ex), n))
    cases.append(("png_exif_o6", "png", save(base, "PNG", exif=b"Exif\0\0" + exif_orientation_block(6)), n))
    cases.append(("png_exif_o8_after_idat", "png",
                  png_bytes(np.asarray(base), 2, 8,
                            after_idat=png_chunk(b"eXIf", exif_orientation_block(8))), n))
    xmp = b'<x:xmpmeta><rdf:Description tiff:Orientation="6"/></x:xmpmeta>'
    cases.append(("png_xmp_o6", "png", png_bytes(np.asarray(base), 2, 8,
                  before_idat=png_chunk(b"iTXt", b"XML:com.adobe.xmp\0\0\0\0\0" + xmp)), n))
    cases.append(("webp_exif_o3", "webp", save(base, "WEBP", quality=80,
                                               exif=b"Exif\0\0" + exif_orientation_block(3)), n))
    cases.append(("webp_xmp_o5", "webp", save(base, "WEBP", lossless=True, xmp=xmp.replace(b'"6"', b'"5"')), n))
    cases.append(("jpeg_xmp_o8", "jpg", save(base, "JPEG", quality=90, xmp=xmp.replace(b'"6"', b'"8"')), n))
    cases.append(("jpeg_exif_rational_o6", "jpg", save(base, "JPEG", quality=90, exif=b"Exif\0\0" + (
        b"II*\0" + struct.pack("<IHHHII", 8, 1, 0x0112, 5, 1, 26) + struct.pack("<III", 0, 12, 2))), n))
    cases.append(("jpeg_bad_exif_no_dpi", "jpg", save(base, "JPEG", exif=b"Exif\0\0XX*\0\x08\0\0\0",
                                                   xmp=xmp), n))
    # a PNG field named .jpg is still a PNG: PIL sniffs the bytes
    cases.append(("png_named_jpg", "jpg", save(base, "PNG"), n))
    # larger outputs, the size Flux trains at
    for w, h, fmt in [(256, 256, "JPEG"), (300, 257, "JPEG"), (512, 384, "JPEG"),
                      (257, 700, "WEBP"), (400, 300, "PNG")]:
        im = PIL.Image.fromarray(picture(w, h, 3, 0.25, noise=0 if fmt == "PNG" else 3.0))
        ext = {"JPEG": "jpg", "WEBP": "webp", "PNG": "png"}[fmt]
        kw = {"quality": 80} if fmt != "PNG" else {}
        cases.append((f"big_{fmt.lower()}_{w}x{h}", ext, save(im, fmt, **kw), 256))
    return cases


def hostile_cases():
    """(name, bytes, word of titan's message) of images titan refuses."""
    out = []
    small = PIL.Image.fromarray(picture(40, 40, 3))
    jpg = save(small, "JPEG", quality=90)
    png = save(small, "PNG")
    webp = save(small, "WEBP", quality=80)
    out.append(("zero_size.jpg", b"", "empty"))
    out.append(("truncated.jpg", jpg[: len(jpg) // 2], "truncated"))
    out.append(("truncated.png", png[: len(png) // 2], "truncated"))
    out.append(("truncated.webp", webp[: len(webp) // 2], "WebP"))
    out.append(("header_only.jpg", jpg[:200], "truncated"))
    out.append(("cmyk.jpg", save(small.convert("CMYK"), "JPEG"), "CMYK"))
    out.append(("grey16.png", png_bytes(picture(40, 40, 1)[:, :, 0].astype(np.uint16) * 257, 0, 16),
                "16-bit"))
    out.append(("rgb16.png", png_bytes(picture(40, 40, 3).astype(np.uint16) * 257, 2, 16),
                "16-bit"))
    frames = [small, small.transpose(PIL.Image.Transpose.FLIP_LEFT_RIGHT)]
    out.append(("animated.png", save(frames[0], "PNG", save_all=True, append_images=frames[1:]),
                "animated"))
    out.append(("animated.webp", save(frames[0], "WEBP", save_all=True, append_images=frames[1:]),
                "animated"))
    # 60000 x 60000 in the header, a few bytes of data
    ihdr = struct.pack(">IIBBBBB", 60000, 60000, 8, 2, 0, 0, 0)
    out.append(("huge.png", b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) +
                png_chunk(b"IDAT", zlib.compress(b"\0" * 64)) + png_chunk(b"IEND", b""), "limit"))
    sof = jpg.index(b"\xff\xc0")
    huge_jpg = jpg[: sof + 5] + struct.pack(">HH", 60000, 60000) + jpg[sof + 9:]
    out.append(("huge.jpg", huge_jpg, "limit"))
    vp8x = bytearray(save(small, "WEBP", quality=80, exif=b"Exif\0\0" + exif_orientation_block(1)))
    assert vp8x[12:16] == b"VP8X"
    vp8x[24:27] = (59999).to_bytes(3, "little")
    vp8x[27:30] = (59999).to_bytes(3, "little")
    out.append(("huge.webp", bytes(vp8x), "limit"))
    bad_crc = bytearray(png)
    bad_crc[8 + 8 + 13] ^= 0xFF  # IHDR's CRC
    out.append(("bad_crc.png", bytes(bad_crc), "CRC"))
    out.append(("not_an_image.gif", save(small.convert("P"), "GIF"), "not a JPEG"))
    # EXIF that is no TIFF: PIL raises only when a JFIF density in dpi is there
    out.append(("bad_exif_dpi.jpg", save(small, "JPEG", dpi=(72, 72),
                                         exif=b"Exif\0\0XX*\0\x08\0\0\0"), "TIFF"))
    return out


def pil_outcome(data):
    try:
        im = decode_as_datasets(data)
        return f"PIL:{im.mode}:{im.size[0]}x{im.size[1]}"
    except Exception as e:  # what PIL does with it, for the record
        return "PIL:" + type(e).__name__


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cc12m", help="the cc12m test shard (cc12m-train-0000.tar)")
    args = ap.parse_args()
    os.makedirs(f"{OUT}/img", exist_ok=True)
    os.makedirs(f"{OUT}/hostile", exist_ok=True)
    table = unit_table()
    with open(f"{OUT}/unit.f32", "wb") as f:
        f.write(table.numpy().astype("<f4").tobytes())
    rows = []
    for name, ext, data, n in generated_cases():
        path = f"img/{name}.{ext}"
        with open(f"{OUT}/{path}", "wb") as f:
            f.write(data)
        t, off = process(data, n)
        if t is None:
            rows.append([name, path, n, 0, "skip", "-", "-", "-"])
            continue
        u8 = preimage(t, table)
        u8file = "-"
        if n <= 32:
            u8file = f"img/{name}.u8"
            with open(f"{OUT}/{u8file}", "wb") as f:
                f.write(u8.numpy().tobytes())
        rows.append([name, path, n, off, "ok", tensor_sha(t), u8file, "-"])
    for name, data, word in hostile_cases():
        path = f"hostile/{name}"
        with open(f"{OUT}/{path}", "wb") as f:
            f.write(data)
        rows.append([name, path, 32, 0, "refuse", "-", word, pil_outcome(data)])
    with open(f"{OUT}/cases.tsv", "w") as f:
        f.write("# case\tfile\tn\toffset\tstatus\tsha256\tu8|word\tPIL\n")
        for r in rows:
            f.write("\t".join(str(v) for v in r) + "\n")
    print(f"{len(rows)} cases", file=sys.stderr)
    if args.cc12m:
        ds = datasets.load_dataset("webdataset", data_files={"train": args.cc12m},
                                   split="train", streaming=True)
        with open(f"{OUT}/cc12m.tsv", "w") as f:
            f.write("# key\tcaption sha256\twidth\theight\toffset\ttensor sha256 (n=256)\n")
            for s in ds:
                img = s["jpg"]
                _offsets.clear()
                t = fd._process_cc12m_image(img, output_size=256)
                cap = hashlib.sha256(s["txt"].encode("utf-8")).hexdigest()
                sha = tensor_sha(t) if t is not None else "skip"
                off = _offsets[0] if _offsets else 0
                f.write(f"{s['__key__']}\t{cap}\t{img.size[0]}\t{img.size[1]}\t{off}\t{sha}\n")


if __name__ == "__main__":
    main()
