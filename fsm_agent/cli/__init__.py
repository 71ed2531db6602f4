"""The `fsm-agent` command."""
