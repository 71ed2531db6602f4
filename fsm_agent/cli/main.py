"""The `fsm-agent` command: a thin layer over the library.

Library errors become `Error: …` and an exit code at one boundary (`cli_options.cli_errors`).
Each command lives in its own module under `fsm_agent.cli`, imported only when it runs
(`fsm_agent.cli.group.COMMANDS`).
"""

from __future__ import annotations

from fsm_agent.cli.group import cli


def main() -> None:
    cli(prog_name="fsm-agent")


__all__ = ["cli", "main"]
