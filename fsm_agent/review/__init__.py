"""Reviewing a run: replay, the terminal views, the incident report, diagrams and statistics."""
