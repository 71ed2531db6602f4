"""`python -m fsm_agent.examples.payments_retry`: run the payments scenarios and print how each
halted."""

from fsm_agent.examples.runner import main

raise SystemExit(main("payments_retry"))
