"""The `fsm-agent` click group: each command's module is imported only when that command
runs (or its help is asked for), so `fsm-agent runs` does not pay for the checker, the
simulator, the console or the runtime. `COMMANDS` names every command's module; the module
registers the command on `cli` when it is imported (`@cli.command`)."""

from __future__ import annotations

import importlib

import click

#: Every command, and the module (under `fsm_agent.cli`) that defines it.
COMMANDS: dict[str, str] = {
    "anchor": "anchor",
    "answer": "decide",
    "approve": "decide",
    "check": "check",
    "console": "console",
    "demo": "run",
    "deny": "decide",
    "dequeue": "queue",
    "diagram": "review",
    "expire-waits": "decide",
    "export": "review",
    "export-traces": "traces",
    "fork": "fork",
    "freeze-routing": "review",
    "import": "review",
    "lint": "review",
    "migrate": "ops",
    "pause": "ops",
    "queue": "queue",
    "raise-budget": "review",
    "replay": "review",
    "report": "review",
    "resume": "ops",
    "run": "run",
    "runs": "runs",
    "schema": "schema",
    "show": "show",
    "simulate": "simulate",
    "stats": "review",
    "submit": "queue",
    "unfreeze-routing": "review",
    "validate": "run",
    "verify": "ops",
    "worker": "queue",
}


class LazyGroup(click.Group):
    """A group whose commands are imported by name, on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            importlib.import_module(f"fsm_agent.cli.{COMMANDS[cmd_name]}")
        return self.commands.get(cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(None, "-V", "--version", package_name="fsm-agent")
def cli() -> None:
    """Run AI agents as declared finite-state machines; every halt is named and journaled.

    Wherever a command takes RUN_ID, a unique prefix of a run id will do, and @latest
    names the run started last on the journal. Commands that print a result take --json.
    Shell completion: eval "$(_FSM_AGENT_COMPLETE=bash_source fsm-agent)" (zsh_source,
    fish_source for the other shells).
    """


def all_commands() -> dict[str, click.Command]:
    """Every command, each module imported (for documentation and its tests)."""
    ctx = click.Context(cli)
    found = {name: cli.get_command(ctx, name) for name in cli.list_commands(ctx)}
    return {name: command for name, command in found.items() if command is not None}
