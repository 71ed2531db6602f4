"""A check report as a reviewer reads it (text: each property proven or refuted, a bad path
as `state --trigger[guards]--> state` lines) or as JSON for scripts."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fsm_agent.checking.checker import CheckReport, Growth
from fsm_agent.checking.explore import Halt, Step
from fsm_agent.checking.properties import CLAIMS, CODES, Verdict
from fsm_agent.declaration.spec import MachineSpec


def line_of(spec: MachineSpec, key: str) -> int | None:
    """The line of `key` (or of its nearest ancestor) in the declaration's text."""
    from fsm_agent.declaration.yamlsource import LineIndex  # YAML only for line numbers

    lines = LineIndex(spec.text, spec.source).lines
    while key not in lines and ("." in key or "[" in key):
        key = key[: max(key.rfind("."), key.rfind("["))]
    return lines.get(key)


def where(spec: MachineSpec, v: Verdict) -> tuple[str, int | None]:
    """The key path and line a refuted property points at: its last step's transition (or
    the state a gap is in)."""
    if v.key is not None:
        return v.key, line_of(spec, v.key)
    if not v.path:
        return "$", None
    last = v.path[-1]
    if last.transition is not None and not last.transition.implicit:
        key = f"$.transitions[{last.transition.index}]"
    else:
        key = f"$.states.{last.source.state}"
    return key, line_of(spec, key)


def step_line(s: Step) -> str:
    """`drafting --answer[answer_grounded, judge_agrees]--> done (completed)   facts`."""
    t = s.transition
    if t is None:
        guards, dest = "no edge passes", "no transition: handoff (no_transition)"
    else:
        guards = ", ".join(ref for i, ref, ok in s.log if i == t.index and ok)
        dest = s.dest.state
        if isinstance(s.dest, Halt):
            dest = f"{s.dest.state} ({s.dest.reason.value})"
        if t.retry:
            dest += " (retry)"
    facts = s.after.facts()
    label = f"transition {t.index}" if t is not None and not t.implicit else "meter check"
    if t is None:
        label = "gap"
    return f"{s.source.state} --{s.trigger}[{guards}]--> {dest}" + (
        f"    ({label}; {facts})" if facts else f"    ({label})"
    )


def _growth_text(g: Growth | None) -> str:
    if g is None:
        return ""
    return (
        f"as the budgets grow: transitions = {Growth.formula(g.transitions)},"
        f" model calls = {Growth.formula(g.calls)}"
    )


def format_text(
    report: CheckReport,
    run_files: Mapping[str, Path | str] | None = None,
    shows: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """The report for a reviewer: a header, one line per property, then each refuted
    property's path (and its run file, with what it shows replayed: `shows` by property
    name), then the overlaps declaration order resolves."""
    spec, b = report.spec, report.bounds
    out = [
        f"check {spec.name} ({spec.source}): max_steps {b.max_steps}, max_retries {b.max_retries}",
        f"explored {report.configurations} configurations, {report.transitions} transitions"
        f" in {report.seconds:.2f} s ({report.work:,} of {report.limit:,} units of work)",
        "",
    ]
    for v in report.verdicts:
        mark = "proven" if v.proven else "COUNTEREXAMPLE"
        out.append(f"  {v.name:<11} {mark:<15} {v.summary}")
    if report.longest is not None:
        out += [
            "",
            f"longest run: {report.longest[0]} transitions, {report.longest[1]} model"
            f" calls at these budgets",
        ]
        if report.growth is not None:
            out.append(_growth_text(report.growth))
    for v in report.verdicts:
        if v.proven:
            continue
        key, line = where(spec, v)
        at = f"{spec.source}:{line}" if line else spec.source
        out += ["", f"counterexample: {v.name} ({CLAIMS[v.name]})", f"  {at}: {v.summary} @ {key}"]
        for n, s in enumerate(v.path, 1):
            loop = "  ↻" if v.loop_from is not None and n - 1 >= v.loop_from else ""
            out.append(f"  {n:>2}. {step_line(s)}{loop}")
        if v.loop_from is not None:
            out.append(f"  (steps from {v.loop_from + 1} repeat until {v.ends} ends the run)")
        out += [f"  {d}" for d in v.details if v.name != "dead"]
        if run_files and v.name in run_files:
            out.append(f"  run file: {run_files[v.name]}")
            out += [f"  {line}" for line in (shows or {}).get(v.name, ())]
    overlaps = next((v.details for v in report.verdicts if v.name == "dead"), ())
    if overlaps:
        out += ["", "where edges overlap, declaration order picks (information):"]
        out += [f"  {d}" for d in overlaps]
    verdict = "proven" if report.proven else "counterexample found"
    out += ["", f"{spec.name}: {verdict}"]
    return "\n".join(out) + "\n"


def _step_data(s: Step) -> dict[str, Any]:
    t = s.transition
    dest: dict[str, Any] = (
        {"state": s.dest.state, "halt": s.dest.reason.value}
        if isinstance(s.dest, Halt)
        else {"state": s.dest.state}
    )
    return {
        "source": s.source.state,
        "trigger": s.trigger,
        "transition": None if t is None else t.index,
        "guards": [{"transition": i, "guard": ref, "result": ok} for i, ref, ok in s.log],
        "dest": dest,
        "facts": s.after.facts(),
        "line": step_line(s),
    }


def report_data(
    report: CheckReport,
    run_files: Mapping[str, Path | str] | None = None,
    diverged: Mapping[str, str] | None = None,
    shows: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """The report as JSON data; `run_files`, `diverged` and `shows` by property name (where
    a counterexample's run file is, where its real run left the path, and what the file
    shows replayed with what its reader should know)."""
    spec = report.spec
    props = []
    for v in report.verdicts:
        key, line = where(spec, v)
        props.append(
            {
                "name": v.name,
                "claim": CLAIMS[v.name],
                "proven": v.proven,
                "summary": v.summary,
                "key": None if v.proven else key,
                "line": None if v.proven else line,
                "path": [_step_data(s) for s in v.path],
                "loop_from": v.loop_from,
                "details": list(v.details),
                "causes": [
                    {"lint": c.code, "transition": c.transition, "summary": c.summary}
                    for c in v.causes
                ],
                "run_file": None
                if not run_files or v.name not in run_files
                else str(run_files[v.name]),
                "diverged": (diverged or {}).get(v.name),
                "run_file_shows": list((shows or {}).get(v.name, ())),
            }
        )
    g = report.growth
    return {
        "machine": spec.name,
        "source": spec.source,
        "proven": report.proven,
        "budgets": {"max_steps": report.bounds.max_steps, "max_retries": report.bounds.max_retries},
        "configurations": report.configurations,
        "transitions": report.transitions,
        "work": report.work,
        "max_work": report.limit,
        "seconds": round(report.seconds, 4),
        "longest": None
        if report.longest is None
        else {"transitions": report.longest[0], "model_calls": report.longest[1]},
        "growth": None
        if g is None
        else {"transitions": Growth.formula(g.transitions), "model_calls": Growth.formula(g.calls)},
        "properties": props,
    }


def format_json(reports: Sequence[dict[str, Any]]) -> str:
    return (
        json.dumps(reports[0] if len(reports) == 1 else list(reports), indent=2, ensure_ascii=False)
        + "\n"
    )


def refutations(report: CheckReport) -> list[tuple[str, str, str, int | None]]:
    """Each refuted property that names no cause as (code, message, key path, line), for
    `fsm-agent lint` (which reports a property's causes under their own rules instead)."""
    out = []
    for v in report.verdicts:
        if not v.proven and not v.causes:
            key, line = where(report.spec, v)
            out.append((CODES[v.name], f"{v.summary} (fsm-agent check shows the path)", key, line))
    return out
