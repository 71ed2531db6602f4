"""Proving a declaration before it runs: an exhaustive explorer over abstract runs, the five
properties, and counterexamples written as run files (`fsm-agent check`)."""
