"""The run queue: submitting runs, and the workers that lease and drive them."""
