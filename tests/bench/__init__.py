"""The benchmark program (`python -m tests.bench.run`; see `run.py`).

Not a test suite: no module here starts with `test_`, so the default pytest run does not
collect it. Its logic (the checklist's verdicts, ratios paired by round, the scaling
schedule, the declaration count) is tested by `tests/test_bench.py`.
"""
