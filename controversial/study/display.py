"""What participants see: the stimulus upsampled for the screen, MNIST optionally inverted, attention
checks drawn as images, and every display PNG padded to one length.

The paper showed MNIST as a dark digit on a light background and upsampled both datasets; the
8-bit stimulus itself is never altered, only its display copy.
"""

from __future__ import annotations

from typing import Literal
from pydantic import Field
from controversial.options import Options

import io
import struct
import zlib

import numpy as np
from PIL import Image, ImageDraw, ImageFont

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PADDING_CHUNK = b"paDd"  # ancillary, private, safe-to-copy: decoders ignore it

RESAMPLING = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}


def display_png(image: np.ndarray, size: int, resample: str = "bicubic", invert: bool = False) -> bytes:
    """PNG bytes of a uint8 (H,W) or (H,W,3) image scaled to ``size`` x ``size`` pixels."""
    if resample not in RESAMPLING:
        raise ValueError(f"unknown resample '{resample}'; known: {', '.join(RESAMPLING)}")
    if size <= 0:
        raise ValueError(f"display size must be positive, got {size}")
    array = np.asarray(image)
    if array.dtype != np.uint8:
        raise ValueError(f"expected a uint8 image, got {array.dtype}")
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
        raise ValueError(f"display size must be positive, got {size}")
    picture = Image.new("L", (size, size), 255)
    draw = ImageDraw.Draw(picture)
    margin = max(4, size // 16)
    for font_size in range(max(10, size // 10), 7, -1):  # the largest font whose wrapped text fits
        font = ImageFont.load_default(size=font_size)
        lines = _wrap(instruction, font, size - 2 * margin)
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


def _wrap(text: str, font: ImageFont.FreeTypeFont | ImageFont.ImageFont, width: int) -> list[str]:
    lines: list[str] = []
    for word in text.split():
        candidate = f"{lines[-1]} {word}" if lines else word
        if lines and font.getlength(candidate) <= width:
            lines[-1] = candidate
        else:
            lines.append(word)
    return lines


def pad_png(data: bytes, length: int) -> bytes:
    """``data`` grown to exactly ``length`` bytes by an ignored private chunk before IEND.

    Padding every display image to one size removes the Content-Length signal (natural photos,
    synthetic stimuli and attention checks compress differently); decoders skip the chunk.
    """
    if not data.startswith(PNG_SIGNATURE) or data[-12:-8] != b"\x00\x00\x00\x00" or data[-8:-4] != b"IEND":
        raise ValueError("pad_png: not a PNG ending in IEND")
    extra = length - len(data) - 12  # a chunk is 4 (length) + 4 (type) + data + 4 (CRC) bytes
    if extra < 0:
        raise ValueError(f"pad_png: a {len(data)}-byte PNG cannot be padded to {length} bytes (needs {len(data) + 12})")
    body = PADDING_CHUNK + bytes(extra)
    chunk = struct.pack(">I", extra) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)
    return data[:-12] + chunk + data[-12:]


class DisplayOptions(Options):
    """How stimuli are shown to participants."""

    size: int = Field(224, ge=8, le=4096, description="displayed image size in pixels")
    resample: Literal["nearest", "bilinear", "bicubic", "lanczos"] = Field("bicubic", description="upsampling filter")
    invert_mnist: bool = Field(True, description="dark digit on light background, as in the paper")
