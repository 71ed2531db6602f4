"""Runs as durable Temporal workflows (`pip install 'fsm-agent[temporal]'`): the runtime's
decisions in workflow code (`workflow`), every call and journal write an activity
(`activities`, `port`), payloads by reference into the journal (`payloads`, `wire`), and
the worker, client and development server (`service`). See README.md, "Temporal".
"""
