#!/usr/bin/env python3
"""mkimages.py — small image folders for the tests, made with PIL from scikit-image's real photos (Debian's
python3-skimage) or, without it, from a PIL gradient.

  mkimages.py good DIR     DIR/{train,val}/{a,b,c}/...: JPEG and PNG in RGB, L, P (with and without tRNS), LA,
                           RGBA, 1-bit, 16-bit gray and RGB, CMYK JPEG, progressive JPEG, odd sizes, 1x1, upper-case
                           extensions, a nested folder
  mkimages.py bad KIND OUT one bad file: corrupt_jpeg truncated_jpeg corrupt_png truncated_png zero text huge_png
                           huge_jpeg bmp (huge: 60000x60000 JPEG, 65535x65535 PNG headers)
  mkimages.py photos DIR   the real photos as given (JPEG and PNG, gray, palette, RGBA) plus palette, 16-bit,
                           CMYK and odd-size variants: the preprocessing-parity set
"""
import io
import os
import struct
import sys
import zlib

from PIL import Image

SKIMAGE = "/usr/lib/python3/dist-packages/skimage/data"
PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png", "camera.png",
          "coins.png", "hubble_deep_field.jpg", "retina.jpg", "horse.png", "green_palette.png", "logo.png"]


def base(size=(96, 72)):
    p = os.path.join(SKIMAGE, "chelsea.png")
    if os.path.exists(p):
        return Image.open(p).convert("RGB").resize(size, Image.BILINEAR)
    im = Image.new("RGB", size)
    im.putdata([((x * 255) // size[0], (y * 255) // size[1], 128) for y in range(size[1]) for x in range(size[0])])
    return im


def png_chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)


def raw_png(path, w, h, depth, ctype, rows):
    data = b"".join(b"\x00" + r for r in rows)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 0)) +
                png_chunk(b"IDAT", zlib.compress(data)) + png_chunk(b"IEND", b""))


def variants(im, d, tag):
    """Every colour layout PIL's convert('RGB') handles, written into folder d."""
    os.makedirs(d, exist_ok=True)
    im.save(os.path.join(d, tag + "_rgb.jpg"), quality=90)
    im.save(os.path.join(d, tag + "_prog.JPEG"), quality=85, progressive=True)
    im.convert("L").save(os.path.join(d, tag + "_gray.jpg"), quality=90)
    im.convert("CMYK").save(os.path.join(d, tag + "_cmyk.jpg"), quality=90)
    im.save(os.path.join(d, tag + "_rgb.png"))
    im.convert("L").save(os.path.join(d, tag + "_gray.png"))
    im.convert("P", palette=Image.ADAPTIVE, colors=64).save(os.path.join(d, tag + "_pal.png"))
    p = im.convert("P", palette=Image.ADAPTIVE, colors=16)
    p.info["transparency"] = 3
    p.save(os.path.join(d, tag + "_paltrns.png"), transparency=3)
    im.convert("LA").save(os.path.join(d, tag + "_la.png"))
    im.convert("RGBA").save(os.path.join(d, tag + "_rgba.png"))
    im.convert("1").save(os.path.join(d, tag + "_bilevel.png"))
    w, h = im.size
    g = im.convert("L").tobytes()
    raw_png(os.path.join(d, tag + "_gray16.png"), w, h, 16, 0,
            [b"".join(struct.pack(">H", g[y * w + x] * 3) for x in range(w)) for y in range(h)])
    rgb = im.tobytes()
    raw_png(os.path.join(d, tag + "_rgb16.png"), w, h, 16, 2,
            [b"".join(struct.pack(">H", rgb[(y * w + x) * 3 + c] * 257 + x) for x in range(w) for c in range(3))
             for y in range(h)])


def good(root):
    im = base()
    for split, n in (("train", 1), ("val", 1)):
        for k, cls in enumerate(["a", "b", "c"]):
            d = os.path.join(root, split, cls)
            rot = im.rotate(90 * k, expand=True).resize((37 + 11 * k, 53 - 7 * k))
            variants(rot, d, "%s%d" % (cls, n))
            os.makedirs(os.path.join(d, "nested"), exist_ok=True)
            rot.save(os.path.join(d, "nested", "deep.PNG"))
            Image.new("RGB", (1, 1), (200, 10 * k, 30)).save(os.path.join(d, "one.png"))
            with open(os.path.join(d, "notes.txt"), "w") as f:
                f.write("not an image, and not listed: no image extension\n")


def bad(kind, out):
    buf = io.BytesIO()
    im = base((64, 48))
    if kind in ("corrupt_jpeg", "truncated_jpeg", "huge_jpeg"):
        im.save(buf, "JPEG", quality=90)
        b = bytearray(buf.getvalue())
        if kind == "corrupt_jpeg":
            i = b.index(b"\xff\xda")  # start of scan: garble the huffman table before it
            j = b.index(b"\xff\xc4")
            for k in range(j + 5, min(j + 40, i)):
                b[k] = 0xff
        elif kind == "truncated_jpeg":
            b = b[:len(b) * 2 // 3]
        else:  # SOF0 claiming 65535x65535
            i = b.index(b"\xff\xc0")
            b[i + 5:i + 9] = struct.pack(">HH", 60000, 60000)  # libjpeg itself stops at 65500
        open(out, "wb").write(bytes(b))
    elif kind in ("corrupt_png", "truncated_png", "huge_png"):
        im.save(buf, "PNG")
        b = bytearray(buf.getvalue())
        if kind == "corrupt_png":
            i = b.index(b"IDAT")
            for k in range(i + 8, i + 40):
                b[k] ^= 0x5a
        elif kind == "truncated_png":
            b = b[:len(b) // 2]
        else:  # IHDR of 65535x65535 with a valid CRC, then a tiny IDAT
            b = bytearray(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 65535, 65535, 8, 2, 0, 0, 0)) +
                          png_chunk(b"IDAT", zlib.compress(b"\x00" * 16)) + png_chunk(b"IEND", b""))
        open(out, "wb").write(bytes(b))
    elif kind == "zero":
        open(out, "wb").close()
    elif kind == "text":
        open(out, "w").write("this is a text file named like an image\n")
    elif kind == "bmp":
        im.save(out, "BMP")
    else:
        sys.exit("mkimages: unknown bad kind %s" % kind)


def photos(root):
    os.makedirs(root, exist_ok=True)
    for name in PHOTOS:
        p = os.path.join(SKIMAGE, name)
        if os.path.exists(p):
            with open(p, "rb") as f, open(os.path.join(root, name), "wb") as g:
                g.write(f.read())
    im = Image.open(os.path.join(SKIMAGE, "coffee.png")).convert("RGB")
    im.convert("CMYK").save(os.path.join(root, "coffee_cmyk.jpg"), quality=92)
    im.convert("P", palette=Image.ADAPTIVE, colors=200).save(os.path.join(root, "coffee_palette.png"))
    im.convert("L").save(os.path.join(root, "coffee_gray.jpg"), quality=92)
    im.resize((301, 199), Image.BICUBIC).save(os.path.join(root, "coffee_odd.jpg"), quality=88)
    im.resize((223, 511), Image.BICUBIC).save(os.path.join(root, "coffee_tall.png"))
    w, h = 120, 90
    g = im.convert("L").resize((w, h)).tobytes()
    raw_png(os.path.join(root, "coffee_gray16.png"), w, h, 16, 0,
            [b"".join(struct.pack(">H", g[y * w + x]) for x in range(w)) for y in range(h)])
    rgb = im.resize((w, h)).tobytes()
    raw_png(os.path.join(root, "coffee_rgb16.png"), w, h, 16, 2,
            [b"".join(struct.pack(">H", rgb[(y * w + x) * 3 + c] * 257) for x in range(w) for c in range(3))
             for y in range(h)])


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "good":
        good(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "bad":
        bad(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "photos":
        photos(sys.argv[2])
    else:
        sys.exit(__doc__)
