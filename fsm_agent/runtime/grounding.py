"""Grounding: whether a final answer comes from what receipted tool calls returned.

Success rules 2 (every run since 2026-12-01). An answer is grounded when

1. every concrete value it asserts is found in what receipted calls returned (their
   `final`, their observation values, their receipt ids). Concrete values are quoted
   strings (`"…"`, `'…'`, `` `…` ``, `“…”`), URLs, e-mail addresses, and every token with a
   digit or one of `_ : # /` in it (numbers, amounts, dates, identifiers, codes, paths).
   Numbers are compared without thousands separators and a zero fraction (`1,299.00` is
   `1299`); everything else as whole words, ignoring case; and
2. some receipted call's *returned value* backs it: the answer equals one of its values,
   a value of 3 characters or more occurs in the answer as whole words, or the answer shares
   a concrete value with one of its values. A receipt id is not a returned value: citing
   one grounds nothing by itself.

It is a heuristic over text, not understanding: an answer that rearranges returned words
into a false sentence without a concrete value ("the ticket is not open" after a tool
returned "open") passes rule 2. What it refuses for certain is an answer that asserts a
number, code, identifier, date, URL or quoted string no receipted call returned.

Success rules 1 (journals recorded before) accepted an answer equal to, containing or
contained in any receipted value, receipt ids included; `grounded_v1` keeps that rule so
such journals replay under the rule they were recorded with.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import attrs

from fsm_agent.runtime.snapshot import Receipted

_QUOTED = re.compile(
    r"\"([^\"]{1,200})\"|“([^”]{1,200})”|`([^`]{1,200})`|(?<!\w)'([^']{1,200})'(?!\w)"
)
_URL = re.compile(r"https?://[^\s<>\"']+", re.IGNORECASE)
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_TOKEN = re.compile(r"[^\W_](?:[\w:#/.,+-]*[^\W_])?")
_CONCRETE = re.compile(r"\d|[_:#/]")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_ZERO_FRACTION = re.compile(r"(?<=\d)\.0+(?!\d)")
MIN_VALUE_CHARS = 3


def norm(text: str) -> str:
    """Case and spacing folded, outer punctuation dropped."""
    return " ".join(text.casefold().split()).strip(" .!?,;:")


def _number_norm(token: str) -> str:
    return _ZERO_FRACTION.sub("", _THOUSANDS.sub("", token))


def _words(outer: str, inner: str) -> bool:
    """`inner` occurs in `outer` as whole words (so "1" is not found in "cap_1")."""
    return bool(inner) and re.search(rf"(?<!\w){re.escape(inner)}(?!\w)", outer) is not None


def concrete_values(text: str) -> tuple[str, ...]:
    """The concrete values `text` asserts, normalized (see the module docstring)."""
    found: list[str] = []
    rest = text
    for pattern in (_QUOTED, _URL, _EMAIL):
        for m in pattern.finditer(rest):
            value = next((g for g in m.groups() if g), m.group(0))
            found.append(norm(value.rstrip(".,;:!?)]}")))
        rest = pattern.sub(" ", rest)
    for m in _TOKEN.finditer(rest):
        token = m.group(0).strip(".,")
        if _CONCRETE.search(token):
            found.append(_number_norm(token.casefold()))
    return tuple(dict.fromkeys(v for v in found if v))


@attrs.frozen
class Grounding:
    """The verdict on one answer: which calls back it, which asserted values nothing
    returned."""

    backed_by: tuple[str, ...]
    missing: tuple[str, ...]

    @property
    def grounded(self) -> bool:
        return bool(self.backed_by) and not self.missing


def _found(value: str, texts: Iterable[str], tokens: set[str]) -> bool:
    return value in tokens or any(_words(t, value) for t in texts)


def ground(answer: str, receipted: tuple[Receipted, ...]) -> Grounding:
    """Ground `answer` in what `receipted` calls returned (success rules 2)."""
    said = norm(answer)
    if not said:
        return Grounding(backed_by=(), missing=())
    claims = concrete_values(answer)
    returned = [v for call in receipted for v in (*call.values, *call.ids)]
    corpus = [norm(v) for v in returned]
    tokens = set(corpus) | {t for v in returned for t in concrete_values(v)}
    missing = tuple(c for c in claims if not _found(c, corpus, tokens))
    backed = tuple(dict.fromkeys(call.label() for call in receipted if _backs(said, claims, call)))
    return Grounding(backed_by=backed, missing=missing)


def _backs(said: str, claims: tuple[str, ...], call: Receipted) -> bool:
    for raw in call.values:
        value = norm(raw)
        if not value:
            continue
        if value == said or (len(value) >= MIN_VALUE_CHARS and _words(said, value)):
            return True
        own = set(concrete_values(raw)) | {value}
        if any(c in own or _words(value, c) for c in claims):
            return True
    return False


def grounded_v1(answer: str, grounded: tuple[str, ...]) -> bool:
    """Success rules 1: the answer equals, contains or is contained in (as whole words) any
    value a receipted call returned, receipt ids included."""
    said = norm(answer)
    values = [v for v in (norm(g) for g in grounded) if v]
    return bool(said) and any(
        v == said or (len(v) >= 2 and _words(said, v)) or (len(said) >= 2 and _words(v, said))
        for v in values
    )
