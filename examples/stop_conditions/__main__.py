"""`python -m examples.stop_conditions`: run its scenarios and print how each halted."""

from examples.runner import main

raise SystemExit(main("stop_conditions"))
