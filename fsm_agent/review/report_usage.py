"""The incident report's usage section: the run's model calls (tokens, models, latency,
cost) and its tools, slowest first, with how their calls ended. From `run_usage`, as
`show` prints it."""

from __future__ import annotations

from collections.abc import Sequence

from fsm_agent.journal.store import Event
from fsm_agent.review.report_html import dl, esc
from fsm_agent.review.usage import RunUsage, run_usage, tokens_text
from fsm_agent.runtime.budgets import dollars


def _model_rows(u: RunUsage) -> list[tuple[str, str]]:
    if u.model.calls:
        tokens = esc(tokens_text(u.model))
        latency = f"{u.model.latency_ms} ms in all"
    else:
        tokens = latency = "not journaled (written before usage was kept)"
    return [
        ("model calls", str(u.model_calls)),
        ("tokens", tokens),
        ("model latency", latency),
        ("model cost", dollars(u.cost)),
        ("models", ", ".join(f"<code>{esc(m)}</code>" for m in u.models) or "—"),
    ]


def _tools_table(u: RunUsage) -> str:
    if not u.tools:
        return ""
    rows = "".join(
        f"<tr><td><code>{esc(t.name)}</code></td><td class='num'>{t.calls}</td>"
        f"<td>{esc(', '.join(f'{n} {s}' for s, n in sorted(t.outcomes.items())))}</td>"
        f"<td class='num'>{t.total_ms}</td><td class='num'>{t.max_ms}</td></tr>"
        for t in u.tools
    )
    head = "<tr><th>tool</th><th>calls</th><th>outcomes</th><th>total ms</th><th>max ms</th></tr>"
    return f"<h3>Tools, slowest first</h3><table><thead>{head}</thead><tbody>{rows}</tbody></table>"


def usage_section(events: Sequence[Event]) -> str:
    """The section, or "" for a run that made no model or tool call."""
    u = run_usage(events)
    if not u.model_calls and not u.tools:
        return ""
    body = dl(_model_rows(u)) + _tools_table(u)
    return f'<section id="usage"><h2>Usage</h2>{body}</section>'
