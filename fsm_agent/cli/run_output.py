"""What the `fsm-agent` commands that drive or show a run share: the live step line, the
summary of a halt, and how a command ends on its record."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

import click

from fsm_agent.errors import RunPaused
from fsm_agent.halt import EXIT_PAUSED, exit_code
from fsm_agent.journal import serde
from fsm_agent.journal.store import Event, RunRow
from fsm_agent.runtime.record import HaltRecord, HandoffPacket, record_json
from fsm_agent.runtime.snapshot import SUCCESS_RULES


def progress_line(quiet: bool) -> Callable[[Event], None]:
    """The live `step 3/8` line of each transition, against the cap in force (an operator
    may have raised it since the start)."""

    def show(event: Event) -> None:
        if quiet or event.kind != "transition":
            return
        steps, cap = event.snapshot.meters.steps_used, event.snapshot.budgets.max_steps
        line = f"step {steps}/{cap}  {event.source} → {event.dest}  [{event.trigger}]"
        if event.halt is not None:
            line += f"  halt: {event.halt.value}"
        # A closed terminal or pipe must not change how the run ends.
        with contextlib.suppress(OSError):
            click.echo(line, err=True)

    return show


def summary(record: HaltRecord) -> str:
    packet = record.handoff
    waiting = packet is not None and packet.awaits is not None
    lines = [
        f"{'waiting' if waiting else 'halted'}: {record.halt_reason.value}"
        f" ({record.terminal_state})"
        f" after {record.steps_used}/{record.max_steps} steps,"
        f" {len(record.tool_calls) + record.tool_calls_omitted} tool call(s),"
        f" {record.meters.elapsed_ms} ms",
    ]
    if record.answer is not None:
        lines.append(f"answer: {record.answer}")
    if record.grounded_by:
        lines.append(f"grounded by: {', '.join(record.grounded_by)}")
    if record.error:
        lines.append(f"why: {record.error}")
    lines += [
        f"without complete receipts: {call}"
        for call in record.unreceipted
        if call not in (record.error or "")
    ]
    if record.success_rules < SUCCESS_RULES:
        lines.append(f"decided under success rules {record.success_rules} (before {SUCCESS_RULES})")
    if packet is not None and packet.awaits is not None:
        lines.append(waits_line(record.run_id, packet))
    return "\n".join(lines)


def waits_line(run_id: str, packet: HandoffPacket) -> str:
    """What a waiting run waits for, and the command that decides it."""
    until = f" until {packet.wait_until}" if packet.wait_until else ""
    if packet.awaits == "approval":
        call = (packet.call_sha256 or "")[:12]
        return (
            f"waits for: a person's approval of call {call}{until}: fsm-agent approve"
            f" {run_id} --call {call} --why … (or deny)"
        )
    return f"waits for: a person's answer{until}: fsm-agent answer {run_id} --text … --why …"


def paused_or(drive: Callable[[], HaltRecord]) -> HaltRecord:
    """Drive a run; if a person pauses it, say how to continue it and exit 75."""
    try:
        return drive()
    except RunPaused as exc:
        click.echo(f"{exc}; continue it with: fsm-agent resume {exc.run_id} --model …")
        sys.exit(EXIT_PAUSED)


def finish(record: HaltRecord, record_path: str, as_json: bool) -> None:
    """Print how a run halted and exit with its code."""
    if as_json:
        click.echo(record_json(record), nl=False)
    else:
        click.echo(summary(record))
        click.echo(f"record: {record_path}")
    sys.exit(exit_code(record.halt_reason, record.signal))


def run_dict(row: RunRow) -> dict[str, Any]:
    """A run's row as `runs --json` and `show --json` print it: no declaration text, no
    record (show prints that apart), and its status as people read it (`shown_status`)."""
    from fsm_agent.runtime.run_status import shown_status

    data: dict[str, Any] = serde.unstructure(row)
    data.pop("machine_text")
    data.pop("record")
    data["shown_status"] = shown_status(row)  # `interrupted` when its process is gone
    return data
