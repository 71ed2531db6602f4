"""Runnable example scenarios (the halt lab, the payments retry agent, the stop conditions); `fsm-agent demo` runs them all."""
