"""A simulated two-batch adaptive study through the real server: design -> serve -> export -> refit -> re-design
-> serve -> export -> analyze.py pools the batches and ranks the generating model first."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from helpers import DIGITS, WEB_SOURCE, fake_mnist_test, make_sweep, run_task

from controversial.analysis.bootstrap import LOWER, bootstrap, pairwise_tests
from controversial.analysis.results import AnalysisResults
from controversial.analysis.simulate import ParticipantNoise, simulate_models, simulate_participants
from controversial.design.adaptive import Batch, Evidence, confirmed_best, evidence, final_alpha, next_batch
from controversial.design.candidates import build_candidates
from controversial.design.constraints import DesignConstraints
from controversial.design.noise_fit import NoiseFit
from controversial.design.optimiser import select_design
from controversial.design.options import PreviousBatch
from controversial.design.separation import ReferencePanel
from controversial.records.responses import write_model_responses
from controversial.study.bundle import load_bundle
from controversial.study.export import ExportOptions, write_selection
from controversial.study.presentations import resolver
from controversial.study.scripted_participants import instructions, take_study
from controversial.study.selection import collect_sweep
from controversial.study.server import ServeStudySettings, create_app
from controversial.tasks.design_study import previous_batch

TOKEN = "adaptive-admin-token-abcdefghijklmnopqrstuvwxyz"
MODELS = ("abs", "kde", "vgg")
TRUTH = 1
NOISE = ParticipantNoise(sd=(0.6, 0.9), gain=(0.9, 1.1))


def model_probabilities(candidates) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Models that share a percept and disagree on each pair's controversial stimuli, as in simulate.py."""
    rng = np.random.default_rng(0)
    N = len(candidates.names)
    logits = -2.5 + rng.standard_normal((1, N, 10)) + 0.8 * rng.standard_normal((len(MODELS), N, 10))
    for n, stim in enumerate(candidates.controversial):
        a, b = MODELS.index(stim.row.model_a), MODELS.index(stim.row.model_b)
        logits[a, n, stim.row.class_a], logits[a, n, stim.row.class_b] = 3.0, -3.0
        logits[b, n, stim.row.class_b], logits[b, n, stim.row.class_a] = 3.0, -3.0
    for k, index in enumerate(candidates.natural, start=len(candidates.controversial)):
        logits[:, k, candidates.pool.true_class[k]] += 5.0
    return 1.0 / (1.0 + np.exp(-logits))


def run_batch(bundle_dir: Path, first_pid: int, n: int, people: np.ndarray, names: tuple[str, ...], out: Path) -> Path:
    """n simulated people take the bundle through the HTTP API; returns the admin export."""
    bundle = load_bundle(bundle_dir)
    index = {name: i for i, name in enumerate(names)}
    app = create_app(
        ServeStudySettings(
            study_dir=str(bundle_dir),
            completion_code="C0DE",
            database_url=f"sqlite:///{out.with_suffix('.sqlite')}",
            allow_test_ids=True,
        ),
        TOKEN,
    )
    attentive = instructions(bundle)
    with TestClient(app) as client:
        assert client.get("/api/health").json()["batch"] == bundle.batch
        for p in range(first_pid, first_pid + n):

            def rate(stimulus_id: str, p: int = p) -> dict[str, int]:
                ratings = people[p, index[bundle.key[stimulus_id].image]]
                return {c: int(round(100 * r)) for c, r in zip(DIGITS, ratings)}

            resolve = resolver(client.app.state.engine)
            take_study(client, f"person{p}", random.Random(p), instructed=attentive, rate=rate, resolve=resolve)
        export = client.get("/admin/responses.csv", headers={"Authorization": f"Bearer {TOKEN}"}).text
    out.write_text(export)
    return out


@pytest.mark.slow
def test_two_batch_adaptive_study_through_the_server_recovers_the_true_model(tmp_path):
    sweep = make_sweep(tmp_path / "sweep", pairs=(("abs", "kde"), ("abs", "vgg"), ("kde", "vgg")))
    test_set = fake_mnist_test("mnist", n_per_class=6)
    candidates = build_candidates(collect_sweep(sweep), test_set, natural_per_class=4)
    P = model_probabilities(candidates)
    people = simulate_participants(P[TRUTH], 8, NOISE, seed=5)
    constraints = DesignConstraints(n_stimuli=40, natural_per_class=1, min_per_pair=2, class_tolerance=0.5)
    n_con = len(candidates.controversial)

    def write(design, batch: int) -> Path:  # type: ignore[no-untyped-def]
        chosen = design.chosen.tolist()
        settings = ExportOptions(
            name="adaptive",
            natural_per_class=1,
            n_repeats=2,
            n_attention=1,
            n_demo=0,
            display={"size": 56},
            pilot=True,
        )
        return write_selection(
            sweep,
            tmp_path / "studies",
            settings,
            "mnist",
            [candidates.controversial[i] for i in chosen if i < n_con],
            [candidates.natural[i - n_con] for i in chosen if i >= n_con],
            test_set,
            WEB_SOURCE,
            np.random.default_rng(batch),
            {"design": {"batch": batch}},
        )

    panel = ReferencePanel(P, candidates.pool.conditions, ParticipantNoise(), 8, seed=0)
    v1 = write(select_design(candidates.pool, panel, constraints, 4, max_exchanges=10), 1)
    r1 = run_batch(v1, 0, 4, people, candidates.names, tmp_path / "r1.csv")
    assert r1.read_text().splitlines()[1].endswith(",1") and r1.read_text().splitlines()[1].startswith("P0001,")

    first = previous_batch(PreviousBatch(bundle=str(v1), responses=str(r1)), candidates, P, DIGITS)
    assert first.human.shape == (4, 40, 10)
    found = evidence([first], MODELS, n_resamples=500, interim_alpha=0.01)
    assert TRUTH in found.candidates and 0.4 < found.noise.sd.mean() < 1.3
    assert found.confirmed in (None, TRUTH)  # an interim look may stop the study, on the truth only
    second = next_batch(candidates.pool, P, found, constraints, 4, n_panel=8, max_exchanges=10)
    v2 = write(second, 2)
    assert load_bundle(v2).batch == 2 and v2.name == "v2"
    r2 = run_batch(v2, 4, 4, people, candidates.names, tmp_path / "r2.csv")
    assert r2.read_text().splitlines()[1].startswith("B2_P0001,") and r2.read_text().splitlines()[1].endswith(",2")

    rows = []
    for n, name in enumerate(candidates.names):
        targets = (
            ["", "", "", ""]
            if n >= n_con
            else [
                candidates.controversial[n].row.model_a,
                candidates.controversial[n].row.model_b,
                candidates.controversial[n].row.class_a_name,
                candidates.controversial[n].row.class_b_name,
            ]
        )
        rows += [[m, name, c, *targets, float(P[i, n, k])] for i, m in enumerate(MODELS) for k, c in enumerate(DIGITS)]
    write_model_responses(tmp_path / "models.csv", rows)
    combined = tmp_path / "both.csv"
    combined.write_text(r1.read_text() + "".join(r2.read_text().splitlines(keepends=True)[1:]))
    for k, ratings in enumerate((f"[{r1},{r2}]", str(combined))):
        results = analyze(tmp_path / f"analysis{k}", ratings, tmp_path / "models.csv")
        assert results.study.replications == 2 and len(results.study.participants) == 8
        assert results.inputs.replications == ["", "B2"]
        assert "replications pooled: unprefixed codes, B2" in (tmp_path / f"analysis{k}" / "report.md").read_text()
        assert results.ranking[0] == MODELS[TRUTH]
        boot = results.prediction["all"].bootstrap
        assert boot.replications == 2 and boot.estimate[MODELS[TRUTH]] > max(boot.estimate[m] for m in ("abs", "vgg"))


def analyze(out: Path, ratings: str, models: Path) -> AnalysisResults:
    overrides = [
        f"human_ratings={ratings}",
        f"model_responses={models}",
        "bootstrap.n_resamples=300",
        "bootstrap.subset_resamples=0",
        "error_consistency.enabled=false",
        "figures=false",
        "measures=[pearson]",
    ]
    out.mkdir(parents=True, exist_ok=True)
    return run_task("analyze", overrides, out)


def simulated_study(noise_sd: tuple[float, float], n_people: int):  # type: ignore[no-untyped-def]
    """Three simulated models, people who follow the second, and the bootstrap the analysis would run."""
    models = simulate_models(n_models=3, stimuli_per_pair=20, natural_per_class=4, seed=2)
    people = simulate_participants(models.probabilities[1], n_people, ParticipantNoise(sd=noise_sd), seed=3)
    conditions = [s.condition for s in models.stimuli]
    return models.names, bootstrap(people, models.probabilities, models.names, conditions, 2000, seed=0)


def test_the_interim_look_confirms_the_model_the_analysis_puts_above_every_other():
    """``confirmed_best`` is the analysis's own verdict (``pairwise_tests`` over the models and the lower ceiling,
    Holm-Sidak): the generating model once every comparison with it is significant, nobody while one is not."""
    names, clear = simulated_study((0.5, 1.0), 8)
    verdict = pairwise_tests(clear, include=[*names, LOWER], alpha=0.01).significance
    assert all(verdict[1, j] == 1 for j in (0, 2)) and confirmed_best(clear, names, 0.01) == 1
    names, faint = simulated_study((20.0, 30.0), 2)
    verdict = pairwise_tests(faint, include=[*names, LOWER], alpha=0.01).significance
    assert not all(verdict[1, j] == 1 for j in (0, 2)) and confirmed_best(faint, names, 0.01) is None


def test_each_interim_look_spends_its_alpha_out_of_the_final_tests():
    assert final_alpha(0.05, 0.01, 0) == 0.05 and final_alpha(0.05, 0.01, 2) == pytest.approx(0.03)
    with pytest.raises(ValueError, match="2 interim looks at alpha 0.025 spend all of the study's alpha 0.05"):
        final_alpha(0.05, 0.025, 2)


def test_a_batch_that_agrees_beyond_any_shared_deviation_gives_no_fit_and_fit_asks_for_a_number():
    """Two people of a noisy population who happen to agree perfectly: the evidence keeps no shared deviation (the
    fit's bound would leave a panel that separates no pair, and batch 2 would be chosen blind), and planning for
    "fit" says what to give instead."""
    models = simulate_models(n_models=4, stimuli_per_pair=20, natural_per_class=10, seed=0)
    ratings = simulate_participants(models.probabilities[1], 2, ParticipantNoise(sd=(20.0, 20.0)), seed=6)
    ratings[1] = ratings[0]
    batch = Batch(ratings, models.probabilities, [s.condition for s in models.stimuli])
    found = evidence([batch], models.names, n_resamples=50)
    assert np.isnan(found.shared_sd)
    with pytest.raises(ValueError, match="who agree no more than some shared deviation explains"):
        found.planned_noise("fit")


def test_planning_for_a_fitted_shared_deviation_the_batches_could_not_give_says_so():
    found = Evidence((0,), NoiseFit(0, np.ones(2), np.ones(2)), np.zeros(2), shared_sd=np.nan)
    with pytest.raises(ValueError, match="shared_sd=fit: the batches so far give no shared deviation to fit"):
        found.planned_noise("fit")
    assert found.planned_noise(1.5)[1] == 1.5
