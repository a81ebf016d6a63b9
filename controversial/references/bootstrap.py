"""The plain reference bootstrap: literal resampled datasets and np.corrcoef, loop by loop.

Kept deliberately naive; the vectorised ``controversial.analysis.bootstrap`` must match it to 1e-9
(tests) and is timed against it (``benchmarks/bootstrap.py``).
"""

from __future__ import annotations

import numpy as np

from controversial.analysis.bootstrap import iter_blocks


def reference_statistics(human: np.ndarray, model: np.ndarray, ids: np.ndarray, include_copies: bool) -> np.ndarray:
    """Mean r of each model, lower and upper ceiling, computed literally on one (resampled) dataset;
    ``ids`` are the original participant indices of the drawn participants."""
    S = human.shape[0]
    flat_h = human.reshape(S, -1)
    flat_m = model.reshape(model.shape[0], -1)
    out = []
    for m in range(flat_m.shape[0]):
        out.append(np.mean([np.corrcoef(flat_h[s], flat_m[m])[0, 1] for s in range(S)]))
    lower = []
    for s in range(S):
        others = [flat_h[t] for t in range(S) if t != s and (include_copies or ids[t] != ids[s])]
        # Every draw is the same participant: no "other" exists and the bound is undefined.
        lower.append(np.corrcoef(flat_h[s], np.mean(others, axis=0))[0, 1] if others else np.nan)
    z = [(x - x.mean()) / x.std() for x in flat_h]
    best = np.mean(z, axis=0)
    upper = [np.corrcoef(flat_h[s], best)[0, 1] for s in range(S)]
    return np.array(out + [np.mean(lower), np.mean(upper)])


def reference_bootstrap(human, model, conditions, n_resamples, seed, include_copies=False) -> np.ndarray:
    rows = []
    for block in iter_blocks(n_resamples, seed, human.shape[0], conditions):
        for p, s in zip(block.participants, block.stimuli):
            rows.append(reference_statistics(human[p][:, s], model[:, s], p, include_copies))
    return np.array(rows)
