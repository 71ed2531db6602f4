"""`python -m examples.payments_retry`: run the payments scenarios and print how each halted."""

from examples.runner import main

raise SystemExit(main("payments_retry"))
