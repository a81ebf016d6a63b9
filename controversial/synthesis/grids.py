"""Figures of stimuli: the K x K matrix of a model pair in the style of the paper's Fig. 3."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.layout_engine import ConstrainedLayoutEngine

from controversial.figure_style import DOUBLE_COLUMN, save, styled


def show_image(axis, image: np.ndarray) -> None:
    """Draw a (C,H,W) image in [0,1] on a matplotlib axis at native pixels."""
    if image.shape[0] == 1:
        axis.imshow(image[0], cmap="gray", vmin=0, vmax=1, interpolation="nearest")
    else:
        axis.imshow(np.transpose(image, (1, 2, 0)), interpolation="nearest")


def save_figure(figure, path: str | Path) -> None:
    """The PNG and a PDF beside it, in the project's figure style (``figure_style.save``)."""
    save(figure, path)


def image_matrix(n_rows: int, n_cols: int, width: float = 0.8 * DOUBLE_COLUMN):
    """A figure of image cells with almost no gap between them or below the title (constrained layout)."""
    figure, axes = plt.subplots(
        n_rows,
        n_cols,
        figsize=(width, width * n_rows / n_cols + 0.4),
        squeeze=False,
        layout=ConstrainedLayoutEngine(w_pad=0.01, h_pad=0.01, wspace=0.02, hspace=0.02),
    )
    for axis in axes.flat:  # an empty cell shows nothing, not an axis frame
        axis.set_xticks([])
        axis.set_yticks([])
        for spine in axis.spines.values():
            spine.set_visible(False)
    return figure, axes


@styled
def plot_stimulus_grid(
    images: dict[tuple[int, int], np.ndarray],
    accepted: dict[tuple[int, int], bool],
    class_names: tuple[str, ...],
    model_a: str,
    model_b: str,
    path: str | Path,
    classes: Sequence[int] | None = None,
) -> None:
    """Rows: model A's target class; columns: model B's. Failed cells are crossed out in red. ``classes``: the
    class indices shown (a run of ``synthesis.classes``), default every class of ``class_names``."""
    shown = list(range(len(class_names)) if classes is None else classes)
    n = len(shown)
    figure, axes = image_matrix(n, n)
    for row, a in enumerate(shown):
        for column, b in enumerate(shown):
            axis = axes[row, column]
            if (a, b) in images:
                show_image(axis, images[(a, b)])
                if not accepted.get((a, b), False):
                    axis.plot([0, 1], [0, 1], color="red", lw=1, transform=axis.transAxes)
                    axis.plot([0, 1], [1, 0], color="red", lw=1, transform=axis.transAxes)
            if column == 0:
                axis.set_ylabel(class_names[a], rotation=0, ha="right", va="center", fontsize=7)
            if row == n - 1:
                axis.set_xlabel(class_names[b], fontsize=7)
    figure.supylabel(f"{model_a} target (class a)")
    figure.supxlabel(f"{model_b} target (class b)")
    figure.suptitle(f"{model_a} vs {model_b}: {sum(accepted.values())}/{len(images)} cells accepted")
    save_figure(figure, path)
