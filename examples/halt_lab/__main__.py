"""`python -m examples.halt_lab`: run seed 001's four lab scenarios and print how each halted."""

from examples.runner import main

raise SystemExit(main("halt_lab"))
