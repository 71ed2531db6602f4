"""`python -m examples.stop_conditions`: run the stop conditions' scenarios and print how each halted."""

from examples.runner import main

raise SystemExit(main("stop_conditions"))
