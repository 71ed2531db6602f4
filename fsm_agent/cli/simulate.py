"""`fsm-agent simulate`: run a machine many ways on a virtual clock, with drawn model replies
and tool results and, optionally, crashes followed by resume; check every run.

Registered on the `fsm-agent` group when imported (`fsm_agent.cli.group.COMMANDS`); the work is
`fsm_agent.simulation.session.simulate`.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from typing import TYPE_CHECKING, Any

import click

from fsm_agent.cli.group import cli
from fsm_agent.cli.options import InputProblem, OutputPath, cli_errors, here, json_option
from fsm_agent.cli.stopped import stop_said
from fsm_agent.errors import Interrupted

#: Exit code of a simulation in which some run broke an invariant.
EXIT_VIOLATION = 1
#: The largest --seed (a run's id, `sim-SEED-I`, must stay a run id).
MAX_SEED = 2**63 - 1
#: How many progress lines a simulation prints at most (on stderr).
PROGRESS_LINES = 20


if TYPE_CHECKING:
    from fsm_agent.simulation.runner import Crash

if TYPE_CHECKING:  # generic in the click releases that ship type hints for it
    _ParamType = click.ParamType[Crash]
else:
    _ParamType = click.ParamType


class CrashParam(_ParamType):
    """`--crash random` or `--crash N` (a journal write, N >= 1)."""

    name = "random|N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value == "random" or isinstance(value, int):
            return value
        try:
            point = int(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is neither 'random' nor a journal write number", param, ctx)
        if point < 1:
            self.fail(f"{point} is not a journal write: they are numbered from 1", param, ctx)
        return point


def _progress(quiet: bool, seen: list[int]) -> Any:
    def show(done: int, total: int) -> None:
        seen[:] = [done]
        every = max(1, total // PROGRESS_LINES)
        if quiet or (done % every and done != total):
            return
        with contextlib.suppress(OSError):
            click.echo(f"run {done}/{total}", err=True)

    return show


@cli.command()
@click.argument("machine")
@click.option("--tools", "tools_module", required=True, metavar="MODULE",
              help="Module exposing TOOLS (or new_tools()): the tools' names, signatures and"
              " declarations. Their functions are not called: results are drawn.")  # fmt: skip
@click.option("--runs", default=1000, show_default=True, type=click.IntRange(min=1),
              help="How many runs to simulate.")  # fmt: skip
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, MAX_SEED),
              help="The random seed: the same one gives the same runs, byte for byte.")  # fmt: skip
@click.option("--crash", type=CrashParam(), default=None,
              help="Kill each run's process at a journal write drawn per run (random) or at"
              " its Nth write, then resume it from the journal.")  # fmt: skip
@click.option("-o", "--out", "out_dir", default="fsm-agent-simulate", show_default=True,
              type=OutputPath(directory=True),
              help="Where a failing run's minimal version is written (a run file).")  # fmt: skip
@click.option("--db", default=None, metavar="PATH",
              help="Keep the simulated runs in this SQLite journal (default: a temporary one,"
              " removed after).")  # fmt: skip
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
@json_option
@cli_errors
def simulate(
    machine: str,
    tools_module: str,
    runs: int,
    seed: int,
    crash: Crash,
    out_dir: str,
    db: str | None,
    quiet: bool,
    as_json: bool,
) -> None:
    """Simulate RUNS runs of MACHINE and check each: it ends in a named halt, replays clean
    from its journal, its chain verifies, it never re-issues a call with a side effect
    that is not idempotent, and it ends `completed` only with receipts.

    Model replies are drawn from the proposal shapes and hostile ones; tool results from
    2xx, 206, empty ids, errors and hangs past the tool timeout, on a virtual clock. A run
    that breaks an invariant is shrunk to a minimal one, written to --out as a run file
    (open it with `replay --step`, `diagram --run`, `report`). Exit 0 when every run
    holds, 1 when one does not, 2 for bad input.
    """
    from fsm_agent.declaration.load import load_machine
    from fsm_agent.runtime.tools import load_tools
    from fsm_agent.simulation.session import simulate as simulate_runs

    spec = load_machine(machine)
    tools = load_tools(tools_module, here())
    if spec.tools is not None:
        missing = [name for name in spec.tools if name not in tools]
        if len(missing) == len(spec.tools) and missing:
            raise InputProblem(f"--tools {tools_module}: none of the machine's tools is in it"
                               f" ({', '.join(missing)})")  # fmt: skip
    seen = [0]  # runs done, for a stop's message
    try:
        progress = _progress(quiet, seen)
        summary = simulate_runs(spec, tools, runs=runs, seed=seed, crash=crash,
                                out_dir=out_dir, db=db, progress=progress)  # fmt: skip
    except Interrupted as exc:
        kept = f"; its runs are in {db}" if db is not None else ""
        with contextlib.suppress(OSError):
            click.echo(f"simulate: stopped by {signal.Signals(exc.signum).name} in run"
                       f" {seen[0] + 1}/{runs} (seed {seed}); no summary{kept}",
                       err=True)  # fmt: skip
        stop_said()
        sys.exit(128 + exc.signum)
    if as_json:
        click.echo(json.dumps(summary.as_json(), indent=2))
    else:
        click.echo("\n".join(summary_lines(summary.as_json())))
    if summary.failures:
        sys.exit(EXIT_VIOLATION)


def summary_lines(data: dict[str, Any]) -> list[str]:
    """The summary as text: the halts' histogram, the violations, the speed."""
    from fsm_agent.simulation.runner import NEVER_STARTED

    crash = data["crash"]
    lines = [
        f"simulated {data['runs']} runs of {data['machine']} (random seed {data['seed']},"
        f" crashes: {crash or 'none'}; {data['crashed']} crashed and were resumed)",
        "halts:",
    ]
    width = max((len(k) for k in data["halts"]), default=0)
    for reason, n in data["halts"].items():
        lines.append(f"  {reason:<{width}}  {n:>7}  {'#' * max(1, 40 * n // data['runs'])}")
    if NEVER_STARTED in data["halts"]:
        lines.append(f"  ({NEVER_STARTED}: the process died before the run's first write)")
    broken = {k: v for k, v in data["violations"].items() if v}
    lines.append(
        "invariant violations: "
        + (", ".join(f"{k} {v}" for k, v in broken.items()) if broken else "0")
    )
    shrunk = [f for f in data["failures"] if f["shrunk"]]
    for failure in shrunk:
        what = "; ".join(f"{v['invariant']}: {v['detail']}" for v in failure["violations"])
        lines.append(f"  {failure['run_id']}: {what}")
        if failure["run_file"]:
            lines.append(f"    shrunk to {failure['shrunk_run_id']}"
                         f" (tape {failure['shrunk_tape']}): {failure['run_file']}")  # fmt: skip
        else:
            lines.append("    not reproduced from its tape: no run file")
    others = [f["run_id"] for f in data["failures"] if not f["shrunk"]]
    if others:
        shown = ", ".join(others[:10]) + (
            f" and {len(others) - 10} more" if len(others) > 10 else ""
        )
        lines.append(f"  also failing (not shrunk): {shown}")
    lines.append(f"{data['runs_per_s']:.0f} runs/s ({data['seconds']:.1f} s)")
    return lines
