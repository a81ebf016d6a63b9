"""Do two models differ more than two seeds of one model? The spread between a model's trained instances,
beside the human noise ceiling and the gaps between models.

``evaluate.py instances=true`` writes each trained instance as ``<name>@<seed>`` and the model as their mean
(``<name>``); here every model with two or more instances among the scored models gets its instances' mean
correlations, their range (max - min), the ceiling, and the smallest gap between its mean-of-instances score and
another model's, so a reader sees whether a ranking could be a matter of seeds.
"""

from __future__ import annotations

from collections.abc import Mapping

INSTANCE_SEPARATOR = "@"


def instance_groups(names: list[str]) -> dict[str, list[str]]:
    """Model name -> its instances' names (``<name>@<seed>``), for models with at least two instances."""
    groups: dict[str, list[str]] = {}
    for name in names:
        base, separator, seed = name.rpartition(INSTANCE_SEPARATOR)
        if separator and base and seed.isdigit():
            groups.setdefault(base, []).append(name)
    return {base: members for base, members in groups.items() if len(members) > 1}


def instance_spread_markdown(mean: Mapping[str, float], ceiling: tuple[float, float], measure: str = "pearson") -> str:
    """A markdown table of the spread between instances (empty when no model has two instances)."""
    groups = instance_groups(list(mean))
    if not groups:
        return ""
    models = [name for name in mean if name not in {m for members in groups.values() for m in members}]
    lines = [
        f"Spread between trained instances ({measure} r with people; noise ceiling {ceiling[0]:.3f} to "
        f"{ceiling[1]:.3f}):",
        "",
        "| model | instances (mean r) | spread (max - min) | mean of instances r | nearest other model: gap |",
        "|---|---|---|---|---|",
    ]
    for base, members in groups.items():
        scores = [mean[m] for m in members]
        own = mean.get(base)
        others = [(abs(mean[m] - own), m) for m in models if m != base] if own is not None else []
        gap, nearest = min(others) if others else (float("nan"), "-")
        lines.append(
            f"| {base} | {', '.join(f'{m} {mean[m]:.3f}' for m in members)} | {max(scores) - min(scores):.3f} | "
            + (f"{own:.3f}" if own is not None else "-")
            + f" | {nearest}: {gap:.3f} |"
        )
    return "\n".join(lines) + "\n"
