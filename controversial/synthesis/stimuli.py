"""Stimulus pixels: 8-bit PNGs at native resolution, and the display convention of greyscale images.

File names and manifests are records (``controversial.records``); this module owns the pixels.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Sequence

import numpy as np
from PIL import Image

from controversial.atomic import atomic_write_bytes
from controversial.errors import UserError

log = logging.getLogger(__name__)

Inversion = Literal["auto", "true", "false"]


def parse_inversion(value: object) -> object:
    """``invert=true|false`` arrives from Hydra as a boolean; the option is the text auto | true | false."""
    return str(value).lower() if isinstance(value, bool) else value


INVERSIONS: tuple[str, ...] = ("auto", "true", "false")
_BORDER = 2  # pixels of the frame whose brightness tells the background
_DARK, _LIGHT = 0.25, 0.75  # a frame below _DARK is a dark background, above _LIGHT a light one


def image_to_uint8(image: np.ndarray) -> np.ndarray:
    """(C,H,W) float in [0,1] -> (H,W) or (H,W,C) uint8, rounding as the 8-bit quantiser does."""
    quantised = np.clip(np.rint(np.asarray(image, dtype=np.float64) * 255.0), 0, 255).astype(np.uint8)
    if quantised.ndim == 3 and quantised.shape[0] in (1, 3):
        quantised = quantised[0] if quantised.shape[0] == 1 else np.transpose(quantised, (1, 2, 0))
    return quantised


def save_png(path: str | Path, image: np.ndarray) -> None:
    """Save a (C,H,W) [0,1] image at native resolution as an 8-bit PNG, atomically."""
    buffer = io.BytesIO()
    Image.fromarray(image_to_uint8(image)).save(buffer, format="PNG")
    atomic_write_bytes(path, buffer.getvalue())


def load_png(path: str | Path) -> np.ndarray:
    """Load a PNG as (C,H,W) float32 in [0,1] (grey images get C=1)."""
    array = np.asarray(Image.open(path), dtype=np.float32) / 255.0
    if array.ndim == 2:
        return array[None]
    return np.transpose(array[..., :3], (2, 0, 1))


@dataclass(frozen=True)
class DisplayConvention:
    """Whether greyscale images are stored as displayed (dark object on a light background, as the PNAS
    release stores Experiment 1) and must be inverted (``1 - x``) for models trained on white-on-black MNIST."""

    invert: bool
    light: int  # images with a light frame
    dark: int  # images with a dark frame
    ambiguous: int  # images whose frame is neither
    note: str  # what was decided and why, for logs and reports


def border_brightness(image: np.ndarray) -> float:
    """Mean of the outer frame of a (C,H,W) [0,1] image: the background's brightness."""
    image = np.asarray(image, dtype=np.float64)
    frame = np.ones(image.shape[-2:], bool)
    frame[_BORDER:-_BORDER, _BORDER:-_BORDER] = False
    return float(image[..., frame].mean())


def display_convention(images: Sequence[np.ndarray], invert: Inversion = "auto") -> DisplayConvention:
    """Decide whether to invert a set of images. ``"true"``/``"false"`` decide explicitly; ``"auto"``
    inverts greyscale images whose frames are light, keeps colour images as they are, and warns when the
    frames disagree or are neither light nor dark (then the majority decides)."""
    if invert not in INVERSIONS:
        raise UserError(f"invert={invert!r}; allowed: {', '.join(INVERSIONS)}")
    grey = [im for im in images if np.asarray(im).shape[0] == 1]
    frames = np.array([border_brightness(im) for im in grey])
    light, dark = int((frames >= _LIGHT).sum()), int((frames <= _DARK).sum())
    ambiguous = len(frames) - light - dark
    if invert != "auto":
        return DisplayConvention(invert == "true", light, dark, ambiguous, f"invert={invert} (explicit)")
    if not grey:
        return DisplayConvention(False, 0, 0, 0, "colour images: used as stored")
    decided = light > dark
    note = (
        f"{light} of {len(frames)} greyscale images have a light background (dark-on-light, as displayed), "
        f"{dark} a dark one; " + ("inverting all (1 - x)" if decided else "using them as stored")
    )
    if (light and dark) or ambiguous:
        note += f" ({ambiguous} have neither); ambiguous: pass invert=true or invert=false to decide"
        log.warning(note)
    else:
        log.info(note)
    return DisplayConvention(decided, light, dark, ambiguous, note)
