"""The sweep overview: combined manifest, acceptance table/matrix, Fig. 2 and Fig. 3 grids."""

from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from controversial.config import CONF_DIR
from controversial.errors import UserError
from controversial.records.manifest import ManifestRow, read_manifest, write_manifest
from controversial.synthesis import sweep_overview as overview
from controversial.synthesis.stimuli import save_png
from controversial.tasks import Invocation
from controversial.tasks import overview as overview_task
from controversial.tasks.overview import OverviewSettings

CELLS = [(a, b) for a in range(10) for b in range(10) if a != b]


def _fake_pair(sweep: Path, a: str, b: str, failing: set[tuple[int, int]]) -> None:
    """A pair dir as synthesize.py writes it; each PNG's grey level encodes its cell (for checking Fig. 2)."""
    folder = sweep / f"{a}_vs_{b}"
    rows = []
    for ca, cb in CELLS:
        name = f"{a}_{ca}_vs_{b}_{cb}_seed0.png"
        save_png(folder / name, np.full((1, 28, 28), (10 * ca + cb) / 255))
        ok = (ca, cb) not in failing
        hard = 0.9 if ok else 0.5
        rows.append(
            ManifestRow(
                "mnist",
                a,
                b,
                ca,
                cb,
                str(ca),
                str(cb),
                0,
                "synthetic",
                "noise",
                5,
                False,
                hard,
                1.0,
                0.9,
                0.1,
                0.1,
                0.9,
                ok,
                "accepted" if ok else "below_threshold",
                name,
                0.1,
            )
        )
    write_manifest(folder / "manifest.csv", rows)


@pytest.fixture
def sweep(tmp_path) -> Path:
    _fake_pair(tmp_path, "abs", "kde", set())
    _fake_pair(tmp_path, "abs", "vgg", {(0, 1), (7, 3)})
    _fake_pair(tmp_path, "kde", "vgg", set(CELLS[:45]))
    (tmp_path / "multirun.yaml").write_text("models: [vgg, kde, abs, capsnet]\n")
    return tmp_path


def test_summaries_and_markdown_fill_both_triangles(sweep):
    rows = overview.collect_rows(overview.pair_manifests(sweep), sweep / "overview")
    summaries = overview.summarize_pairs(rows)
    assert summaries[("abs", "vgg")].n_accepted == 88 and summaries[("kde", "vgg")].acceptance_rate == 0.5
    table = overview.acceptance_markdown(summaries, ["vgg", "kde", "abs", "capsnet"])
    assert "| **vgg** |  | 45/90 (0.70) | 88/90 (0.90) | - |" in table
    assert "| **abs** | 88/90 (0.90) | 90/90 (0.90) |  | - |" in table


@pytest.mark.slow
def test_overview_command_writes_manifest_and_figures(sweep):
    cfg = OverviewSettings(
        sweep_dir=str(sweep), out_dir=str(sweep / "overview"), fig2_class_pairs=[(7, 3)], progress=False
    )
    overview_task.run(cfg, Invocation(sweep / "overview"))
    out = sweep / "overview"
    rows = read_manifest(out / "manifest.csv")
    assert len(rows) == 270 and all((out / r.image_file).is_file() for r in rows)
    assert rows[0].image_file == "../abs_vs_kde/abs_0_vs_kde_1_seed0.png"
    assert (out / "acceptance.md").read_text().splitlines()[0] == "| | vgg | kde | abs |"
    for name in (
        "acceptance_matrix.png",
        "fig2_7_3.png",
        "fig3_abs_vs_kde.png",
        "fig3_abs_vs_vgg.png",
        "fig3_kde_vs_vgg.png",
    ):
        assert (out / name).stat().st_size > 5_000, name
    assert len(overview.pair_manifests(sweep, exclude=out)) == 3  # a re-run ignores the overview's own manifest
    kid = (out / "naturalness.md").read_text()  # each pair's KID, measured by the bundled MNIST feature network
    assert kid.startswith("KID x 10^3 of each pair's accepted stimuli") and "| abs vs vgg | " in kid


def test_fig2_takes_the_mirrored_cell_from_the_other_orientation(sweep, monkeypatch):
    shown = []
    monkeypatch.setattr(overview, "show_image", lambda axis, image: shown.append(round(float(image[0, 0, 0]) * 255)))
    rows = overview.collect_rows(overview.pair_manifests(sweep), sweep / "overview")
    overview.plot_class_pair_matrix(rows, ["abs", "vgg"], 7, 3, sweep / "overview", sweep / "f.png")
    assert shown == [73, 37]  # abs sees 7 / vgg sees 3: (7, 3) of abs_vs_vgg; vgg sees 7 / abs sees 3: its (3, 7)


def test_bad_sweep_dirs_and_class_pairs_are_user_errors(tmp_path, sweep):
    cfg = OverviewSettings(
        sweep_dir=str(tmp_path / "none"), out_dir=str(tmp_path / "o"), fig2_class_pairs=[(7, 3)], progress=False
    )
    with pytest.raises(UserError, match="none does not exist: pass a synthesize.py run folder"):
        overview_task.run(cfg, Invocation(tmp_path / "o"))
    cfg = cfg.model_copy(update={"sweep_dir": str(sweep), "fig2_class_pairs": [(3, 3)]})
    with pytest.raises(UserError, match=r"fig2_class_pairs: \[3, 3\]"):
        overview_task.run(cfg, Invocation(tmp_path / "o"))


def test_overview_config_composes():
    from controversial.cli import register_defaults

    register_defaults("overview", OverviewSettings)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("overview", overrides=["sweep_dir=multirun/exp1_mnist"])
    assert cfg.out_dir == "multirun/exp1_mnist/overview" and cfg.fig2_class_pairs is None  # (7, 3) where present
