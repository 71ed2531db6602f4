"""The HTML pieces of the incident report: its stylesheet and Content-Security-Policy, and
the helpers that turn journal data into safe HTML (every string escaped; the SVG checked
against an allow-list before it is inlined).
"""

from __future__ import annotations

import html
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from typing import Any

from fsm_agent.errors import FsmAgentError
from fsm_agent.runtime.receipts import Receipt, receipt_ok

REPLY_EXCERPT = 600
#: What a tool returned, as the timeline shows it (the journal has all of it).
OBSERVATION_EXCERPT = 400
#: What Graphviz (and graphviz-pure, its port) draws with; anything else is refused.
_SVG_TAGS = frozenset({"svg", "g", "title", "polygon", "polyline", "ellipse", "path", "text"})
_PROLOG = re.compile(r"<\?xml.*?\?>|<!DOCTYPE[^>]*>|<!--.*?-->", re.DOTALL)
PT_SIZE = re.compile(r'\b(width|height)="([0-9.]+)pt"')
CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

CSS = """
:root { --ink: #111827; --muted: #4b5563; --line: #d1d5db; --ok: #166534; --ok-bg: #dcfce7;
  --bad: #991b1b; --bad-bg: #fee2e2; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1400px; padding: 1.25rem 1.5rem 3rem; color: var(--ink);
  font: 15px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; }
h1 { font-size: 1.5rem; margin: 0 0 .25rem; }
h2 { font-size: 1.15rem; margin: 1.75rem 0 .5rem; border-bottom: 2px solid var(--line); }
.sub { color: var(--muted); margin: 0; overflow-wrap: anywhere; }
code, pre, .mono { font: .85em ui-monospace, "DejaVu Sans Mono", Menlo, monospace; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; margin: .2rem 0; padding: .3rem .45rem;
  background: #f9fafb; border: 1px solid #e5e7eb; border-radius: 4px; }
.badge { display: inline-block; padding: .1rem .55rem; border-radius: 999px; font-weight: 700;
  border: 1px solid currentColor; white-space: nowrap; }
.ok { color: var(--ok); background: var(--ok-bg); } .halt { font-size: 1.25rem; }
.bad { color: var(--bad); background: var(--bad-bg); } .t, .f { font-weight: 600; }
.live { color: #1e40af; background: #dbeafe; }
.t { color: var(--ok); } .f { color: var(--bad); }
dl.record { display: grid; grid-template-columns: max-content 1fr; gap: .3rem 1.25rem; }
dl.record dt { color: var(--muted); } dl.record dd { margin: 0; overflow-wrap: anywhere; }
table { border-collapse: collapse; width: 100%; margin: .5rem 0; }
th, td { border: 1px solid var(--line); padding: .3rem .45rem; vertical-align: top;
  text-align: left; overflow-wrap: anywhere; }
th { background: #f3f4f6; } tr.halt-bad td { background: var(--bad-bg); }
tr.halt-ok td { background: var(--ok-bg); }
th, td.num, td.edge, .nowrap { white-space: nowrap; } td.num { text-align: right; }
ul.guards { list-style: none; margin: 0; padding: 0; } .muted { color: var(--muted); }
ul.guards li { padding: 0 .3rem; border-radius: 3px; }
li.g-ruled, li.g-ruled .t, li.g-ruled .f { color: var(--muted); font-weight: 400; }
li.g-took { background: #dbeafe; } li.g-done { background: var(--ok-bg); font-weight: 700; }
li.g-halt { background: #fecaca; color: var(--bad); font-weight: 700;
  outline: 2px solid var(--bad); }
li.g-took .t, li.g-took .f, li.g-done .t, li.g-done .f, li.g-halt .t, li.g-halt .f {
  color: inherit; }
figure { margin: .5rem 0; overflow-x: auto; border: 1px solid var(--line); border-radius: 6px;
  padding: .5rem; background: #eff6ff; }
figure svg { display: block; max-width: 100%; height: auto; } figcaption { color: var(--muted); }
#zoom:checked ~ figure svg { max-width: none; }
label { cursor: pointer; }
@page { size: A4 landscape; margin: 12mm; }
@media print {
  body { max-width: none; padding: 0; font-size: 9.5pt; }
  * { print-color-adjust: exact; -webkit-print-color-adjust: exact; }
  figure { overflow: visible; break-inside: avoid; } #zoom, #zoom + label { display: none; }
  figure svg { width: 100%; height: auto; }
  h2 { break-after: avoid; } tr, pre, dl.record { break-inside: avoid; }
}
"""


def esc(value: object) -> str:
    """Any value from the journal as HTML text (quotes included: safe in attributes too)."""
    return html.escape(value if isinstance(value, str) else str(value), quote=True)


def json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=repr)


def excerpt(value: Any, limit: int = REPLY_EXCERPT) -> str:
    text = value if isinstance(value, str) else json_text(value)
    if len(text) <= limit:
        return text
    return text[:limit] + f"… ({len(text)} chars, journal has all)"


def safe_svg(svg: str) -> str:
    """Graphviz's SVG ready to inline: no prolog, doctype or comments, and only the
    elements Graphviz draws with — no script, foreign object, link or event handler."""
    body = _PROLOG.sub("", svg).strip()
    try:
        root = ET.fromstring(body)  # noqa: S314 - our own Graphviz output; checked below
    except ET.ParseError as exc:
        raise FsmAgentError(f"Graphviz produced SVG that is not well-formed: {exc}") from exc
    for el in root.iter():
        tag = el.tag.rpartition("}")[2]
        names = [a.rpartition("}")[2].lower() for a in el.attrib]
        if tag not in _SVG_TAGS or any(n.startswith("on") or "href" in n for n in names):
            raise FsmAgentError(f"refusing to embed the diagram: unexpected <{tag}> {names}")
    if not body.startswith("<svg") or "<script" in body.lower() or "<!" in body:
        raise FsmAgentError("refusing to embed the diagram: it is not plain SVG")
    return body


def pre(text: str | None) -> str:
    return "" if text is None else f"<pre>{esc(text)}</pre>"


def badge(text: str, ok: bool, extra: str = "") -> str:
    return f'<span class="badge {"ok" if ok else "bad"}{extra}">{esc(text)}</span>'


def dl(rows: Iterable[tuple[str, str]]) -> str:
    items = "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in rows)
    return f'<dl class="record">{items}</dl>'


def receipts_html(receipts: Sequence[Receipt]) -> str:
    if not receipts:
        return '<span class="muted">no receipts</span>'
    return "<br>".join(
        f'<span class="mono{"" if receipt_ok(r) else " bad"}">{esc(r.status)}'
        f" {esc(r.id or '(no id)')}</span>"
        + (f' <span class="muted">key {esc(r.idempotency_key)}</span>' if r.idempotency_key else "")
        for r in receipts
    )
