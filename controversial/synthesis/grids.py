"""Figures of stimuli: the 10x10 matrix of a model pair in the style of the paper's Fig. 3."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from controversial.atomic import atomic_write_bytes  # noqa: E402


def show_image(axis, image: np.ndarray) -> None:
    """Draw a (C,H,W) image in [0,1] on a matplotlib axis at native pixels."""
    if image.shape[0] == 1:
        axis.imshow(image[0], cmap="gray", vmin=0, vmax=1, interpolation="nearest")
    else:
        axis.imshow(np.transpose(image, (1, 2, 0)), interpolation="nearest")


def save_figure(figure, path: str | Path, dpi: int = 150) -> None:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(figure)
    atomic_write_bytes(path, buffer.getvalue())


def plot_stimulus_grid(
    images: dict[tuple[int, int], np.ndarray],
    accepted: dict[tuple[int, int], bool],
    class_names: tuple[str, ...],
    model_a: str,
    model_b: str,
    path: str | Path,
) -> None:
    """Rows: model A's target class; columns: model B's. Failed cells are crossed out in red."""
    n = len(class_names)
    figure, axes = plt.subplots(n, n, figsize=(n * 0.9 + 1, n * 0.9 + 1))
    for a in range(n):
        for b in range(n):
            axis = axes[a, b]
            axis.set_xticks([])
            axis.set_yticks([])
            for spine in axis.spines.values():
                spine.set_visible(False)
            if (a, b) in images:
                show_image(axis, images[(a, b)])
                if not accepted.get((a, b), False):
                    axis.plot([0, 1], [0, 1], color="red", lw=1.5, transform=axis.transAxes)
                    axis.plot([0, 1], [1, 0], color="red", lw=1.5, transform=axis.transAxes)
            if b == 0:
                axis.set_ylabel(class_names[a], rotation=0, ha="right", va="center")
            if a == n - 1:
                axis.set_xlabel(class_names[b])
    figure.supylabel(f"{model_a} target (class a)")
    figure.supxlabel(f"{model_b} target (class b)")
    figure.suptitle(f"{model_a} vs {model_b}: {sum(accepted.values())}/{len(images)} cells accepted")
    save_figure(figure, path)
