"""Trained instances: recorded and found by seed, ensembles in the objective, held-out columns and transfer."""

import json
from pathlib import Path

import pytest
import torch
from helpers import IMAGE_SHAPES, run_task, tiny_abs_vgg_overrides

from controversial.errors import UserError
from controversial.records.manifest import ManifestRow, read_manifest, write_manifest
from controversial.synthesis.engine import noise_images, score_images, synthesize_batch
from controversial.synthesis.ensembles import StepMembers, step_schedule
from controversial.synthesis.objectives import controversy_terms, hard_score, worst_case_probabilities
from controversial.synthesis.options import SynthesisOptions
from controversial.synthesis.sweep_overview import summarize_pairs, transfer, transfer_markdown
from controversial.zoo.checkpoints import CheckpointInfo, load_checkpoint, save_checkpoint
from controversial.zoo.instances import find_instances, instance_path, select_instances
from controversial.zoo.model_card import write_model_card
from controversial.zoo.readout import Calibration
from controversial.zoo.registry import create_arch


def write_instance(primary: Path, seed: int, name: str = "vgg", recorded: int | None = None) -> Path:
    """A tiny random MLP saved as instance ``seed`` of the model whose bundled checkpoint is ``primary``."""
    kwargs = {"image_shape": IMAGE_SHAPES["mnist"], "hidden": 16, "seed": 100 + seed}
    info = CheckpointInfo(
        name=name,
        arch="tiny_mlp",
        arch_kwargs=kwargs,
        dataset="mnist",
        calibration=Calibration(1.0, -1.0, "identity"),
        metrics={"test_accuracy": 0.1, "n_test": 10, "test_nll_uncalibrated": 1.0, "test_nll_calibrated": 1.0},
        train_config={"seed": seed if recorded is None else recorded, "epochs": 3},
        command=f"python train.py model={name} seed={seed}",
    )
    path = instance_path(primary, seed) if seed else primary
    save_checkpoint(path, create_arch("tiny_mlp", **kwargs), info)
    return path


def test_instances_are_found_by_their_recorded_seed(tmp_path):
    primary = tmp_path / "mnist" / "vgg.pt"
    write_instance(primary, 0)
    write_instance(primary, 2)
    assert instance_path(primary, 2) == tmp_path / "mnist" / "vgg" / "seed2.pt"
    assert find_instances(primary) == {0: primary, 2: instance_path(primary, 2)}
    assert select_instances("vgg", primary, [2, 0]) == {2: instance_path(primary, 2), 0: primary}
    with pytest.raises(UserError, match=r"no trained instance of seed 1; trained: 0, 2.*model=vgg seed=1"):
        select_instances("vgg", primary, [0, 1])
    write_instance(primary, 3, recorded=4)  # a renamed file cannot pass as another instance
    with pytest.raises(UserError, match="named for seed 3 but trained with seed 4"):
        find_instances(primary)


def test_the_model_card_lists_each_instance_after_its_model(tmp_path):
    primary = tmp_path / "mnist" / "vgg.pt"
    write_instance(primary, 0)
    write_instance(primary, 1)
    text = write_model_card(tmp_path).read_text()
    assert text.index("| mnist/vgg |") < text.index("| mnist/vgg seed 1 |")
    assert "### mnist/vgg seed 1\n\nAnother trained instance of mnist/vgg: the same recipe trained from seed 1" in text
    assert "`python train.py model=vgg seed=1`" in text and "`mnist/vgg/seed1.pt`" in text


@pytest.mark.slow  # trains twice (about 10 s)
def test_the_train_command_writes_another_seed_beside_the_bundled_instance(tmp_path, monkeypatch):
    from helpers import train_in

    from controversial.tasks import train
    from controversial.zoo.checkpoints import read_checkpoint

    def stand_in(dataset, split, root, download=True):
        generator = torch.Generator().manual_seed(0 if split == "train" else 1)
        return torch.randint(0, 256, (64, 1, 28, 28), generator=generator, dtype=torch.uint8), torch.arange(64) % 10

    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "tinyseed.yaml").write_text(
        "name: tinyseed\ndataset: mnist\narch: tiny_mlp\narch_kwargs: {hidden: 8}\n"
        "train: {method: supervised, epochs: 1, batch_size: 32, seed: 0}\n"
    )
    monkeypatch.setattr(train, "load_uint8", stand_in)
    bundled = train_in(tmp_path, ["model=tinyseed"])
    other = train_in(tmp_path, ["model=tinyseed", "seed=3"])
    assert bundled == tmp_path / "models" / "mnist" / "tinyseed.pt"
    assert other == tmp_path / "models" / "mnist" / "tinyseed" / "seed3.pt"
    assert read_checkpoint(other)[0].train_config["seed"] == 3
    assert find_instances(bundled) == {0: bundled, 3: other}
    weights = [read_checkpoint(p)[1]["net.1.weight"] for p in (bundled, other)]
    assert not torch.equal(*weights)  # the seed changed the training


def test_training_never_replaces_a_checkpoint_unless_told(tmp_path):
    from helpers import train_in

    bundled = tmp_path / "models" / "mnist" / "vgg.pt"
    bundled.parent.mkdir(parents=True)
    bundled.write_bytes(b"the bundled checkpoint")
    for overrides in (["model=vgg"], ["model=vgg", "seed=0"]):  # refused before any data is read
        with pytest.raises(UserError, match=r"vgg\.pt already exists; train into another folder with models_dir="):
            train_in(tmp_path, overrides)
    instance_path(bundled, 4).parent.mkdir()
    instance_path(bundled, 4).write_bytes(b"an instance")
    with pytest.raises(UserError, match=r"seed4\.pt already exists.*overwrite=true"):
        train_in(tmp_path, ["model=vgg", "seed=4"])
    assert bundled.read_bytes() == b"the bundled checkpoint"


def test_the_ensemble_terms_hold_every_instance_to_its_model():
    a0, a1, b = torch.tensor([[2.0, -1.0]]), torch.tensor([[0.5, 0.0]]), torch.tensor([[-3.0, 1.0]])
    targets = torch.tensor([[0, 1]])
    terms = controversy_terms([a0, a1, b], targets, groups=[0, 0, 1])
    assert terms.tolist() == [[2.0, 1.0, 0.5, -0.0, 3.0, 1.0]]
    # the hard score of the ensemble is the worst of the pairs (instance of A, B)
    pairwise = [hard_score([a, b], targets) for a in (a0, a1)]
    assert torch.equal(hard_score([a0, a1, b], targets, [0, 0, 1]), torch.minimum(*pairwise))
    # without groups, the paper's terms, in the paper's order
    assert controversy_terms([a0, b], targets).tolist() == [[2.0, 1.0, 3.0, 1.0]]
    with pytest.raises(UserError, match="targets has 2 columns"):
        controversy_terms([a0, b], targets, groups=[0, 2])


def test_synthesis_against_an_ensemble_accepts_on_every_instance(tmp_path):
    models = [load_checkpoint(write_instance(tmp_path / "a.pt", s, "a")) for s in (0, 1)]
    models.append(load_checkpoint(write_instance(tmp_path / "b.pt", 0, "b")))
    targets = torch.tensor([[3, 7], [1, 2]])
    options = SynthesisOptions(max_steps=20, stop_score=None)
    start = noise_images([(3, 7), (1, 2)], [0, 0], (1, 28, 28))
    result = synthesize_batch(models, targets, start, options, groups=[0, 0, 1])
    pair_hard = [score_images([a, models[2]], result.images, targets, options)[0] for a in models[:2]]
    assert torch.allclose(result.hard, torch.minimum(*pair_hard))  # accepted only if every instance passes
    with torch.no_grad():
        per_instance = torch.stack([torch.sigmoid(m(result.images).gather(1, targets)) for m in models], 1)
    assert torch.allclose(result.probabilities, worst_case_probabilities(per_instance, [0, 0, 1]))
    assert torch.allclose(result.probabilities[:, 0, 0], per_instance[:, :2, 0].min(1).values)
    assert torch.allclose(result.probabilities[:, 0, 1], per_instance[:, :2, 1].max(1).values)
    single = synthesize_batch(models[::2], targets, start, options)  # no groups: the paper's procedure
    grouped = synthesize_batch(models[::2], targets, start, options, groups=[0, 1])
    assert torch.equal(single.images, grouped.images)


class ConstantLogits(torch.nn.Module):
    """A stand-in instance whose calibrated logits are fixed (the image only keeps the gradient defined), counting
    its forward passes: what a round-robin step runs is visible."""

    def __init__(self, logits: list[float]):
        super().__init__()
        self.logits = torch.tensor(logits)
        self.calls = 0

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.logits.expand(len(images), -1) + 0 * images.flatten(1).sum(1, keepdim=True)

    def reset_state(self) -> None:
        pass

    def set_active_rows(self, rows: torch.Tensor) -> None:
        pass


def test_the_round_robin_schedule_cycles_through_every_combination():
    assert step_schedule(3, None, "round_robin") == (StepMembers((0, 1, 2), None),)
    assert step_schedule(3, [0, 0, 1], "joint") == (StepMembers((0, 1, 2), (0, 0, 1)),)
    cycle = step_schedule(5, [0, 0, 1, 1, 1], "round_robin")
    assert [m.indices for m in cycle] == [(0, 2), (1, 3), (0, 4), (1, 2), (0, 3), (1, 4)]  # lcm(2, 3) steps
    assert {m.groups for m in cycle} == {(0, 1)}


def test_round_robin_runs_one_instance_per_model_and_stops_only_when_every_instance_set_agrees():
    sure, unsure, b = [4.0, -4.0], [0.0, 0.0], [-4.0, 4.0]  # instance of A: class 0 vs 1; B: class 1
    targets, start = torch.tensor([[0, 1]]), noise_images([(0, 1)], [0], (1, 28, 28))
    options = SynthesisOptions(max_steps=8, patience=100, ensemble="round_robin")  # stop_score 0.9

    models = [ConstantLogits(sure), ConstantLogits(sure), ConstantLogits(b)]
    result = synthesize_batch(models, targets, start, options, groups=[0, 0, 1])
    assert int(result.steps[0]) == 2  # both instances of A seen at >= 0.9, not the first alone
    assert [m.calls for m in models] == [1 + 1, 1 + 1, 2 + 1]  # one instance of A per step (+ the final scoring)

    models = [ConstantLogits(sure), ConstantLogits(unsure), ConstantLogits(b)]
    result = synthesize_batch(models, targets, start, options, groups=[0, 0, 1])
    assert int(result.steps[0]) == 8  # instance 1 never agrees: no early stop
    assert float(result.hard[0]) == pytest.approx(0.5)  # and acceptance is scored on every instance
    assert int(synthesize_batch(models[::2], targets, start, options).steps[0]) == 1  # the sure one alone stops


def test_the_diffusion_sampler_refuses_round_robin_ensembles():
    from controversial.synthesis.diffusion import guided_diffusion
    from controversial.synthesis.options import DiffusionOptions, MethodRun, OptimizerOptions

    options = SynthesisOptions(method="diffusion", ensemble="round_robin")
    run = MethodRun(0, OptimizerOptions(), DiffusionOptions(), "mnist", groups=[0, 0, 1])
    with pytest.raises(UserError, match="ensemble=round_robin applies to synthesis.method=gradient"):
        guided_diffusion([], torch.tensor([[0, 1]]), torch.zeros(1, 1, 28, 28), options, run)


def test_every_row_carries_the_held_out_instances(tmp_path):
    folder = tmp_path / "checkpoints"
    overrides = tiny_abs_vgg_overrides(folder)
    for seed in (1, 2):
        write_instance(folder / "vgg.pt", seed)
    quick = ["synthesis.classes=[3,7]", "synthesis.max_steps=5", "max_attempts=1", "progress=false"]
    rows = run_task("synthesize", [*overrides, *quick], tmp_path / "single")
    for row in rows:
        assert (row.instances_a, row.instances_b) == ("0", "0")
        assert [part.split(":")[0] for part in row.heldout_probabilities.split(";")] == ["vgg@1", "vgg@2"]
        assert row.heldout_hard_score is not None and 0 <= row.heldout_hard_score <= 1
        assert row.heldout_accepted == (row.heldout_hard_score >= 0.75)
    assert read_manifest(tmp_path / "single" / "manifest.csv") == rows

    ensemble = run_task("synthesize", [*overrides, *quick, "model_b.instances=[0,1]"], tmp_path / "ensemble")
    assert {r.instances_b for r in ensemble} == {"0,1"}
    assert {r.heldout_probabilities.split(":")[0] for r in ensemble} == {"vgg@2"}
    assert (tmp_path / "ensemble" / "abs_3_vs_vgg_7_seed0.png").is_file()
    in_turn = ["model_b.instances=[0,1]", "synthesis.ensemble=round_robin"]
    rows = run_task("synthesize", [*overrides, *quick, *in_turn], tmp_path / "in_turn")
    assert len(rows) == 2
    assert {(r.instances_b, r.heldout_probabilities.split(":")[0]) for r in rows} == {("0,1", "vgg@2")}

    with pytest.raises(UserError, match="no trained instance of seed 5"):
        run_task("synthesize", [*overrides, *quick, "model_b.instances=[0,5]"], tmp_path / "missing")


def _row(cell: tuple[int, int], accepted: bool, heldout: bool | None) -> ManifestRow:
    names = [str(k) for k in range(10)]
    return ManifestRow(
        "mnist", "abs", "vgg", *cell, names[cell[0]], names[cell[1]], 0, "synthetic", "noise", 10, False,
        0.9 if accepted else 0.1, 1.0, 0.9, 0.1, 0.1, 0.9, accepted, "accepted" if accepted else "below_threshold",
        f"{cell[0]}_{cell[1]}.png", 0.1, "0", "0", None if heldout is None else (0.8 if heldout else 0.2), heldout, "",
    )  # fmt: skip


def test_the_transfer_table_of_a_tiny_sweep(tmp_path):
    rows = [_row((0, 1), True, True), _row((1, 0), True, False), _row((2, 3), True, True), _row((3, 2), False, None)]
    assert transfer(rows) == (2, 3)  # rejected stimuli do not count
    assert transfer([_row((0, 1), True, None)]) is None  # no held-out instance
    summaries = summarize_pairs(rows)
    assert summaries[("abs", "vgg")].transfer == (2, 3)
    assert transfer_markdown(summaries) == (
        "| pair | accepted by every held-out instance |\n|---|---|\n| abs vs vgg | 2/3 (67%) |\n"
    )
    write_manifest(tmp_path / "manifest.csv", rows)
    assert read_manifest(tmp_path / "manifest.csv") == rows
    legacy = tmp_path / "legacy.csv"  # written before the instance columns: still read
    lines = (tmp_path / "manifest.csv").read_text().splitlines()
    legacy.write_text("\n".join(",".join(line.split(",")[:22]) for line in lines) + "\n")
    assert [r.heldout_accepted for r in read_manifest(legacy)] == [None] * 4
    assert read_manifest(legacy)[0].heldout_hard_score is None and read_manifest(legacy)[0].instances_a == ""


def test_a_model_scored_as_the_mean_of_its_instances(tmp_path):
    from controversial.zoo.instances import instance_models

    primary = tmp_path / "mnist" / "vgg.pt"
    for seed in (0, 1):
        write_instance(primary, seed)
    *instances, mean = instance_models(primary, "vgg")
    assert [m.name for m in (*instances, mean)] == ["vgg@0", "vgg@1", "vgg"]
    images = torch.rand(4, 1, 28, 28)
    expected = (instances[0].probabilities(images) + instances[1].probabilities(images)) / 2
    assert torch.allclose(mean.probabilities(images), expected, atol=1e-5)


def test_the_spread_between_instances_beside_the_ceiling():
    from controversial.analysis.instance_spread import instance_groups, instance_spread_markdown

    mean = {"vgg@0": 0.50, "vgg@1": 0.44, "vgg": 0.48, "abs": 0.30, "kde@0": 0.2}
    assert instance_groups(list(mean)) == {"vgg": ["vgg@0", "vgg@1"]}  # one instance is no spread
    table = instance_spread_markdown(mean, (0.6, 0.7))
    assert "noise ceiling 0.600 to 0.700" in table
    assert "| vgg | vgg@0 0.500, vgg@1 0.440 | 0.060 | 0.480 | abs: 0.180 |" in table
    assert instance_spread_markdown({"vgg": 0.5, "abs": 0.3}, (0.6, 0.7)) == ""


def test_evaluate_writes_each_instance_and_their_mean(tmp_path, capsys):
    import numpy as np

    from controversial.records.names import stimulus_filename
    from controversial.records.responses import read_model_responses
    from controversial.synthesis.stimuli import save_png

    primary = tmp_path / "mnist" / "vgg.pt"
    for seed in (0, 2):
        write_instance(primary, seed)
    folder = tmp_path / "stimuli"
    save_png(folder / stimulus_filename("abs", "3", "vgg", "7", 0), np.random.default_rng(0).random((1, 28, 28)))
    path = run_task("evaluate", [f"models=[{primary}]", "instances=true", f"images={folder}"], tmp_path / "run")
    assert "3 models x 1 images" in capsys.readouterr().out
    p = {(r.model, r.category): r.probability for r in read_model_responses(path).rows}
    assert {model for model, _ in p} == {"vgg@0", "vgg@2", "vgg"}
    assert p[("vgg", "3")] == pytest.approx((p[("vgg@0", "3")] + p[("vgg@2", "3")]) / 2, abs=1e-5)


def test_instances_all_takes_every_trained_seed_but_the_held_out_ones(tmp_path):
    folder = tmp_path / "checkpoints"
    overrides = tiny_abs_vgg_overrides(folder)
    for seed in (1, 2, 3):
        write_instance(folder / "vgg.pt", seed)
    quick = ["synthesis.classes=[3,7]", "synthesis.max_steps=5", "max_attempts=1", "progress=false"]
    every = ["model_a.instances=all", "model_b.instances=all", "instances_except=[2]"]  # what a sweep passes
    rows = run_task("synthesize", [*overrides, *quick, *every], tmp_path / "all")
    assert {(r.instances_a, r.instances_b) for r in rows} == {("0", "0,1,3")}  # abs has its checkpoint alone
    assert [p.split(":")[0] for p in rows[0].heldout_probabilities.split(";")] == ["vgg@2"]
    recorded = json.loads((tmp_path / "all" / "run_settings.json").read_text())
    assert recorded["instances_b"] == [0, 1, 3] and "instances_a" not in recorded  # the seeds, not "all"
    spelled = run_task("synthesize", [*overrides, *quick, "model_b.instances=[0,1,3]"], tmp_path / "spelled")
    for row, same in zip(rows, spelled):  # the same ensemble as the seeds spelled out: the same images
        assert (tmp_path / "all" / row.image_file).read_bytes() == (tmp_path / "spelled" / same.image_file).read_bytes()

    write_instance(folder / "vgg.pt", 4)  # trained later: resuming the run must not quietly take it in
    with pytest.raises(UserError, match="instances_b"):
        run_task("synthesize", [*overrides, *quick, *every, "max_attempts=2"], tmp_path / "all")
    with pytest.raises(ValueError, match="instances_except applies to model_a.instances=all"):  # the settings' check
        run_task("synthesize", [*overrides, *quick, "instances_except=[2]"], tmp_path / "no_all")
    with pytest.raises(UserError, match="model_b.instances names seed 2, which instances_except holds out"):
        run_task("synthesize", [*overrides, *quick, "model_a.instances=all", "model_b.instances=[0,2]",
                                "instances_except=[2]"], tmp_path / "clash")  # fmt: skip
    with pytest.raises(UserError, match=r"model 'abs' has no trained instance outside instances_except=\[0\]"):
        run_task("synthesize", [*overrides, *quick, "model_a.instances=all", "instances_except=[0]"], tmp_path / "none")
