"""The server's options are declared once, and every value an option accepts is one its code can use.

The copies of these options once disagreed (``max_identical_run`` >= 1 in the command's schema, >= 2 in
quality control): a value the command accepted was refused, or silently meant "flag everyone". Here each
bounded option is set to the extremes its own declaration allows and the code that uses it must work.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from annotated_types import Ge, Gt, Le, Lt
from fastapi.testclient import TestClient
from pydantic import BaseModel

from controversial.cli import load_settings
from controversial.study.quality import QualitySettings, TrialRecord, assess
from controversial.study.scripted_participants import prolific_like_id
from controversial.study.server import RateLimitSettings, ServeStudySettings, create_app


def extremes(group: type[BaseModel]) -> Iterator[tuple[str, float]]:
    """(field, value) for each bound of each field of ``group``, at the bound or just inside it."""
    for name, field in group.model_fields.items():
        step = 1 if field.annotation is int else 1e-3
        for bound in field.metadata:
            if isinstance(bound, Ge):
                yield name, bound.ge
            elif isinstance(bound, Gt):
                yield name, bound.gt + step
            elif isinstance(bound, Le):
                yield name, bound.le
            elif isinstance(bound, Lt):
                yield name, bound.lt - step


def careful_participant() -> list[TrialRecord]:
    """Slow, varied answers and every attention check passed: no threshold the options allow may flag them."""
    rated = [TrialRecord(tuple((k + i) % 5 * 25 for i in range(10)), 1e7, 1e7, None) for k in range(40)]
    return rated + [TrialRecord((0,) * 10, 1e7, 1e7, True)] * 4


@pytest.mark.parametrize("name, value", list(extremes(QualitySettings)))
def test_every_quality_threshold_the_option_allows_leaves_a_careful_participant_unflagged(name, value):
    quality = QualitySettings(**{name: value})
    assert assess(careful_participant(), quality).flags == ()


def test_straight_lining_is_flagged_at_the_smallest_run_the_option_allows():
    smallest = min(value for name, value in extremes(QualitySettings) if name == "max_identical_run")
    run = [TrialRecord((25,) * 10, 1e7, 1e7, None)] * int(smallest)
    assert assess(careful_participant() + run, QualitySettings(max_identical_run=smallest)).flags == (
        "straight_lining",
    )
    with pytest.raises(ValueError, match="max_identical_run"):
        QualitySettings(max_identical_run=smallest - 1)


@pytest.mark.parametrize("name, value", list(extremes(RateLimitSettings)))
def test_every_rate_limit_the_option_allows_builds_a_server_that_admits_a_participant(
    small_bundle, tmp_path, name, value
):
    settings = ServeStudySettings(
        study_dir=str(small_bundle),
        completion_code="CODE",
        database_url=f"sqlite:///{tmp_path / 'r.db'}",
        rate_limit=RateLimitSettings(**{name: value}),
    )
    app = create_app(settings)
    rng = random.Random(0)
    with TestClient(app) as client:
        arrival = {"prolific_pid": prolific_like_id(rng), "study_id": "a" * 24, "session_id": prolific_like_id(rng)}
        assert client.post("/api/session", json=arrival).status_code == 200
    app.state.engine.dispose()


def test_the_command_defaults_are_the_option_groups_defaults(small_bundle, monkeypatch):
    monkeypatch.delenv("PROLIFIC_COMPLETION_CODE", raising=False)
    from_yaml = load_settings("serve_study", ServeStudySettings, [f"study_dir={small_bundle}"])
    assert from_yaml == ServeStudySettings(study_dir=str(small_bundle))
