"""`python -m fsm_agent` is `fsm-agent`."""

from fsm_agent.cli import main

main()
