"""Resumable training: a run "crashed" after some epochs and resumed ends with the uninterrupted weights."""

from __future__ import annotations

import pytest
import torch
from helpers import settings_for

from controversial.tasks.train import TrainCommandSettings, _resume_file
from controversial.zoo.registry import create_arch
from controversial.zoo.resume import ResumeFile, ResumeMismatchError, recorded_progress
from controversial.zoo.train_options import TRAINING_METHODS, TrainOptions

TINY_WRN = dict(depth=10, widen_factor=1)
TINY_VGG = dict(widths=(4, 4, 4, 4, 4), fc=(8, 8), dropout=0.5)
TINY_JEM = dict(backbone="wrn", backbone_kwargs=dict(**TINY_WRN, stem_stride=2), refine_steps=1)
CASES = {  # case: (training method, architecture, its kwargs, train.extra)
    # batch norm, dropout (torch's global generator) and crop/flip augmentation (the loop's generator)
    "supervised": ("supervised", "vgg16_bn", TINY_VGG, {}),
    "adversarial": (
        "adversarial",
        "wrn",
        TINY_WRN,
        dict(norm="linf", eps=0.03, steps=2, step_size=0.01, warmup_epochs=1),
    ),
    # the fast recipe: EMA, timm's optimiser and schedule, bfloat16, and the adversarial guard's best epoch
    "fast": ("fast", "vgg16_bn", TINY_VGG, dict(ema_decay=0.9, bn_refresh_batches=1)),
    "fast_adversarial": (
        "fast",
        "wrn",
        TINY_WRN,
        dict(
            ema_decay=0.9,
            bn_refresh_batches=1,
            adversarial=dict(norm="linf", eps=0.03, warmup_epochs=1, guard_images=8, guard_steps=2, guard_drop=1.0),
        ),
    ),
    # JEM: a cross-entropy warm start, then the energy term with the replay buffer in the resume state
    "fast_energy": (
        "fast",
        "jem",
        TINY_JEM,
        dict(
            ema_decay=0.9,
            bn_refresh_batches=0,
            energy=dict(start_epoch=1, sgld_steps=2, buffer_size=24, reinit_prob=0.3, energy_l2=0.1),
        ),
    ),
    "fast_energy_uniform_starts": (
        "fast",
        "jem",
        TINY_JEM,
        dict(ema_decay=0.9, bn_refresh_batches=0, energy=dict(sgld_steps=2, buffer_size=24, buffer_init="uniform")),
    ),
}
EPOCHS = 4


class Crash(Exception):
    pass


def _data():
    generator = torch.Generator().manual_seed(0)
    return torch.rand(40, 3, 32, 32, generator=generator), torch.arange(40) % 10


def _train(case: str, resume: ResumeFile, init_seed: int, crash_after: int | None = None) -> dict[str, torch.Tensor]:
    method, arch, kwargs, extra = CASES[case]
    torch.manual_seed(init_seed)
    net = create_arch(arch, **kwargs)
    settings = TrainOptions(
        method=method, epochs=EPOCHS, batch_size=16, lr=0.01, max_shift=4, augment="crop_flip", extra=dict(extra)
    )

    def progress(message: str) -> None:
        if crash_after is not None and message.startswith(f"epoch {crash_after}/"):
            raise Crash(message)

    images, labels = _data()
    torch.manual_seed(123)  # what the global generator holds when training starts (the task seeds it)
    TRAINING_METHODS.get(method).train(net, images, labels, settings, progress, resume=resume)
    return net.state_dict()


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_crash_after_two_epochs_then_resume_gives_the_uninterrupted_weights(case, tmp_path):
    identity = {"model": "tiny", "case": case}
    reference = _train(case, ResumeFile(tmp_path / "reference.pt", identity), init_seed=0)

    interrupted = ResumeFile(tmp_path / "resume.pt", identity)
    with pytest.raises(Crash, match=f"epoch 2/{EPOCHS}"):
        _train(case, interrupted, init_seed=0, crash_after=2)
    assert recorded_progress(interrupted.path).epochs_done == 2
    resumed = _train(case, interrupted, init_seed=99)  # other initial weights: all must come from the file

    assert resumed.keys() == reference.keys()
    assert all(torch.equal(resumed[k], reference[k]) for k in reference), "resumed weights differ"
    finished = [torch.load(p, weights_only=True) for p in (tmp_path / "reference.pt", interrupted.path)]
    assert finished[0]["epochs_done"] == finished[1]["epochs_done"] == EPOCHS
    for name in finished[0]["method_state"]:  # e.g. JEM's replay buffer
        assert torch.equal(finished[0]["method_state"][name], finished[1]["method_state"][name])


def test_a_resume_file_of_other_settings_is_refused(tmp_path):
    resume = ResumeFile(tmp_path / "resume.pt", {"train": {"epochs": 4}})
    with pytest.raises(Crash):
        _train("supervised", resume, init_seed=0, crash_after=1)
    other = ResumeFile(resume.path, {"train": {"epochs": 5}})
    with pytest.raises(ResumeMismatchError, match=r"train: \{'epochs': 4\} -> \{'epochs': 5\}.*resume=false"):
        _train("supervised", other, init_seed=0)


def _train_cfg(tmp_path, method: str, resume: bool) -> TrainCommandSettings:
    return settings_for(
        "train",
        [
            f"resume={resume}",
            f"resume_file={tmp_path / 'tiny' / 'resume.pt'}",
            "model=wrn",
            f"model.train.method={method}",
        ],
    )


def test_the_train_task_resumes_by_default_and_starts_over_with_resume_false(tmp_path):
    cfg = _train_cfg(tmp_path, "supervised", resume=True)
    resume = _resume_file(cfg, TrainOptions(method="supervised"), {"depth": 10}, 300)
    assert resume.path == tmp_path / "tiny" / "resume.pt"
    assert resume.identity["arch_kwargs"] == {"depth": 10} and resume.identity["train"]["method"] == "supervised"
    assert resume.identity["n_train_images"] == 300
    resume.path.parent.mkdir()
    resume.path.write_bytes(b"state")
    assert _resume_file(cfg, TrainOptions(method="supervised"), {}, 300).path.is_file()  # kept, to resume from
    assert _resume_file(_train_cfg(tmp_path, "supervised", resume=False), TrainOptions(method="supervised"), {}, 300)
    assert not resume.path.exists()
    assert (
        _resume_file(_train_cfg(tmp_path, "kde_bandwidth", True), TrainOptions(method="kde_bandwidth"), {}, 300) is None
    )
