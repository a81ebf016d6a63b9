"""Every place in a participant's order is served under an id and an image URL of its own.

With the bundle's stimulus ids in the API, a repeated stimulus had the same id and URL both times (a bot
copied its first answer, and test-retest reliability stopped catching it) and an attention check had the same
id for every participant (one participant's note served every bot). Now the order stored with a participant
holds, for each position, a fresh random id (``new_order``); the browser sees only that id, the answer must
name it, and ``GET /images/<id>.png`` finds the stimulus through the ``presentations`` table (read on its own
connection pool, never taking the writers' lock). A check is drawn for its presentation (``attention.py``)
from a secret seed stored beside it. The bundle's ids stay on the researcher's side: the responses table and
the exports record them.

A repeat is still the same picture: a script that compares the images' bytes or pixels finds it. Different
URLs stop scripts that match ids or URLs, and keep a browser from serving the repeat from its cache.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable, Collection, Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import Engine, bindparam, insert, text
from sqlalchemy.orm import Session

from controversial.records.study import TrialSpec
from controversial.study.attention import varied_check_png
from controversial.study.bundle import StudyBundle
from controversial.study.db import Presentation
from controversial.study.display import fit_png, png_layout

log = logging.getLogger(__name__)

_LOOKUP = text(
    "SELECT p.stimulus_id, p.seed FROM presentations p JOIN participants q ON q.id = p.participant_id "
    "WHERE p.id = :id AND q.study = :study"
)
_STIMULI = text("SELECT id, stimulus_id FROM presentations WHERE id IN :ids").bindparams(
    bindparam("ids", expanding=True)
)


def new_order(order: Sequence[TrialSpec]) -> tuple[str, list[dict[str, Any]]]:
    """The stored order (JSON: ``[stimulus_id, kind, image_repetition, presentation_id]`` by position) and its
    presentation rows (without the participant's id, which the caller adds), each with a fresh id and, for an
    attention check, a fresh rendering seed."""
    entries, rows = [], []
    for position, trial in enumerate(order, start=1):
        presentation_id = secrets.token_hex(8)
        seed = secrets.randbits(62) if trial.kind == "attention" else None
        entries.append([trial.stimulus_id, trial.kind, trial.image_repetition, presentation_id])
        rows.append({"id": presentation_id, "position": position, "stimulus_id": trial.stimulus_id, "seed": seed})
    return json.dumps(entries), rows


def store_presentations(session: Session, participant_id: int, rows: Sequence[dict[str, Any]]) -> None:
    """Insert a new participant's presentation rows in one executemany (a study has ~200 places; ORM objects
    one by one cost about 10 ms of the arrival's CPU)."""
    session.execute(insert(Presentation), [{**row, "participant_id": participant_id} for row in rows])


class PresentedImages:
    """The image bytes for a served id: a practice image by its bundle id, any other by its presentation."""

    def __init__(self, bundle: StudyBundle, reader: Engine) -> None:
        self.bundle, self.reader = bundle, reader
        self.demos = {t.stimulus_id for t in bundle.trials if t.kind == "demo"}
        first = next((t.stimulus_id for t in bundle.trials), None)
        self.layout = png_layout(bundle.image_path(first).read_bytes()) if first else (b"", 0)
        self.check = lru_cache(maxsize=512)(self._check)  # a reload or a preload asks again

    def png(self, image_id: str) -> bytes | None:
        if image_id in self.demos:
            return self.bundle.image_path(image_id).read_bytes()
        with self.reader.connect() as connection:
            row = connection.execute(_LOOKUP, {"id": image_id, "study": self.bundle.label}).first()
        if row is None:
            return None
        stimulus_id, seed = row
        if self.bundle.key[stimulus_id].kind == "attention" and seed is not None:
            return self.check(stimulus_id, seed)
        return self.bundle.image_path(stimulus_id).read_bytes()

    def _check(self, stimulus_id: str, seed: int) -> bytes:
        """The check drawn for this presentation, in the bundle's layout; less noise if it does not fit."""
        spec = self.bundle.spec
        instruction = spec.attention_prompt.format(category=self.bundle.key[stimulus_id].instructed_class)
        header, length = self.layout
        colour = header[9] == 2  # IHDR colour type: 2 RGB, 0 grey
        for noise in (1.0, 0.5, 0.0):
            fitted = fit_png(varied_check_png(instruction, spec.display_size, colour, seed, noise), header, length)
            if fitted is not None:
                return fitted
        log.warning("an attention check does not fit %s's padding (an older bundle?): served as exported", spec.name)
        return self.bundle.image_path(stimulus_id).read_bytes()


def stimuli_shown(engine: Engine, ids: Collection[str]) -> dict[str, str]:
    """Presentation id -> the bundle's stimulus id, for ``ids``: what only the researcher's side knows (scripted
    participants that play attentive people read it; a browser never can)."""
    if not ids:
        return {}
    with engine.connect() as connection:
        return {served: stimulus for served, stimulus in connection.execute(_STIMULI, {"ids": list(ids)})}


def resolver(engine: Engine) -> Callable[[Sequence[str]], dict[str, str]]:
    """``stimuli_shown`` bound to ``engine``, as ``take_study(resolve=...)`` takes it."""
    return lambda ids: stimuli_shown(engine, ids)
