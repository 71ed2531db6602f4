"""Declared machines, as YAML data. `fsm_agent.load_machine("agent_loop")` finds them here."""
