"""``python overview.py sweep_dir=multirun/exp1_mnist``: one manifest and the summary figures of a sweep."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

from omegaconf import DictConfig, OmegaConf
from pydantic import Field

from controversial.atomic import atomic_write_text
from controversial.datasets import dataset_info
from controversial.display_paths import shown
from controversial.errors import UserError
from controversial.options import Options
from controversial.progress import Progress
from controversial.records.manifest import MANIFEST_NAME, ManifestRow, write_manifest
from controversial.records.runs import OVERVIEW_MARK, run_classes
from controversial.synthesis import sweep_overview as overview
from controversial.synthesis.naturalness import NaturalnessOptions
from controversial.tasks import Invocation

log = logging.getLogger(__name__)


class OverviewSettings(Options):
    sweep_dir: str = Field(description="a synthesis sweep folder (with <a>_vs_<b>/manifest.csv)")
    out_dir: str = Field(description="where the overview goes (default: <sweep_dir>/overview)")
    models: list[str] | None = Field(None, description="row/column order; default: the sweep's experiment list")
    fig2_class_pairs: list[tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)]]] | None = Field(
        None,
        description="class a (row model) and class b (column model) of each Fig. 2; null: (7, 3) as in the paper, "
        "or the sweep's first two classes where it has no classes 7 and 3",
    )
    naturalness: NaturalnessOptions = Field(default_factory=NaturalnessOptions)
    progress: bool = Field(True, description="progress bar on a terminal, periodic lines in a log file")


def _swept_models(sweep_dir: Path) -> list[str] | None:
    """The experiment's model list from Hydra's record of the sweep, if it had one.

    The record sits in the sweep dir, or in its parent when ``sweep_dir`` is one replication of a
    sweep over seeds (``<sweep>/seed_<seed>/<a>_vs_<b>``, as in exp2_cifar10).
    """
    for record in (sweep_dir / "multirun.yaml", sweep_dir.parent / "multirun.yaml"):
        if record.is_file():
            config = OmegaConf.load(record)
            models = config.get("models") if isinstance(config, DictConfig) else None  # a mapping, as Hydra writes it
            return list(models) if models is not None else None
    return None


def _fig2_class_pairs(asked: list[tuple[int, int]] | None, rows: list[ManifestRow]) -> list[tuple[int, int]]:
    """The class pairs of the Fig. 2 panels: those asked for, each of two different classes the sweep synthesized;
    by default the paper's (7, 3), or the sweep's first two classes (another dataset, or ``synthesis.classes``)."""
    present = sorted({r.class_a for r in rows} | {r.class_b for r in rows})
    if asked is None:
        return [(7, 3)] if {7, 3} <= set(present) else [(present[0], present[1])] if len(present) > 1 else []
    for class_a, class_b in asked:
        if class_a == class_b or class_a not in present or class_b not in present:
            raise UserError(
                f"fig2_class_pairs: [{class_a}, {class_b}] is not a pair of two different classes of the sweep "
                f"(its classes: {', '.join(map(str, present))})"
            )
    return asked


def run(cfg: OverviewSettings, invocation: Invocation) -> None:
    """The sweep's overview into ``cfg.out_dir`` (Hydra's run dir is set to it)."""
    sweep_dir, out_dir = Path(cfg.sweep_dir), Path(cfg.out_dir)
    try:
        manifests = overview.pair_manifests(sweep_dir, exclude=out_dir)
        rows = overview.collect_rows(manifests, out_dir)
    except (FileNotFoundError, ValueError) as error:
        raise UserError(str(error)) from None
    models = overview.model_order(rows, list(cfg.models) if cfg.models is not None else _swept_models(sweep_dir))
    summaries = overview.summarize_pairs(rows)
    table = overview.acceptance_markdown(summaries, models)
    # The mark first: a folder with the combined manifest (whose images are the runs') is never read as a run,
    # even when the overview is interrupted.
    atomic_write_text(out_dir / OVERVIEW_MARK, table)
    write_manifest(out_dir / MANIFEST_NAME, rows)
    overview.plot_acceptance_matrix(summaries, models, out_dir / "acceptance_matrix.png")
    fig2 = _fig2_class_pairs(cfg.fig2_class_pairs, rows)
    with Progress(len(fig2), "fig. 2", cfg.progress) as bar:
        for class_a, class_b in fig2:
            overview.plot_class_pair_matrix(
                rows, models, class_a, class_b, out_dir, out_dir / f"fig2_{class_a}_{class_b}.png"
            )
            bar.update()
    overview.plot_pair_grids(rows, out_dir)
    kid_table = _naturalness(cfg, manifests, rows, out_dir)
    accepted = sum(s.n_accepted for s in summaries.values())
    cells = sum(s.n_cells for s in summaries.values())
    pairs = f"{len(summaries)} model pair{'' if len(summaries) == 1 else 's'}"
    print(
        f"{pairs}, {accepted}/{cells} cells accepted ({100 * accepted / max(cells, 1):.1f}%), "
        f"{len(rows)} rows -> {shown(out_dir)}"
    )
    print(table, end="")
    if kid_table:
        print(kid_table, end="")
    transfer = overview.transfer_markdown(summaries)
    if transfer:  # some pair has held-out instances (docs/synthesis.md, Instances)
        atomic_write_text(out_dir / "transfer.md", transfer)
        print(transfer, end="")


def _naturalness(cfg: OverviewSettings, manifests: list[Path], rows: list[ManifestRow], out_dir: Path) -> str:
    """Each pair's KID of its accepted stimuli, written to naturalness.md (nothing with naturalness.measure=false)."""
    if not cfg.naturalness.measure:
        return ""
    classes = run_classes(manifests, rows)
    dataset = classes.described or dataset_info(classes.dataset)
    table = overview.naturalness_markdown(overview.pair_naturalness(rows, out_dir, dataset, cfg.naturalness), dataset)
    atomic_write_text(out_dir / "naturalness.md", table)
    return table
