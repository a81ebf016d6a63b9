"""Which model predicts people best, and is the difference real? Correlations with human ratings,
noise ceilings, participant x stimulus bootstrap tests, error consistency, figures and reports."""
