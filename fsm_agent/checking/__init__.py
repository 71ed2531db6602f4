"""Proving a declaration before it runs: an exhaustive explorer over abstract runs, the five properties, counterexamples as run files (`fsm-agent check`)."""
