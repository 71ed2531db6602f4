"""The benchmark program of issue 3 (`python -m tests.bench.run`; see `run.py`).

Not a test suite: no module here starts with `test_`, so the default pytest run does not
collect it.
"""
