"""`python -m fsm_agent` is `fsm-agent`."""

from fsm_agent.cli.entry import main

main()
