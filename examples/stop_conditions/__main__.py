"""`python -m examples.stop_conditions`: run seed 002's scenarios and print how each halted."""

from examples.runner import main

raise SystemExit(main("stop_conditions"))
