"""Runnable example scenarios; `fsm-agent demo` runs them all."""
