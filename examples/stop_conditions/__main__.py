"""`python -m fsm_agent.examples.stop_conditions`: run seed 002's scenarios and print how each
halted."""

from fsm_agent.examples.runner import main

raise SystemExit(main("stop_conditions"))
