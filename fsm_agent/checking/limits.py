"""How far `check` goes before it gives up. A leaf module: the command's options read it
without loading the checker (every `fsm-agent` invocation imports the command)."""

#: The most configurations `explore` visits before it gives up (about 8 s and 300 MB here).
DEFAULT_LIMIT = 100_000
