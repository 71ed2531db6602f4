"""`fsm-agent check`: prove a declaration's five properties before it runs, or show a
counterexample (and write it as a run file). Registered when imported
(`fsm_agent.cli.group.COMMANDS`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from fsm_agent.checking.limits import DEFAULT_LIMIT
from fsm_agent.cli.group import cli
from fsm_agent.cli.options import OutputPath, cli_errors, here, json_option, policy_option

if TYPE_CHECKING:
    from fsm_agent.checking.checker import CheckReport
    from fsm_agent.checking.counterexample import Counterexample
    from fsm_agent.runtime.tools import ToolRegistry


@cli.command("check")
@click.argument("machine")
@policy_option
@click.option(
    "--tools",
    "tools_module",
    help="Tools module: which tools are privileged; counterexample runs call its tools, with"
    " arguments that fit their signatures.",
)
@click.option(
    "-o",
    "--output",
    "output",
    type=OutputPath(directory=True),
    help="Write each counterexample as a run file in this directory (replay --step,"
    " diagram --run and report open it), held to the violation it names.",
)
@click.option("--max-steps", "max_steps", type=int, help="Check under this step budget instead.")
@click.option(
    "--max-retries", "max_retries", type=int, help="Check under this retry budget instead."
)
@click.option(
    "--max-work",
    "--max-configurations",
    "limit",
    type=click.IntRange(min=1),
    default=DEFAULT_LIMIT,
    show_default=True,
    help="Give up (exit 2) past this much work: one unit per configuration, per transition"
    " and per guard evaluated where free guards branch, over every exploration the check"
    " makes (--max-configurations is the old name).",
)
@json_option
@cli_errors
def check(
    machine: str,
    policy_path: str | None,
    tools_module: str | None,
    output: str | None,
    max_steps: int | None,
    max_retries: int | None,
    limit: int,
    as_json: bool,
) -> None:
    """Explore every reachable configuration of MACHINE (a declared name or a .yaml path)
    under its budgets and prove that every run halts within them, that no configuration
    lacks a passing transition, that done needs receipts and a grounding check, that
    privileged tools wait for the local halt check and retries for the retry meter, and
    that nothing declared is dead; or print the shortest counterexample path (the wall
    clock, money and tool time caps are not explored: any of them may end any run). Exit
    code: 0 proven, 1 counterexample, 2 invalid input."""
    from fsm_agent.checking.checker import check_paths
    from fsm_agent.checking.report import format_json, format_text, report_data
    from fsm_agent.runtime.tools import load_tools

    tools = load_tools(tools_module, here()) if tools_module else None
    budgets: dict[str, int | float | None] = {"max_steps": max_steps, "max_retries": max_retries}
    report = check_paths(machine, policy_path, tools=tools, budgets=budgets, limit=limit)
    written = {} if output is None else _counterexamples(report, Path(output), tools)
    files = {name: w.path for name, w in written.items() if not isinstance(w, str)}
    notes = {name: note for name, w in written.items() if (note := _note(w)) is not None}
    if as_json:
        data = report_data(report, files, notes, _shows(written))
        click.echo(format_json([data]), nl=False)
    else:
        click.echo(format_text(report, _shown(files, notes), _shows(written)), nl=False)
    if not report.proven:
        sys.exit(1)


def _counterexamples(
    report: CheckReport, output: Path, tools: ToolRegistry | None
) -> dict[str, Counterexample | str]:
    """Each refuted property's counterexample run file, or why none could be made (the
    verdict stands either way)."""
    from fsm_agent.checking.counterexample import write_counterexample

    out: dict[str, Counterexample | str] = {}
    caps = {"max_steps": report.bounds.max_steps, "max_retries": report.bounds.max_retries}
    for v in report.verdicts:
        if v.proven or not v.path:
            continue
        try:
            out[v.name] = write_counterexample(report.spec, v, caps, output, tools)
        except Exception as exc:
            out[v.name] = f"no run file: {type(exc).__name__}: {exc}"
    return out


def _note(written: Counterexample | str) -> str | None:
    """Where a counterexample's run left the path, or why it has no run file."""
    return written if isinstance(written, str) else written.diverged


def _shows(written: dict[str, Counterexample | str]) -> dict[str, tuple[str, ...]]:
    """Per property, what its run file shows replayed and what its reader should know."""
    return {
        name: (*((f"replayed, it shows: {w.shows}",) if w.shows else ()), *w.notes)
        for name, w in written.items()
        if not isinstance(w, str)
    }


def _shown(files: dict[str, Path], notes: dict[str, str]) -> dict[str, str]:
    """What the text report says after `run file:` for each property."""
    shown = {}
    for name in {*files, *notes}:
        note = notes.get(name)
        if name not in files:
            shown[name] = f"(none) ({note})"
        else:
            shown[name] = f"{files[name]}" + (f" (the run leaves the path: {note})" if note else "")
    return shown
