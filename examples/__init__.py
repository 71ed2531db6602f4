"""Runnable scenarios from the seeds; `fsm-agent demo` runs them all."""
