"""What participants see: the stimulus upsampled for the screen, MNIST optionally inverted.

The paper showed MNIST as a dark digit on a light background and upsampled both datasets; the
8-bit stimulus itself is never altered, only its display copy.
"""
from __future__ import annotations

import io

import numpy as np
from PIL import Image

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
