"""Optimal and adaptive study design: which stimuli to show so that the analysis's bootstrap test tells the
candidate true models apart with the fewest participants (docs/design.md).

Modules, one concern each, in the order data flows: ``options`` (the budget, plan and adaptive option groups),
``candidates`` (the pool a design chooses from, built from a sweep), ``constraints`` (the pool and what a design
must keep), ``noise_fit`` (the participant noise model fitted to ratings), ``separation`` (the criterion: expected
bootstrap z of every model pair for any stimulus set, from a reference panel of simulated participants),
``objectives`` (what the search maximises of those z), ``optimiser`` (greedy growth and exchanges), ``adaptive``
(the next batch from the batches so far), ``pool`` (a benchmark's candidate pool, synthesised for every pair
of a model zoo).

Imports run one way: this package uses ``analysis``, ``study``, ``records``, ``zoo`` and ``synthesis``; of the
rest of the package only ``tasks/design_study.py`` imports it.
"""
