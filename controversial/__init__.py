"""controversial: synthesize controversial stimuli and score models of human perception."""

__version__ = "0.1.0"
