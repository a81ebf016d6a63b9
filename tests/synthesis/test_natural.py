"""Ranking natural images by controversiality, and their export in the synthesis manifest format."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from controversial.records.manifest import read_manifest
from controversial.synthesis.engine import ordered_class_pairs
from controversial.synthesis.natural import calibrated_logits, hard_score_table, top_natural
from controversial.synthesis.objectives import hard_score
from controversial.synthesis.stimuli import load_png
from controversial.zoo.checkpoints import CheckpointInfo, save_checkpoint
from controversial.zoo.readout import Calibration
from controversial.zoo.registry import create_arch

ROOT = Path(__file__).resolve().parents[2]


def _images(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (n, 1, 28, 28), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)


def test_table_equals_the_hard_score_of_every_image_and_cell(tiny_pair):
    images = _images(20)
    logits = [calibrated_logits(m, images, batch_size=7, device=torch.device("cpu")) for m in tiny_pair]
    cells = ordered_class_pairs()
    table = hard_score_table(*logits, cells)
    assert table.shape == (20, 90)
    for column, cell in enumerate(cells):
        targets = torch.tensor([cell]).expand(20, 2)
        assert torch.allclose(table[:, column], hard_score(logits, targets))
    unbatched = calibrated_logits(tiny_pair[0], images.float() / 255, batch_size=20, device=torch.device("cpu"))
    assert torch.allclose(unbatched, logits[0], atol=1e-6)


def test_top_natural_returns_the_k_best_images_per_cell_in_order(tiny_pair):
    images = _images(30)
    logits = [calibrated_logits(m, images, batch_size=30, device=torch.device("cpu")) for m in tiny_pair]
    cells = ordered_class_pairs()[:5]
    picks = top_natural(*logits, cells, top_k=3, sharpness=1.0)
    table = hard_score_table(*logits, cells)
    assert len(picks) == 15
    for column, cell in enumerate(cells):
        mine = [p for p in picks if (p.class_a, p.class_b) == cell]
        assert [p.rank for p in mine] == [0, 1, 2]
        assert [p.hard for p in mine] == pytest.approx(sorted(table[:, column].tolist(), reverse=True)[:3])
        assert mine[0].hard == pytest.approx(
            min(mine[0].p_a[0], 1 - mine[0].p_a[1], mine[0].p_b[1], 1 - mine[0].p_b[0]), abs=1e-6
        )
    with pytest.raises(ValueError, match="top_k must be at least 1"):
        top_natural(*logits, cells, top_k=0, sharpness=1.0)


def _write_idx(path: Path, array: np.ndarray) -> None:
    header = bytes([0, 0, 8, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


@pytest.mark.slow
def test_rank_natural_cli_exports_a_manifest_of_test_images(tmp_path):
    raw = tmp_path / "data" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    images = _images(40, seed=3).numpy()[:, 0]
    _write_idx(raw / "t10k-images-idx3-ubyte", images)
    _write_idx(raw / "t10k-labels-idx1-ubyte", np.arange(40) % 10)
    for seed, name in ((1, "abs"), (2, "vgg")):
        kwargs = {"image_shape": [1, 28, 28], "hidden": 16, "seed": seed}
        info = CheckpointInfo(
            name=name,
            arch="tiny_mlp",
            arch_kwargs=kwargs,
            dataset="mnist",
            calibration=Calibration(1.0, -1.0, "identity"),
        )
        save_checkpoint(tmp_path / f"{name}.pt", create_arch("tiny_mlp", **kwargs), info)
    out = tmp_path / "out"
    command = [
        sys.executable,
        "rank_natural.py",
        f"output_dir={out}",
        f"data.root={tmp_path / 'data'}",
        "data.download=false",
        f"model_a.checkpoint={tmp_path}/abs.pt",
        f"model_b.checkpoint={tmp_path}/vgg.pt",
        "top_k=2",
        "progress=false",
    ]
    result = subprocess.run(
        command,
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert "abs vs vgg: ranked 40 test images;" in result.stdout and "180 images exported" in result.stdout
    rows = read_manifest(out / "manifest.csv")
    assert len(rows) == 180 and {r.source for r in rows} == {"natural"} and {r.seed for r in rows} == {0, 1}
    for row in rows[:10]:
        index = int(row.init.removeprefix("natural:"))
        assert np.array_equal(np.rint(load_png(out / row.image_file)[0] * 255).astype(np.uint8), images[index])
        assert row.accepted == (row.hard_score >= 0.75)
