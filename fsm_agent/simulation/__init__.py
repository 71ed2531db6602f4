"""Simulation: many runs of a machine on a virtual clock, from drawn model replies and tool
results, with crashes injected and resumed; every run checked against the invariants."""
