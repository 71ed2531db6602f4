"""Running a machine: the worker loop, its actions, guards, budgets, receipts, halts and records."""
