"""`fsm-agent schema`: print or write the JSON Schema of a machine declaration or a halt
policy, for editors (`# yaml-language-server: $schema=…`) and CI validators.

Registered on the `fsm-agent` group when imported (`fsm_agent.cli.group.COMMANDS`); the
schemas come from `fsm_agent.declaration.documents`, the types the loaders check against.
"""

from __future__ import annotations

import click

from fsm_agent.cli.group import cli
from fsm_agent.cli.options import OutputPath, cli_errors


@cli.command("schema")
@click.argument("kind", type=click.Choice(["machine", "policy"]))
@click.option("-o", "--output", type=OutputPath(), help="File to write (default: stdout).")
@cli_errors
def schema(kind: str, output: str | None) -> None:
    """Print the JSON Schema of a KIND file (machine: a declaration; policy: a halt policy);
    the same schema ships in the package (machines/ (fsm_agent/machines/ installed))."""
    from fsm_agent.declaration.documents import KINDS, schema_text
    from fsm_agent.runtime.record import atomic_write_text

    text = schema_text(kind)
    if output is None:
        click.echo(text, nl=False)
        return
    atomic_write_text(output, text, private=False)  # for editors and CI: the umask's mode
    click.echo(f"wrote the {KINDS[kind][2]} schema to {output}")
