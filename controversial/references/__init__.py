"""Plain, slow implementations that the fast paths are held to (tests) and timed against (benchmarks).

Each computes the published formula literally, loop by loop, so that a reader can check it by eye.
"""
