"""Seed 002's three honest stops: success by predicate, budget, and handoff."""
