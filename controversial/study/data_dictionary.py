"""What every column of a study export means: a data dictionary (``data_dictionary.csv``) and a Psych-DS
``dataset_description.json`` written beside the CSV files, so the data can be reused without our docs.

The dictionary is built from the columns the writers use (``pnas_export.TABLES`` for the server's tables,
``records.responses.MODEL_COLUMNS`` for a pilot's model responses) and the study bundle (its categories, rating
levels, display), and refuses a column it has no description for, so a column added to a writer cannot go out
undescribed. ``dataset_description.json`` follows Psych-DS (a schema.org ``Dataset`` with ``name``,
``description`` and ``variableMeasured``, one ``PropertyValue`` per column name) and records the bundle version,
a digest of its private key (which stimulus is which condition) and the command that exported the data. The CSV
files keep their names and place (``responses.csv``, not Psych-DS's ``data/*_data.csv``), so ``analyze.py`` and
the pilot read the folder as it is.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping, Sequence

from controversial.atomic import atomic_write
from controversial.records.csvfile import csv_text
from controversial.records.responses import MODEL_COLUMNS
from controversial.study.bundle import KEY_FILE, STUDY_FILE, StudyBundle
from controversial.study.pnas_export import STATUSES, TABLES
from controversial.study.quality import FLAGS

DICTIONARY_FILE = "data_dictionary.csv"
DESCRIPTION_FILE = "dataset_description.json"
MODEL_RESPONSES_FILE = "model_responses.csv"
DICTIONARY_COLUMNS = ("file", "column", "description", "type", "unit", "allowed_values")


@dataclass(frozen=True)
class Variable:
    """One column: what it means, its type (string, integer, number, boolean, datetime), unit and allowed values."""

    description: str
    type: str
    unit: str = ""
    allowed: str = ""


def _variables(bundle: StudyBundle) -> dict[str, dict[str, Variable]]:
    """Per file, the description of every column its writer may write, with the study's own values filled in."""
    spec = bundle.spec
    categories = ", ".join(spec.categories)
    levels = ", ".join(f"{v / 100:g}" for v in spec.rating_levels)
    subject = Variable(
        "pseudonymous participant code, P<row id> (B<batch>_P<row id> in batch 2 and later of an adaptive study); "
        "participants.csv maps it to the Prolific ID",
        "string",
        allowed="P0001 ... or B2_P0001 ...",
    )
    image = Variable(
        "the stimulus' file name: <model_a>_<class_a>_vs_<model_b>_<class_b>_seed<k>.png for a controversial "
        f"stimulus, <DATASET>_<test index>_<true class>.png for a natural {spec.dataset} test image",
        "string",
    )
    category = Variable("the category this row's rating is about", "string", allowed=categories)
    targets = {
        "targeted_model_1": Variable("controversial stimulus: the model driven towards targeted_class_1", "string"),
        "targeted_model_2": Variable("controversial stimulus: the model driven towards targeted_class_2", "string"),
        "targeted_class_1": Variable(
            "controversial stimulus: the class targeted_model_1 was driven to see; empty for natural images",
            "string",
            allowed=categories,
        ),
        "targeted_class_2": Variable(
            "controversial stimulus: the class targeted_model_2 was driven to see; empty for natural images",
            "string",
            allowed=categories,
        ),
    }
    ms = "milliseconds"
    responses = {
        "subject": subject,
        "image": image,
        "image_repetition": Variable(
            "0: the first presentation of the image, 1: its repeat (test-retest reliability)",
            "integer",
            allowed="0, 1",
        ),
        "response_category": category,
        **targets,
        "category_rating": Variable(
            "the participant's rating of how likely the image shows response_category, as a probability",
            "number",
            "probability",
            levels,
        ),
        "first_reaction_rt": Variable("time from the image's display to the first rating click", "number", ms),
        "rt": Variable("time from the image's display to Continue (the trial's response time)", "number", ms),
        "trial": Variable(
            "1-based place of the rated trial in the participant's session, attention checks not counted",
            "integer",
            allowed=">= 1",
        ),
        "batch": Variable("the adaptive-study batch of the bundle version served; 1 otherwise", "integer"),
    }
    attention = {
        "subject": subject,
        "position": Variable("1-based place of the check in the participant's order (every trial counted)", "integer"),
        "instructed_category": Variable("the category the check asked to rate 100%", "string", allowed=categories),
        "passed": Variable(
            "the check asked for: 100% for instructed_category and 0% for every other", "boolean", allowed="true, false"
        ),
        "ratings": Variable(
            f"the ratings given, space-separated, in category order ({categories})",
            "string",
            "percent",
            ", ".join(map(str, spec.rating_levels)),
        ),
    }
    count = "integer"
    participants = {
        "subject": subject,
        "prolific_pid": Variable("the Prolific participant ID (personal data: for payment only)", "string"),
        "study_id": Variable("Prolific's STUDY_ID of the submission", "string"),
        "session_id": Variable("Prolific's SESSION_ID of the submission (one per submission)", "string"),
        "status": Variable(
            "completed; in_progress (consented, not finished); not_consented; screened_out (a study sized in "
            "degrees: the screen calibration failed or the window was too small; never counted)",
            "string",
            allowed=", ".join(STATUSES),
        ),
        "n_answered": Variable("trials answered (attention checks included)", count),
        "n_trials": Variable("trials in the participant's order (attention checks included, practice not)", count),
        "attention_passed": Variable("attention checks passed", count),
        "attention_total": Variable("attention checks answered", count),
        "created_utc": Variable("arrival time (UTC, ISO 8601)", "datetime"),
        "completed_utc": Variable("completion time (UTC, ISO 8601); empty if not completed", "datetime"),
        "median_rt_ms": Variable("median response time over the participant's trials", "number", ms),
        "n_fast_trials": Variable(
            "trials faster than quality.min_trial_rt_ms by the browser's clock or the server's", count
        ),
        "longest_identical_run": Variable("longest run of consecutive trials rated identically", count),
        "n_refused_answers": Variable("answers refused because they differed from a stored answer", count),
        "n_browser_changes": Variable("times the session was continued in another browser", count),
        "flags": Variable(
            "quality-control flags raised, ';'-separated (thresholds: serve_study.py quality.*)",
            "string",
            allowed=", ".join(FLAGS),
        ),
        "px_per_degree": Variable(
            "a study sized in degrees: CSS pixels per degree of visual angle from the virtual chinrest; "
            "empty otherwise",
            "number",
            "pixels per degree",
        ),
        "viewing_distance_mm": Variable(
            "a study sized in degrees: the viewing distance the blind-spot test measured; empty otherwise",
            "number",
            "millimetres",
        ),
    }
    models = {
        "model": Variable("the model's name", "string"),
        "image": image,
        "response_category": category,
        **targets,
        "category_rating": Variable(
            "the model's calibrated probability that the image shows response_category", "number", "probability", "0-1"
        ),
    }
    return {
        "responses.csv": responses,
        "attention.csv": attention,
        "participants.csv": participants,
        MODEL_RESPONSES_FILE: models,
    }


def written_columns() -> dict[str, tuple[str, ...]]:
    """The columns of every CSV file a study export may hold, as their writers write them."""
    return {**{name: columns for name, (columns, _) in TABLES.items()}, MODEL_RESPONSES_FILE: MODEL_COLUMNS}


def data_dictionary(bundle: StudyBundle) -> dict[str, list[tuple[str, Variable]]]:
    """Per file, (column, variable) in the order the writer writes them; a column without a description is an
    error (a writer gained a column that nobody described)."""
    described = _variables(bundle)
    dictionary = {}
    for name, columns in written_columns().items():
        missing = [c for c in columns if c not in described[name]]
        if missing:
            raise RuntimeError(
                f"{name}: no data-dictionary entry for column(s) {', '.join(missing)} (data_dictionary.py)"
            )
        dictionary[name] = [(column, described[name][column]) for column in columns]
    return dictionary


def described_columns(bundle: StudyBundle) -> dict[str, tuple[str, ...]]:
    """Every column the dictionary describes, per file (for the test that nothing is described but not written)."""
    return {name: tuple(variables) for name, variables in _variables(bundle).items()}


def write_description(out_dir: Path, bundle: StudyBundle, command: str = "") -> tuple[Path, Path]:
    """``data_dictionary.csv`` and ``dataset_description.json`` for the CSV files present in ``out_dir``."""
    dictionary = {name: rows for name, rows in data_dictionary(bundle).items() if (out_dir / name).is_file()}
    rows = [
        (name, column, v.description, v.type, v.unit, v.allowed)
        for name, variables in dictionary.items()
        for column, v in variables
    ]
    description = json.dumps(_description(bundle, dictionary, command), indent=2, ensure_ascii=False) + "\n"
    for name, text in ((DICTIONARY_FILE, csv_text(DICTIONARY_COLUMNS, rows)), (DESCRIPTION_FILE, description)):
        with atomic_write(out_dir / name, "w", private=True, encoding="utf-8", newline="") as handle:
            handle.write(text)  # owner-only like the data beside it
    return out_dir / DICTIONARY_FILE, out_dir / DESCRIPTION_FILE


def _description(
    bundle: StudyBundle, dictionary: Mapping[str, Sequence[tuple[str, Variable]]], command: str
) -> dict[str, object]:
    spec = bundle.spec
    meanings: dict[str, dict[Variable, list[str]]] = {}  # column -> its meaning(s) -> the files with it
    for name, variables in dictionary.items():
        for column, v in variables:
            meanings.setdefault(column, {}).setdefault(v, []).append(name)
    measured = []
    for column, by_meaning in meanings.items():
        first = next(iter(by_meaning))
        entry = {"@type": "PropertyValue", "name": column}
        entry["description"] = "; ".join(f"{', '.join(files)}: {v.description}" for v, files in by_meaning.items())
        entry |= {key: value for key, value in (("unitText", first.unit), ("valueReference", first.allowed)) if value}
        measured.append(entry)
    size = f"{spec.display_degrees:g} degrees of visual angle" if spec.display_degrees else f"{spec.display_size} px"
    return {
        "@context": "https://schema.org/",
        "@type": "Dataset",
        "name": f"{spec.title} ({bundle.label})",
        "description": (
            f"Ratings of controversial stimuli and natural {spec.dataset} images by online participants: each "
            f"trial rates how likely an image shows each of {len(spec.categories)} categories "
            f"({', '.join(spec.categories)}) on the scale {', '.join(f'{v}%' for v in spec.rating_levels)}; images "
            f"shown at {size}. Collected by the controversial study server from study bundle {bundle.label}. "
            f"Files: {', '.join(dictionary)}; every column is described in {DICTIONARY_FILE}."
        ),
        "schemaVersion": "Psych-DS 0.1.0",
        "version": bundle.label,
        "dateCreated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "variableMeasured": measured,
        "distribution": [{"@type": "DataDownload", "name": name, "encodingFormat": "text/csv"} for name in dictionary],
        "studyBundle": {
            "label": bundle.label,
            "version": bundle.version,
            "created_utc": spec.created_utc,
            "dataset": spec.dataset,
            "study_json_sha256": _sha256(bundle.root / STUDY_FILE),
            "key_sha256": _sha256(bundle.root / KEY_FILE),
        },
        "command": command,
    }


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
