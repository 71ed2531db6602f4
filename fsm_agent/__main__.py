"""`python -m fsm_agent` is `fsm-agent`."""

from fsm_agent.entry import main

main()
