"""Stimuli at a visual angle: whether a participant's screen calibration lets the study show its stimuli at
``display.degrees``, decided by the server from the virtual chinrest's measurements (``human_study/``, the npm
package ``@jspsych/plugin-virtual-chinrest``: the participant sizes a credit card on screen, which gives pixels
per millimetre, then the blind spot, 13.5 degrees from fixation, gives the viewing distance and so pixels per
degree).

Two outcomes screen a participant out, and the page tells them why and asks them to return the study:
``calibration_failed`` when the measured viewing distance is outside ``DISTANCE_RANGE_MM`` (people sit at arm's
length, 40-70 cm, from a computer screen: a distance outside the range means the card or the blind spot was
misjudged, so the pixels per degree are wrong), and ``screen_too_small`` when the stimulus at that size does not
fit the browser window. A screened-out row never completes, so it is never counted (``complete`` refuses it).
"""

from __future__ import annotations

from dataclasses import dataclass

from controversial.study.schemas import CalibrationRequest

DISTANCE_RANGE_MM = (250.0, 1200.0)
FIT_MARGIN_PX = 16  # the stimulus' frame and the page's padding
SCREENED_OUT = ("calibration_failed", "screen_too_small")
MESSAGES = {
    "calibration_failed": "The screen calibration did not give a plausible viewing distance ({distance:.0f} cm), "
    "so this study cannot show its images at the size it needs. Please return the study on Prolific; thank you "
    "for your time.",
    "screen_too_small": "Your browser window is too small to show this study's images at the size it needs "
    "({size:.0f} x {size:.0f} pixels at your viewing distance). Please return the study on Prolific; thank you "
    "for your time.",
}


@dataclass(frozen=True)
class Screening:
    stimulus_px: float  # the stimulus' side in CSS pixels: degrees x px/deg
    screened_out: str | None  # one of SCREENED_OUT, or None: go on
    message: str | None  # what the participant is told when screened out

    def to_json(self) -> dict:
        status = "screened_out" if self.screened_out else "ok"
        return {"status": status, "reason": self.screened_out, "message": self.message, "stimulus_px": self.stimulus_px}


def screen(measured: CalibrationRequest, degrees: float) -> Screening:
    """The decision for one calibration of a study whose stimuli subtend ``degrees``."""
    size = degrees * measured.px_per_degree
    low, high = DISTANCE_RANGE_MM
    if not low <= measured.viewing_distance_mm <= high:
        reason = "calibration_failed"
    elif size > min(measured.window_width, measured.window_height) - FIT_MARGIN_PX:
        reason = "screen_too_small"
    else:
        reason = None
    return screening(reason, size, measured.viewing_distance_mm)


def screening(reason: str | None, stimulus_px: float, viewing_distance_mm: float) -> Screening:
    """The reply for a decision, with the message the participant is told."""
    message = None if reason is None else MESSAGES[reason].format(distance=viewing_distance_mm / 10, size=stimulus_px)
    return Screening(stimulus_px, reason, message)
