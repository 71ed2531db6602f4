"""How far `check` goes before it gives up. A leaf module: the command's options read it
without loading the checker (every `fsm-agent` invocation imports the command)."""

#: The most work `check` spends before it gives up (`fsm_agent.checking.explore.Work`: one
#: unit per configuration, per transition and per guard evaluated where free guards branch,
#: over every exploration of one check). At about 7 µs a unit, `fsm-agent check` refuses
#: in 1.2 to 1.6 s here (2 cores, Python's start included).
DEFAULT_LIMIT = 120_000
