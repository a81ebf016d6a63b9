"""``design_study.py`` end to end: tiny models rate a sweep's cells; the chosen set keeps the budget, as a bundle."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import fake_mnist_test, make_sweep, run_task, settings_for, write_tiny_checkpoints
from pydantic import ValidationError

from controversial.analysis.simulate import (
    ParticipantNoise,
    shared_deviation,
    simulate_models,
    simulate_participants,
    write_study,
)
from controversial.cli import describe_validation_error
from controversial.design.candidates import balanced_design, build_candidates
from controversial.design.options import DesignPlan
from controversial.records.responses import write_human_ratings
from controversial.study.bundle import load_bundle
from controversial.study.selection import collect_sweep
from controversial.tasks import design_study

MODELS = ("abs", "kde", "vgg")


def tiny_design_study(tmp_path, monkeypatch, seeds: int = 1) -> list[str]:  # type: ignore[no-untyped-def]
    """A sweep of three pairs (``seeds`` per cell), tiny checkpoints and fake MNIST test images; the overrides of a
    43-trial study."""
    sweep = make_sweep(tmp_path / "sweep", pairs=(("abs", "kde"), ("abs", "vgg"), ("kde", "vgg")), seeds=seeds)
    write_tiny_checkpoints(tmp_path / "models" / "mnist", MODELS, "mnist")
    images, labels = fake_mnist_test("mnist", n_per_class=6)
    monkeypatch.setattr(design_study, "load_uint8", lambda *args: (torch.from_numpy(images), torch.from_numpy(labels)))
    return [
        f"sweep_dir={sweep}",
        "name=designed",
        f"models=[{','.join(MODELS)}]",
        f"models_dir={tmp_path / 'models'}",
        f"studies_dir={tmp_path / 'studies'}",
        "pilot=true",
        "budget.trials=43",
        "budget.n_repeats=2",
        "budget.n_attention=1",
        "budget.natural_per_class=1",
        "budget.natural_candidates_per_class=4",
        "budget.class_tolerance=0.5",
        "plan.n_participants=6",
        "plan.n_panel=4",
        "plan.max_exchanges=5",
        "display.size=56",
        "n_demo=0",
    ]


@pytest.mark.parametrize(
    "shared_sd, criterion, cap_rule",
    [
        (0.0, "maximin", "participants"),
        (1.5, "maximin", "participants"),
        (0.0, "relative", "participants"),
        (0.0, "participants", "participants"),
        (0.0, "total", "participants"),
        (0.0, "total", "ratio"),
    ],
)
def test_design_study_writes_a_bundle_within_budget_and_reports_every_pair(
    tmp_path, monkeypatch, shared_sd, criterion, cap_rule
):
    """With a shared deviation planned for (integrated out), every (truth, rival) is reported once, as without.
    Every criterion reports the balanced design (10 per pair here) beside the chosen one, on one held-out panel;
    the participants criterion also the count it planned each truth for (2 to plan.n_participants)."""
    overrides = tiny_design_study(tmp_path, monkeypatch) + [
        f"plan.shared_sd={shared_sd}",
        f"plan.criterion={criterion}",
        f"plan.cap_rule={cap_rule}",
    ]
    bundle = load_bundle(run_task("design_study", overrides, tmp_path / "run"))
    assert bundle.batch == 1 and bundle.label == "designed/v1"
    kinds = [bundle.key[t.stimulus_id].kind for t in bundle.trials if t.image_repetition == 0]
    assert len(bundle.trials) == 43 and kinds.count("natural") == 10 and kinds.count("controversial") == 30
    report = json.loads((tmp_path / "run" / "design.json").read_text())
    assert [(r["truth"], r["rival"]) for r in report["pairs"]] == [(t, j) for t in MODELS for j in MODELS if t != j]
    assert report["noise"]["shared_sd"] == shared_sd
    assert all(np.isfinite(r["z"]) for r in report["pairs"]) and report["candidate_truths"] == list(MODELS)
    assert report["weakest_z"] == pytest.approx(min(r["z"] for r in report["pairs"]))  # on the held-out panel
    assert report["weakest_z_on_the_selection_panel"] != report["weakest_z"]
    assert min(report["stimuli_per_condition"][c] for c in ("abs|kde", "abs|vgg", "kde|vgg")) >= 2
    assert sorted(report["chosen"]) == sorted(e.image for e in bundle.key.values() if e.kind != "attention")
    assert (tmp_path / "run" / "design.md").read_text().startswith("# Study design, batch 1")
    balanced = report["balanced_design"]
    assert report["criterion"] == design_study.CRITERIA[criterion]
    assert report["cap_rule"] == (cap_rule if criterion == "total" else None)
    planned = report["planned_per_truth"]
    if criterion in ("participants", "total"):
        assert sorted(planned) == sorted(MODELS) and all(2 <= k <= 6 for k in planned.values())
        assert "- planned per truth:" in (tmp_path / "run" / "design.md").read_text()
    else:
        assert planned is None
    assert balanced["per_pair"] == 10 and balanced["stimuli"] == 40
    assert sorted(balanced["weakest_z_ratio_per_truth"]) == sorted(MODELS)
    assert all(np.isfinite(q) and q > 0 for q in balanced["weakest_z_ratio_per_truth"].values())
    assert "- balanced design (10 per model pair, 40 stimuli" in (tmp_path / "run" / "design.md").read_text()


def test_design_study_fits_the_shared_deviation_to_a_pilot(tmp_path, monkeypatch):
    """plan.shared_sd=fit: the deviation a pilot's people share is fitted (``fit_shared_sd``) and planned for, and
    the report says so; without a pilot or earlier batches there is nothing to fit, and the error says what to
    give."""
    models = simulate_models(n_models=3, stimuli_per_pair=20, natural_per_class=4, seed=2)
    percept = shared_deviation(models.probabilities[0], 3.0, seed=1)
    pilot = simulate_participants(percept, 6, ParticipantNoise(sd=(1.0, 2.0)), seed=3)
    ratings, responses = write_study(tmp_path, models, pilot)
    overrides = tiny_design_study(tmp_path, monkeypatch) + ["plan.shared_sd=fit", "plan.criterion=maximin"]
    run_task(
        "design_study",
        overrides + [f"plan.pilot_ratings={ratings}", f"plan.pilot_model_responses={responses}"],
        tmp_path / "run",
    )
    noise = json.loads((tmp_path / "run" / "design.json").read_text())["noise"]
    assert noise["shared_sd_fitted"] and noise["shared_sd"] == pytest.approx(3.0, rel=0.3)
    assert noise["sd"][1] < 2.5  # own noise: what the fitted sd holds beyond the shared deviation
    assert "(fitted)" in (tmp_path / "run" / "design.md").read_text()
    with pytest.raises(Exception, match="plan.shared_sd=fit needs ratings"):
        run_task("design_study", overrides, tmp_path / "run2")


@pytest.mark.parametrize("value", [-0.5, "abc", None])
def test_plan_shared_sd_takes_a_number_or_fit_and_says_so(value):
    assert DesignPlan(shared_sd="fit").shared_sd == "fit" and DesignPlan(shared_sd="1.5").shared_sd == 1.5
    with pytest.raises(ValidationError) as refused:
        DesignPlan(shared_sd=value)
    assert "neither a number >= 0 (logit units) nor 'fit'" in describe_validation_error(refused.value)


def test_an_interim_look_stops_the_study_once_one_model_is_above_every_other(tmp_path, monkeypatch):
    """adaptive.interim_alpha: batch 1's people follow kde closely, so the look before batch 2 puts kde above abs
    and vgg at 0.01 (Holm-Sidak, the analysis's test) and the study stops: no v2 bundle, and a report naming kde and
    the alpha to analyse at. Without the look the same ratings give batch 2, planned at the full alpha; with it and
    people who follow none of the models, batch 2 is planned at what the look left (0.05 - 0.01)."""
    overrides = tiny_design_study(tmp_path, monkeypatch)
    seen = {}

    def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen["candidates"] = build_candidates(*args, **kwargs)
        return seen["candidates"]

    def probabilities(models, images, batch_size):  # type: ignore[no-untyped-def]
        logits = np.random.default_rng(0).normal(-2.0, 2.0, (len(MODELS), len(images), 10))
        return 1 / (1 + np.exp(-logits))  # three unrelated models

    monkeypatch.setattr(design_study, "build_candidates", recording)
    monkeypatch.setattr(design_study, "model_probabilities", probabilities)
    v1 = run_task("design_study", overrides, tmp_path / "run1")
    names = seen["candidates"].names
    chosen = [names.index(image) for image in json.loads((tmp_path / "run1" / "design.json").read_text())["chosen"]]
    P = probabilities(None, names, 0)

    def responses(path, percept):  # type: ignore[no-untyped-def]
        people = simulate_participants(percept[chosen], 4, ParticipantNoise(sd=(0.3, 0.5)), seed=1)
        rows = [
            [f"P{s + 1:04d}", names[n], 0, str(k), "", "", "", "", float(people[s, i, k]), 1.0, 2.0, i]
            for s in range(4)
            for i, n in enumerate(chosen)
            for k in range(10)
        ]
        write_human_ratings(path, rows)
        return path

    follows_kde = responses(tmp_path / "kde.csv", P[MODELS.index("kde")])
    later = [f"adaptive.previous=[{{bundle: {v1}, responses: {follows_kde}}}]", "adaptive.n_resamples=2000"]
    stop = run_task("design_study", overrides + later + ["adaptive.interim_alpha=0.01"], tmp_path / "run2")
    report = json.loads((tmp_path / "run2" / "design.json").read_text())
    assert stop == tmp_path / "run2" / "design.md" and not (tmp_path / "studies" / "designed" / "v2").exists()
    assert report["stopped"] and report["confirmed"] == "kde" and report["participants"] == 4
    assert report["mean_r"]["kde"] > max(report["mean_r"]["abs"], report["mean_r"]["vgg"])
    assert "bootstrap.alpha=0.01" in report["analyze"] and "kde is above every other model" in stop.read_text()

    v2 = run_task("design_study", overrides + later, tmp_path / "run3")
    assert load_bundle(v2).batch == 2 and json.loads((tmp_path / "run3" / "design.json").read_text())["alpha"] == 0.05

    unrelated = 1 / (1 + np.exp(-np.random.default_rng(1).normal(-2.0, 2.0, P[0].shape)))
    noise_only = responses(tmp_path / "none.csv", unrelated)
    look = [f"adaptive.previous=[{{bundle: {v1}, responses: {noise_only}}}]", "adaptive.n_resamples=2000"]
    v3 = run_task("design_study", overrides + look + ["adaptive.interim_alpha=0.01"], tmp_path / "run4")
    summary = json.loads((tmp_path / "run4" / "design.json").read_text())
    assert load_bundle(v3).batch == 2 and summary["alpha"] == pytest.approx(0.04) and summary["interim_alpha"] == 0.01
    assert "its final analysis runs at `bootstrap.alpha=0.04`" in (tmp_path / "run4" / "design.md").read_text()


@pytest.mark.parametrize("interim, batches", [(0.05, 0), (0.03, 2)])
def test_interim_looks_must_leave_alpha_for_the_final_test(tmp_path, interim, batches):
    previous = ",".join("{bundle: b, responses: r.csv}" for _ in range(batches))
    with pytest.raises(ValidationError) as refused:
        settings_for(
            "design_study",
            [
                "sweep_dir=s",
                "name=n",
                "models=[a,b]",
                f"adaptive.interim_alpha={interim}",
                f"adaptive.previous=[{previous}]",
            ],
        )
    assert "leaves nothing of plan.alpha=0.05 for the final test" in describe_validation_error(refused.value)


def test_more_seeds_per_cell_give_the_design_more_candidates_and_keep_the_balanced_yardstick(tmp_path, monkeypatch):
    """budget.seeds_per_cell=2: every cell offers its two most controversial seeds; the balanced design (the
    participants criterion's yardstick) still takes each cell's best, so it is the one-seed study's."""
    seen = {}

    def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.setdefault("candidates", []).append(build_candidates(*args, **kwargs))
        return seen["candidates"][-1]

    monkeypatch.setattr(design_study, "build_candidates", recording)
    overrides = tiny_design_study(tmp_path, monkeypatch, seeds=2)
    run_task("design_study", overrides, tmp_path / "one")
    run_task("design_study", overrides + ["budget.seeds_per_cell=2", "name=two"], tmp_path / "two")
    one, two = seen["candidates"]
    assert len(two.controversial) == 2 * len(one.controversial) == 2 * 3 * 90  # every cell has two accepted seeds
    assert set(one.names) < set(two.names)
    stimuli = collect_sweep(tmp_path / "sweep")
    balanced = [[c.names[i] for i in balanced_design(stimuli, c, 40, 1).chosen] for c in (one, two)]
    assert balanced[0] == balanced[1]
    chosen = json.loads((tmp_path / "two" / "design.json").read_text())["chosen"]
    assert len(chosen) == 40 and set(chosen) <= set(two.names)
