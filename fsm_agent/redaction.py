"""Secrets kept out of everything fsm-agent stores or shows.

A secret is a value with a name: the API key of the `openai:` lane (named by its
`--api-key-env`), and the value of every environment variable marked with `--secret-env
NAME` (`secret_env=` in Python). Wherever a secret appears in what a model or a tool sent
back — a reply's text, an answer, tool-call arguments or name, a failed call's raw body, an
error message, a tool's observation — it is replaced by `[redacted:NAME]` before the run
decides on it and before anything is journaled (the hash chain covers what is journaled, so
redaction cannot come later). Matched in every form JSON can spell a string: as is, and with
any of its characters written as `\\uXXXX` (either case), `\\/`, `\\"`, `\\\\` or a short
escape (`\\n` …), so an echo escaped once or twice is caught too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from fsm_agent.errors import InvalidInputError

#: How a redacted secret reads, NAME being the environment variable that holds it.
MARKER = "[redacted:{name}]"
#: A secret shorter than this would redact ordinary text: refused.
MIN_SECRET_CHARS = 4
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: The characters JSON may write with a short escape, and the letter after the backslash.
_SHORT = {"\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t"}
#: Characters JSON escapes by a backslash in front of them (`/` only optionally).
_BACKSLASHED = '"/\\'


def _hex(code: int) -> str:
    """`\\uXXXX` for a UTF-16 code unit, its hex digits in either case, behind one or more
    backslashes (each level of JSON-in-JSON doubles them)."""
    digits = "".join(f"[{d.lower()}{d.upper()}]" if d.isalpha() else d for d in f"{code:04x}")
    return r"\\+u" + digits


def _char(c: str) -> str:
    """Every way JSON text, nested any number of times, can spell the character `c`."""
    code = ord(c)
    if code > 0xFFFF:  # a surrogate pair
        high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        forms = [re.escape(c), _hex(high) + _hex(low)]
    elif c in _BACKSLASHED:  # `"` is `\"`, `\\\"` …; `\` is `\\`, `\\\\` …
        forms = [r"\\*" + re.escape(c), _hex(code)]
    else:
        forms = [re.escape(c), _hex(code)]
    if c in _SHORT:
        forms.append(r"\\+" + _SHORT[c])
    return "(?:" + "|".join(forms) + ")"


@attrs.frozen
class Secret:
    """One secret: the name it is shown by (`[redacted:NAME]`) and its value."""

    name: str
    value: str = attrs.field(repr=False)


def _pattern(value: str) -> re.Pattern[str]:
    return re.compile("".join(_char(c) for c in value))


class Redactor:
    """Replaces every known secret, in any JSON spelling, by its marker."""

    def __init__(self, secrets: Iterable[Secret] = ()) -> None:
        # Longest first: a secret that contains another is replaced whole.
        unique = {s.value: s for s in secrets if s.value}
        self.secrets: tuple[Secret, ...] = tuple(
            sorted(unique.values(), key=lambda s: -len(s.value))
        )
        self._patterns = [(_pattern(s.value), MARKER.format(name=s.name)) for s in self.secrets]

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def __repr__(self) -> str:  # never the values
        return f"Redactor({', '.join(s.name for s in self.secrets)})"

    def __or__(self, other: Redactor) -> Redactor:
        return Redactor((*self.secrets, *other.secrets))

    def text(self, text: str) -> str:
        """`text` with every secret replaced by its marker."""
        for secret, (pattern, marker) in zip(self.secrets, self._patterns, strict=True):
            if "\\" in text:
                text = pattern.sub(lambda _match: marker, text)  # noqa: B023 - used at once
            elif secret.value in text:  # no escape in it: only the plain form can be there
                text = text.replace(secret.value, marker)
        return text

    def value(self, value: Any, _depth: int = 0) -> Any:
        """A JSON-like value (a reply, an observation) with every string in it redacted, the
        keys of objects included; other values unchanged."""
        if not self.secrets:
            return value
        if isinstance(value, str):
            return self.text(value)
        if _depth > 200:  # deeper than any reply the parser reads: kept as a marker's text
            return self.text(repr(value))
        if isinstance(value, Mapping):
            return {
                (self.text(k) if isinstance(k, str) else k): self.value(v, _depth + 1)
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            items = [self.value(v, _depth + 1) for v in value]
            return items if isinstance(value, list) else tuple(items)
        if isinstance(value, bytes):
            try:
                decoded = value.decode("utf-8")
            except UnicodeDecodeError:
                return value
            redacted = self.text(decoded)
            return value if redacted == decoded else redacted.encode("utf-8")
        return value


NO_SECRETS = Redactor()


def env_secret(name: str, *, what: str = "--secret-env") -> Secret:
    """The secret held by environment variable `name`; `InvalidInputError` (never echoing a
    value) when the name is not a variable name, or the variable is unset or too short."""
    if not isinstance(name, str) or not _ENV_NAME.match(name):
        raise InvalidInputError(f"{what} takes the NAME of an environment variable, not a value")
    value = os.environ.get(name, "")
    if not value.strip():
        raise InvalidInputError(f"{what} {name}: the environment variable is not set")
    if len(value.strip()) < MIN_SECRET_CHARS:
        raise InvalidInputError(
            f"{what} {name}: the value is shorter than {MIN_SECRET_CHARS} characters;"
            " redacting it would redact ordinary text"
        )
    return Secret(name, value.strip())


def env_secrets(names: Sequence[str], *, what: str = "--secret-env") -> Redactor:
    """A redactor for the values of the environment variables `names`."""
    if isinstance(names, str):
        names = (names,)
    return Redactor(env_secret(n, what=what) for n in names)


def redactor_of(component: Any) -> Redactor:
    """The secrets an adapter declares it holds (its `secrets` attribute), if any."""
    declared = getattr(component, "secrets", None)
    return declared if isinstance(declared, Redactor) else NO_SECRETS


def run_secrets(secret_env: Sequence[str], model: Any) -> Redactor:
    """What a run redacts: the values of `secret_env` (names of environment variables) and
    the secrets its model adapter declares (the `openai:` lane's API key)."""
    return env_secrets(secret_env, what="secret_env") | redactor_of(model)
