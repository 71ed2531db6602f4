"""Journal backends behind the `fsm_agent.journal.Store` protocol.

`stores.sqlite` is the embedded default.
"""
