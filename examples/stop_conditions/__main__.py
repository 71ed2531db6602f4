"""`python -m fsm_agent.examples.stop_conditions`: run its scenarios and print how each halted."""

from fsm_agent.examples.runner import main

raise SystemExit(main("stop_conditions"))
