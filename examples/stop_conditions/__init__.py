"""The stop conditions' three honest stops: success by predicate, budget, and handoff."""
