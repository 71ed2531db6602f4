"""`python -m fsm_agent.examples.halt_lab`: run the halt lab's four scenarios and print how each
halted."""

from fsm_agent.examples.runner import main

raise SystemExit(main("halt_lab"))
