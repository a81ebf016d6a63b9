"""Trial-level categorical choices in the model-vs-human raw-data format (bethgelab/model-vs-human, ``raw-data/``).

One CSV per observer and session with columns ``subj, session, trial, rt, object_response, category,
condition, imagename``, read as published: header names in any case (``Session`` in 12 of its 17
datasets), ``na`` as a missed response (scored incorrect), and an empty ``condition`` (the benchmark's
model decision files leave it empty for datasets without conditions) taken from the other observers.

``imagename`` carries a per-observer prefix (``0001_s5n_s01_0_bird_00_bird3-bird2.png``: trial 0001 of
subject s01), so trials of two observers are paired by the stimulus identity the benchmark itself uses
(``get_short_imagename`` in ``modelvshuman/helper/plotting_helper.py``): the last ``_``-separated field,
or the last two when the second-to-last starts with ``n0`` (an ImageNet file, ``n03376595_3070.png``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from controversial.records.csvfile import InputError, open_rows, optional_number, text, write_csv

CHOICE_COLUMNS: tuple[str, ...] = (
    "subj",
    "session",
    "trial",
    "rt",
    "object_response",
    "category",
    "condition",
    "imagename",
)
CHOICE_REQUIRED: tuple[str, ...] = tuple(c for c in CHOICE_COLUMNS if c != "rt")
MISSED_RESPONSE = "na"


@dataclass(frozen=True)
class Trial:
    """One categorical choice; ``response`` is None for a missed trial, ``condition`` "" when not given."""

    subject: str
    session: str
    trial: int
    response: str | None
    category: str
    condition: str
    image: str  # imagename as written
    stimulus: str  # the identity shared across observers (``stimulus_identity``)
    path: Path
    line: int


def stimulus_identity(imagename: str) -> str:
    """The part of ``imagename`` that names the same stimulus for every observer (the benchmark's rule)."""
    fields = imagename.split("_")
    if len(fields) == 1:
        return imagename
    if fields[-2].startswith("n0"):
        return "_".join(fields[-2:])
    return fields[-1]


def _trial_number(path: Path, line: int, record: dict) -> int:
    """``trial``: an integer >= 0 (``3`` or ``3.0``)."""
    value = optional_number(path, line, record, "trial", minimum=0.0, whole=True)
    if value is None:
        raise InputError(f"{path}, row {line}, column 'trial': empty value; an integer >= 0 is required")
    return int(value)


def read_trials(paths: Sequence[str | Path]) -> list[Trial]:
    """Read model-vs-human raw-data CSVs; every row is validated, an observer answering one stimulus twice
    is an error naming both rows."""
    trials: list[Trial] = []
    seen: dict[tuple[str, str], tuple[Path, int]] = {}
    for path in map(Path, paths):
        count = 0
        for line, record in open_rows(path, CHOICE_REQUIRED, case_insensitive=True):
            response = text(path, line, record, "object_response")
            condition = text(path, line, record, "condition", allow_empty=True)
            image = text(path, line, record, "imagename")
            trial = Trial(
                subject=text(path, line, record, "subj"),
                session=text(path, line, record, "session"),
                trial=_trial_number(path, line, record),
                response=None if response.lower() == MISSED_RESPONSE else response,
                category=text(path, line, record, "category"),
                condition="" if condition.lower() == "nan" else condition,
                image=image,
                stimulus=stimulus_identity(image),
                path=path,
                line=line,
            )
            optional_number(path, line, record, "rt", minimum=0.0)
            key = (trial.subject, trial.stimulus)
            if key in seen:
                first_path, first_line = seen[key]
                raise InputError(
                    f"{path}, row {line}, column 'imagename': subject {trial.subject!r} already answered "
                    f"stimulus {trial.stimulus!r} ({first_path}, row {first_line})"
                )
            seen[key] = (path, line)
            trials.append(trial)
            count += 1
        if count == 0:
            raise InputError(f"{path}: no data rows")
    if not trials:
        raise InputError("no trial files given")
    return trials


def write_trials(path: str | Path, rows: Iterable[Sequence[object]]) -> None:
    """Write rows in the model-vs-human ``CHOICE_COLUMNS`` order, atomically."""
    write_csv(path, CHOICE_COLUMNS, rows)
