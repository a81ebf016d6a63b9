"""One style for every figure the project draws: journal-column widths, fonts readable at print size, a PDF
beside every PNG.

Sizes are in inches at print size (a single journal column is about 3.5 in wide, a full page width about 7.2 in),
so a font of 7-8 pt stays 7-8 pt on paper; the PNG is rendered at 300 dpi for slides and the PDF keeps text as
text (TrueType) for the journal's typesetting.
"""

from __future__ import annotations

import functools
import io
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from controversial.atomic import atomic_write_bytes  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType  # typing-only: matplotlib 3.8 lacks it at run time

logging.getLogger("fontTools").setLevel(logging.WARNING)  # PDF font subsetting logs a line per table at INFO

SINGLE_COLUMN = 3.5  # inches
DOUBLE_COLUMN = 7.2
STYLE: dict[RcKeyType, Any] = {
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "legend.frameon": False,
    "figure.titlesize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.linewidth": 0.6,
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "lines.linewidth": 1.0,
    "savefig.dpi": 300,
    "pdf.fonttype": 42,
    "svg.fonttype": "none",
}

P = ParamSpec("P")
R = TypeVar("R")


def styled(draw: Callable[P, R]) -> Callable[P, R]:
    """Draw under ``STYLE`` (a context, so importing this module changes no one else's figures)."""

    @functools.wraps(draw)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with plt.rc_context(STYLE):
            return draw(*args, **kwargs)

    return wrapper


def save(figure: plt.Figure, path: str | Path) -> Path:
    """``path`` (PNG, 300 dpi) and the same figure as PDF beside it, both written atomically; returns ``path``."""
    path = Path(path)
    for target, fmt in ((path, "png"), (path.with_suffix(".pdf"), "pdf")):
        buffer = io.BytesIO()
        figure.savefig(buffer, format=fmt, bbox_inches="tight", pad_inches=0.02)
        atomic_write_bytes(target, buffer.getvalue())
    plt.close(figure)
    return path
