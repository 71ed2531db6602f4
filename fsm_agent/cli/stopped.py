"""Whether the command has told the user itself how a signal stopped it.

`fsm_agent.cli.entry` ends a process a signal stopped with one line of its own
(`fsm-agent: stopped by SIGTERM, outside a run`), unless the command said it better
(`simulate: stopped by SIGTERM in run 59/5000 …`) and called `stop_said`. The flag
lives here, not in `entry`, which imports nothing: `entry` reads it from `sys.modules`.
"""

from __future__ import annotations

#: True once the command has said how a signal stopped it.
said = False


def stop_said() -> None:
    """The command has told the user how a signal stopped it (and exits 128+N)."""
    global said
    said = True
