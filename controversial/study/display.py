"""What participants see: the stimulus upsampled for the screen, MNIST optionally inverted, attention
checks drawn as images, and every display PNG of a bundle re-encoded to one byte layout.

The paper showed MNIST as a dark digit on a light background and upsampled both datasets; the
8-bit stimulus itself is never altered, only its display copy.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Mapping
from typing import Literal

import numpy as np
from PIL import Image, ImageDraw, ImageFont
from pydantic import Field

from controversial.errors import UserError
from controversial.options import Options

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Empty deflate blocks that end on a byte boundary, by their size in bytes: m empty fixed-Huffman blocks
# (10 bits each) then one empty stored block (3 header bits, zeros to the byte boundary, LEN 0, NLEN 0xFFFF).
EMPTY_BLOCK_UNITS = {5: 0, 6: 1, 7: 2, 9: 3, 10: 4, 11: 5, 12: 6}
MIN_TAIL = 9  # every tail length >= 9 is a sum of units; 8 is not (nor 1-4)

RESAMPLING = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}


def display_png(image: np.ndarray, size: int, resample: str = "bicubic", invert: bool = False) -> bytes:
    """PNG bytes of a uint8 (H,W) or (H,W,3) image scaled to ``size`` x ``size`` pixels."""
    if resample not in RESAMPLING:
        raise UserError(f"unknown resample '{resample}'; known: {', '.join(RESAMPLING)}")
    if size <= 0:
        raise UserError(f"display size must be positive, got {size}")
    array = np.asarray(image)
    if array.dtype != np.uint8:
        raise UserError(f"expected a uint8 image, got {array.dtype}")
    if invert:
        array = 255 - array
    picture = Image.fromarray(array).resize((size, size), RESAMPLING[resample])
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


def png_to_uint8(data: bytes) -> np.ndarray:
    """Decode a stimulus PNG to uint8 (H,W) for grey or (H,W,3) for colour, without rescaling."""
    picture: Image.Image = Image.open(io.BytesIO(data))
    if picture.mode not in ("L", "RGB"):
        picture = picture.convert("RGB" if "A" in picture.mode or picture.mode == "P" else "L")
    return np.asarray(picture, dtype=np.uint8)


def attention_png(instruction: str, size: int, colour: bool = False) -> bytes:
    """An attention check drawn as an image: the instruction as dark text on white, wrapped to fit.

    Served like any stimulus (an opaque id and an image), the check is indistinguishable from a
    rated trial in the API, and a script has to read pixels, not JSON, to learn what it asks.
    ``colour`` gives an RGB PNG like the colour stimuli, so the PNG header does not single it out.
    """
    if size <= 0:
        raise UserError(f"display size must be positive, got {size}")
    picture = Image.new("L", (size, size), 255)
    draw = ImageDraw.Draw(picture)
    margin = max(4, size // 16)
    for font_size in range(max(10, size // 10), 7, -1):  # the largest font whose wrapped text fits
        font = ImageFont.load_default(size=font_size)
        lines = wrap_text(instruction, font, size - 2 * margin)
        height = len(lines) * int(font_size * 1.3)
        if height <= size - 2 * margin:
            break
    y = (size - height) // 2
    for line in lines:
        draw.text((margin, y), line, fill=0, font=font)
        y += int(font_size * 1.3)
    buffer = io.BytesIO()
    (picture.convert("RGB") if colour else picture).save(buffer, format="PNG")
    return buffer.getvalue()


def wrap_text(text: str, font: ImageFont.FreeTypeFont | ImageFont.ImageFont, width: int) -> list[str]:
    """``text`` in lines no wider than ``width`` pixels (a word longer than that gets a line of its own)."""
    lines: list[str] = []
    for word in text.split():
        candidate = f"{lines[-1]} {word}" if lines else word
        if lines and font.getlength(candidate) <= width:
            lines[-1] = candidate
        else:
            lines.append(word)
    return lines


def uniform_pngs(images: Mapping[str, bytes], at_least: int = 0) -> dict[str, bytes]:
    """Every PNG re-encoded to one byte layout: the same IHDR, then one IDAT of one length, then IEND.

    Natural photos, synthetic stimuli and attention checks compress differently, so their IDAT lengths
    (not only the file length) told a script which trial is a check without decoding a pixel. Here each
    image's filtered scanlines are kept (pixels unchanged), recompressed, and the deflate stream is padded
    with empty blocks to the longest one, so the chunk types, their lengths and the file length are the
    same for every image; only decoding tells them apart. ``at_least``: the IDAT length to pad to at least (room
    for the attention checks the server renders per participant, ``attention.py``).
    """
    header: bytes | None = None
    streams: dict[str, tuple[bytes, bytes]] = {}  # id -> (compressed scanlines up to a sync flush, adler32)
    for name, data in images.items():
        ihdr, scanlines = _ihdr_and_scanlines(name, data)
        if header is None:
            header = ihdr
        elif ihdr != header:
            raise UserError(
                f"display image {name!r} differs from the others in size, bit depth or colour type; every image "
                "of a bundle must share one PNG header so that none stands out"
            )
        streams[name] = _compressed(scanlines)
    if header is None:
        return {}
    length = max(max(len(body) for body, _ in streams.values()) + MIN_TAIL + 4, at_least)
    return {name: _assembled(header, body, adler, length) for name, (body, adler) in streams.items()}


def fit_png(data: bytes, header: bytes, idat_length: int) -> bytes | None:
    """``data`` re-encoded to a bundle's layout (``header`` its IHDR data, ``idat_length`` its one IDAT chunk's
    length), pixels unchanged; None when it compresses to more than fits."""
    ihdr, scanlines = _ihdr_and_scanlines("rendered", data)
    if ihdr != header:
        raise UserError("a rendered image differs from the bundle's display images in size or colour type")
    body, adler = _compressed(scanlines)
    padding = idat_length - len(body) - 4
    if padding < MIN_TAIL and padding not in EMPTY_BLOCK_UNITS:
        return None
    return _assembled(header, body, adler, idat_length)


def png_layout(data: bytes) -> tuple[bytes, int]:
    """(IHDR data, IDAT length) of a re-encoded display image: what every image of its bundle shares."""
    chunks = dict(png_chunks(data))
    return chunks[b"IHDR"], len(chunks[b"IDAT"])


def _compressed(scanlines: bytes) -> tuple[bytes, bytes]:
    compressor = zlib.compressobj(9)
    body = compressor.compress(scanlines) + compressor.flush(zlib.Z_SYNC_FLUSH)
    return body, struct.pack(">I", zlib.adler32(scanlines))


def _assembled(header: bytes, body: bytes, adler: bytes, length: int) -> bytes:
    return (
        PNG_SIGNATURE
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", body + _empty_blocks(length - len(body) - 4) + adler)
        + _chunk(b"IEND", b"")
    )


def png_chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """(type, data) of every chunk of a PNG, in order; a truncated file or bad checksum is an error."""
    if not data.startswith(PNG_SIGNATURE):
        raise UserError("not a PNG (no PNG signature)")
    chunks, at = [], len(PNG_SIGNATURE)
    while at < len(data):
        if at + 8 > len(data):
            raise UserError(f"truncated PNG: a chunk header at byte {at}")
        (size,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + size]
        crc = data[at + 8 + size : at + 12 + size]
        if len(body) != size or len(crc) != 4 or struct.unpack(">I", crc)[0] != zlib.crc32(kind + body):
            raise UserError(f"corrupt PNG: chunk {kind!r} at byte {at} is truncated or fails its CRC")
        chunks.append((kind, body))
        at += 12 + size
    return chunks


def _ihdr_and_scanlines(name: str, data: bytes) -> tuple[bytes, bytes]:
    chunks = png_chunks(data)
    kinds = [kind for kind, _ in chunks]
    extra = sorted({k.decode("latin-1") for k in kinds} - {"IHDR", "IDAT", "IEND"})
    if not kinds or kinds[0] != b"IHDR" or kinds[-1] != b"IEND" or extra:
        raise UserError(
            f"display image {name!r}: expected IHDR, IDAT chunks and IEND only (as PIL writes grey and RGB "
            f"images), found {', '.join(extra) or 'another order'}"
        )
    return chunks[0][1], zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _empty_blocks(length: int) -> bytes:
    """Exactly ``length`` bytes of empty deflate blocks from a byte boundary, the last one final.

    Empty blocks decode to nothing, so they lengthen the compressed stream without touching a pixel.
    """
    if length < MIN_TAIL and length not in EMPTY_BLOCK_UNITS:
        raise UserError(f"cannot pad a deflate stream by {length} bytes (allowed: 5-7 or at least {MIN_TAIL})")
    units = []
    while length not in EMPTY_BLOCK_UNITS:
        step = 6 if length == 13 else 5  # 13 = 6 + 7: never leave 8, which no unit makes
        units.append(step)
        length -= step
    units.append(length)
    return b"".join(_empty_unit(EMPTY_BLOCK_UNITS[size], final=k == len(units) - 1) for k, size in enumerate(units))


def _empty_unit(fixed_blocks: int, final: bool) -> bytes:
    bits = [0, 1, 0] + [0] * 7  # BFINAL 0, BTYPE 01 (fixed Huffman), end-of-block (code 256: seven 0 bits)
    stream = bits * fixed_blocks + [int(final), 0, 0]  # stored block header: BFINAL, BTYPE 00
    stream += [0] * (-len(stream) % 8)
    packed = bytes(sum(bit << i for i, bit in enumerate(stream[at : at + 8])) for at in range(0, len(stream), 8))
    return packed + b"\x00\x00\xff\xff"  # LEN 0, NLEN


class DisplayOptions(Options):
    """How stimuli are shown to participants."""

    size: int = Field(224, ge=8, le=4096, description="displayed image size in pixels")
    resample: Literal["nearest", "bilinear", "bicubic", "lanczos"] = Field("bicubic", description="upsampling filter")
    invert_mnist: bool = Field(True, description="dark digit on light background, as in the paper")
    degrees: float | None = Field(
        None,
        gt=0,
        le=60,
        description="show stimuli at this visual angle (deg), measured per participant by a virtual chinrest "
        "before the practice; null: at `size` CSS pixels whatever the screen",
    )
