"""The model-vs-human benchmark (Geirhos et al., NeurIPS 2021) on trial-level choices: models' decisions on the
benchmark's images (``model_decisions``, ``decision_options``), the five numbers per decision maker (``scores``,
``shape_bias``), the paired error-consistency test (``kappa_inference``), and their report and figures.

The human-rating analysis of the paper lives one level up in ``controversial.analysis``; the two share only
``error_consistency`` (decisions -> kappa) and ``jsonable`` (results as JSON).
"""
