"""How long a study takes, for the consent text's ``[duration]`` blank, the export's summary and Prolific's form.

Estimate = (trials + practice trials) x the time per trial + the time to read the consent and instruction texts.
The time per trial is, in this order: ``seconds_per_trial`` when set; the median trial time (``rt``, display to
Continue) of a pilot that people took, read from its exported ``responses.csv``; else ``DEFAULT_SECONDS_PER_TRIAL``.
Prolific asks for exactly this: estimate the completion time by piloting, from how long the pilot's people took
(it computes a study's average completion time as the median), because the reward per hour, which has a minimum,
is derived from it ("Estimating your study's completion time",
https://researcher-help.prolific.co/hc/en-gb/articles/360014553674); a submission that runs far past the estimate
can be timed out ("Setting the Maximum Allowed Time", .../articles/360009094694).

``DEFAULT_SECONDS_PER_TRIAL`` (9 s), derived from real response times because the PNAS 2020 release's own
(``rt`` in its human-response CSVs) are not in this project's data copy: a trial is ten ratings and one Continue,
eleven responses, and the median time of one speeded categorisation response in the model-vs-human raw data
(/work/shared/data/model-vs-human: 40,649 answered trials of 8 datasets, 16-way choice by click) is 0.81 s;
11 x 0.81 = 8.9 s, rounded up. Those observers were speeded lab participants, so it is a floor: pilot the study.

Reading: 238 words a minute, the average silent reading rate of non-fiction in English (Brysbaert 2019, J. Mem.
Lang. 109:104047).

Screen calibration (a study sized in degrees, ``display.degrees``): ``calibration_seconds``, 120 s by default, an
allowance for reading its instructions, sizing a card on screen and five blind-spot measurements, not a measured
time; a pilot tells (the chinrest's own ``rt`` is in the browser's data).

No published Prolific limit on study length was found (searched its researcher help centre); ``max_minutes``
(60) is this project's default for the warning: one sitting of a repetitive rating task longer than an hour invites
fatigue and drop-out, and the pay, set per hour, grows with it. Set it to your ethics approval's limit.
"""

from __future__ import annotations

import csv
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from controversial.errors import UserError
from controversial.options import Options

DEFAULT_SECONDS_PER_TRIAL = 9.0
READING_WORDS_PER_MINUTE = 238
BLANK = "[duration]"
_TAG = re.compile(r"<[^>]*>")


class DurationOptions(Options):
    """How the study's duration is estimated (the consent text's [duration]) and when it is called long."""

    seconds_per_trial: float | None = Field(
        None, gt=0, description="time per trial in s; null: the pilot's median (pilot_responses), else 9 s"
    )
    pilot_responses: str | None = Field(
        None,
        description="responses.csv of a pilot that people took (serve_study.py mode=export): its median trial time",
    )
    max_minutes: float = Field(60, gt=0, description="warn when the estimate is longer than this")
    calibration_seconds: float = Field(
        120,
        ge=0,
        description="the virtual chinrest (card sizing, five blind-spot measurements) of a study sized in degrees",
    )


@dataclass(frozen=True)
class DurationEstimate:
    minutes: int  # rounded up: what the consent text says and Prolific's form takes
    trials: int  # including practice
    seconds_per_trial: float
    reading_minutes: float
    source: str  # where the time per trial came from
    calibration_minutes: float = 0.0  # the screen calibration (display.degrees), 0 without one
    doubt: str | None = None  # why the pilot's times may not be people's, if they look implausible

    def summary(self) -> str:
        return (
            f"estimated duration: about {self.minutes} min ({self.trials} trials incl. practice x "
            f"{self.seconds_per_trial:.1f} s per trial ({self.source}) + {self.reading_minutes:.1f} min of reading"
            + (f" + {self.calibration_minutes:.1f} min of screen calibration)" if self.calibration_minutes else ")")
        )

    def warning(self, max_minutes: float) -> str | None:
        """One paragraph when the study is longer than ``max_minutes``, else None."""
        if self.minutes <= max_minutes:
            return None
        return (
            f"this study takes about {self.minutes} min, longer than duration.max_minutes={max_minutes:g}: "
            "long sessions of a repetitive rating task invite fatigue, careless answers and drop-out, and the pay "
            "grows with them (Prolific sets a minimum reward per hour). Consider fewer trials (per_pair, "
            "natural_per_class, n_repeats) or splitting the stimuli across two studies; if the length is intended, "
            "raise duration.max_minutes to your ethics approval's limit"
        )


def pilot_seconds_per_trial(path: str | Path) -> tuple[float, int, int]:
    """The median trial time (s) in a responses.csv exported from a study people took, with the trial and
    participant counts: one time per (participant, trial), as each trial's ten rows repeat it."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"duration.pilot_responses={path}: no such file; pass serve_study mode=export's responses.csv")
    if (path.parent / "pilot.db").exists():
        raise UserError(
            f"duration.pilot_responses={path}: this is a scripted pilot's export (pilot_study.py), whose response "
            "times are drawn at random, not measured; pass the export of a pilot that people took, or set "
            "duration.seconds_per_trial"
        )
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        columns = reader.fieldnames or []
        subject = next((c for c in ("subject", "subject code") if c in columns), None)  # ours, or PNAS 2020's
        missing = ([] if subject else ["subject"]) + [c for c in ("trial", "rt") if c not in columns]
        if subject is None or missing:
            raise UserError(
                f"duration.pilot_responses={path}: no column {missing[0]!r}; expected the "
                "responses.csv that serve_study.py mode=export writes (columns 'subject', 'trial', 'rt', ...)"
            )
        times: dict[tuple[str, str], float] = {}
        for line, row in enumerate(reader, start=2):
            try:
                times[(row[subject], row["trial"])] = float(row["rt"])
            except ValueError:
                wrong = f"duration.pilot_responses={path}, row {line}: rt={row['rt']!r} is not a number"
                raise UserError(wrong) from None
    if not times:
        raise UserError(f"duration.pilot_responses={path}: no rating rows, so no response times to estimate from")
    participants = len({subject for subject, _ in times})
    return statistics.median(times.values()) / 1000, len(times), participants


def words(texts: list[str]) -> int:
    """Words a participant reads in these HTML texts (tags dropped)."""
    return sum(len(_TAG.sub(" ", text).split()) for text in texts)


def estimate_duration(
    options: DurationOptions, trials: int, texts: list[str], calibrated: bool = False
) -> DurationEstimate:
    """The estimate for ``trials`` trials (practice included), these consent/instruction texts and, when
    ``calibrated``, the screen calibration (``calibration_seconds``)."""
    doubt = None
    if options.seconds_per_trial is not None:
        per_trial, source = options.seconds_per_trial, "duration.seconds_per_trial"
    elif options.pilot_responses is not None:
        per_trial, n_trials, n_people = pilot_seconds_per_trial(options.pilot_responses)
        source = f"median of {n_trials} pilot trials of {n_people} participant(s)"
        if per_trial < DEFAULT_SECONDS_PER_TRIAL:
            doubt = (
                f"the pilot's median trial took {per_trial:.1f} s, less than {DEFAULT_SECONDS_PER_TRIAL:g} s, eleven "
                "speeded lab responses: were these people rating carefully, or a self-test or an automated run? "
                "The estimate sets the pay per hour; pilot with people, or set duration.seconds_per_trial"
            )
    else:
        per_trial, source = DEFAULT_SECONDS_PER_TRIAL, "default; set duration.pilot_responses after a pilot"
    reading = words(texts) / READING_WORDS_PER_MINUTE
    calibration = options.calibration_seconds / 60 if calibrated else 0.0
    minutes = math.ceil(trials * per_trial / 60 + reading + calibration)
    return DurationEstimate(minutes, trials, per_trial, reading, source, calibration, doubt)


def fill_duration(text: str, estimate: DurationEstimate) -> str:
    """``text`` with the ``[duration]`` blank replaced by the estimate in whole minutes."""
    return text.replace(BLANK, str(estimate.minutes))
