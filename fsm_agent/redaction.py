"""Secrets kept out of everything fsm-agent stores or shows.

A secret is a value with a name: the API key of the `openai:` lane (named by its
`--api-key-env`), and the value of every environment variable marked with `--secret-env
NAME` (`secret_env=` in Python). Wherever a secret appears in what a model or a tool sent
back — a reply's text, an answer, tool-call arguments or name, a failed call's raw body, an
error message, a tool's observation — it is replaced by `[redacted:NAME]` before the run
decides on it, and before anything is journaled, previewed, cut or encoded (the hash chain
covers what is journaled, so redaction cannot come later; a cut made first could leave a
piece of a secret that no longer matches).

Each secret is matched in these forms (`Secret.forms`):

- **as text**, in any mix of upper and lower case, any of its characters percent-encoded
  (`%2F`, either case; `+` for a space), and in every form JSON can spell that text: with
  any character written as `\\uXXXX` (either case), `\\/`, `\\"`, `\\\\` or a short escape
  (`\\n` …), behind any number of backslashes, so an echo escaped once or twice is caught;
- **as hex** of its UTF-8 bytes, in either case;
- **as base64** of its UTF-8 bytes, standard or URL-safe (`+/` or `-_`, either
  percent-encoded), at each of the three alignments it can have inside a longer base64
  string: the characters that only the secret's bits decide are matched (the one at each
  end that shares bits with what surrounds it carries at most 4 of the secret's bits).

A secret split by whoever sent it (across fields, or around other text), or transformed
another way (encrypted, hashed, reversed, base64 of its upper-case form, hex with
separators, base64 wrapped into lines …), is not found (the README's Secrets section lists
what is not).
"""

from __future__ import annotations

import base64
import functools
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
#: The one case mapping `str.lower` makes by context (a final capital sigma); every other
#: is the character's own (`ß`.upper() is `SS`: a unit lists strings, not characters).
_CONTEXT_CASES = {"Σ": "ς"}
#: What URL-safe base64 writes for the two characters standard base64 has outside
#: letters and digits.
_URL_SAFE = {"+": "-", "/": "_"}


#: One way to spell one character of a form: the character it starts with, and the
#: pattern of the rest (`("\\", r"\\*u006[bB]")` is `\u006b` behind any backslashes).
Start = tuple[str, str]
#: Every way one character of a secret may be spelled in a form.
Unit = list[Start]


def _either(digit: str) -> str:
    """A hex digit (or letter) in either case, as a pattern."""
    return f"[{digit.lower()}{digit.upper()}]" if digit.isalpha() else re.escape(digit)


def _u_rest(code: int) -> str:
    """The rest of `\\uXXXX` after its first backslash: more backslashes (each level of
    JSON-in-JSON doubles them), `u`, the UTF-16 code unit's hex digits in either case."""
    return r"\\*u" + "".join(_either(d) for d in f"{code:04x}")


def _json(c: str) -> Unit:
    """Every way JSON text, nested any number of times, spells the character `c`."""
    code = ord(c)
    if code > 0xFFFF:  # a surrogate pair
        high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        escaped = [("\\", _u_rest(high) + r"\\" + _u_rest(low))]
    elif c in _BACKSLASHED:  # `"` is `\"`, `\\\"` …; `\` is `\\`, `\\\\` …
        escaped = [("\\", r"\\*" + ("" if c == "\\" else re.escape(c))), ("\\", _u_rest(code))]
    else:
        escaped = [("\\", _u_rest(code))]
    if c in _SHORT:
        escaped.append(("\\", r"\\*" + _SHORT[c]))
    return [(c, ""), *escaped]


def _alternatives(unit: Unit) -> str:
    """A unit as a pattern."""
    return _one_of(re.escape(first) + rest for first, rest in unit)


def _one_of(patterns: Iterable[str]) -> str:
    unique = list(dict.fromkeys(patterns))
    return unique[0] if len(unique) == 1 else "(?:" + "|".join(unique) + ")"


def _spelled(text: str) -> Unit:
    """Every JSON spelling of `text` (one or more characters) as one unit."""
    rest = "".join(_alternatives(_json(c)) for c in text[1:])
    return [(first, head + rest) for first, head in _json(text[0])]


def _utf8(text: str) -> bytes:
    """The bytes `text` stands for (an environment variable's undecodable bytes included)."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that no byte stands for
        return text.encode("utf-8", "surrogatepass")


def _percent(text: str) -> Start:
    """`text` percent-encoded, byte by byte, the hex digits in either case."""
    codes = "%".join("".join(_either(d) for d in f"{b:02X}") for b in _utf8(text))
    return ("%", codes)


def _text_form(value: str) -> list[Unit]:
    """The secret as text: in any case, any character percent-encoded, in any JSON
    spelling."""
    units = []
    for c in value:
        cases = list(dict.fromkeys((c, c.lower(), c.upper(), *_CONTEXT_CASES.get(c, ""))))
        unit = [start for s in cases for start in _spelled(s)]
        unit += [_percent(s) for s in cases]
        if c == " ":
            unit.append(("+", ""))  # a form-encoded space
        units.append(unit)
    return units


def _hex_form(data: bytes) -> list[Unit]:
    return [[(d, ""), (d.upper(), "")] for d in data.hex()]


def base64_cores(data: bytes) -> list[str]:
    """The standard base64 characters that only `data`'s bits decide, at each of the three
    alignments `data` can have inside a longer base64 string (0, 1 or 2 bytes after a
    3-byte boundary)."""
    cores = []
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + data).decode("ascii")
        first = -(-8 * offset // 6)  # the first character all of whose 6 bits are data's
        last = 8 * (offset + len(data)) // 6  # past the last one
        cores.append(encoded[first:last])
    return cores


def _base64_form(core: str) -> list[Unit]:
    units: list[Unit] = []
    for c in core:
        if c in _URL_SAFE:  # standard or URL-safe, either percent-encoded
            units.append([*_json(c), (_URL_SAFE[c], ""), _percent(c)])
        else:
            units.append([(c, "")])
    return units


def _pattern(forms: Sequence[list[Unit]]) -> re.Pattern[str]:
    """One pattern for all `forms`: it starts with the set of characters any form may start
    with (so the engine skips to where a match can begin), then each form, its first
    character checked by looking back at the one just taken."""
    firsts: dict[str, None] = {}
    branches = []
    for units in forms:
        by_rest: dict[str, list[str]] = {}
        for first, rest in units[0]:
            by_rest.setdefault(rest, []).append(first)
            firsts[first] = None
        head = _one_of(f"(?<={_class(chars)}){rest}" for rest, chars in by_rest.items())
        branches.append(head + "".join(_alternatives(u) for u in units[1:]))
    return re.compile(_class(list(firsts)) + _one_of(branches))


def _class(chars: Sequence[str]) -> str:
    unique = "".join(dict.fromkeys(chars))
    return (
        re.escape(unique)
        if len(unique) == 1
        else "[" + "".join("\\" + c if c in "\\]^-[" else c for c in unique) + "]"
    )


@attrs.frozen
class Secret:
    """One secret: the name it is shown by (`[redacted:NAME]`) and its value."""

    name: str
    value: str = attrs.field(repr=False)

    def forms(self) -> list[list[Unit]]:
        """Every form this secret is matched in (see the module's text), each as its units:
        what may stand for each of its characters."""
        data = _utf8(self.value)
        cores = [core for core in dict.fromkeys(base64_cores(data)) if core]
        return [_text_form(self.value), _hex_form(data), *(_base64_form(c) for c in cores)]


@functools.lru_cache(maxsize=64)
def _compiled(value: str) -> tuple[re.Pattern[str], int]:
    """The pattern of every form of the secret `value` (built once per process: a redactor
    is made per run, and joined with others), and the fewest characters a form of it
    takes (each of a form's units takes one at least: shorter text holds no secret)."""
    forms = Secret("", value).forms()
    return _pattern(forms), min(len(units) for units in forms)


class Redactor:
    """Replaces every known secret, in any of its forms, by its marker."""

    def __init__(self, secrets: Iterable[Secret] = ()) -> None:
        # Longest first: a secret that contains another is replaced whole.
        unique = {s.value: s for s in secrets if s.value}
        self.secrets: tuple[Secret, ...] = tuple(
            sorted(unique.values(), key=lambda s: -len(s.value))
        )
        self._patterns = [(_compiled(s.value)[0], MARKER.format(name=s.name)) for s in self.secrets]
        self._shortest = min((_compiled(s.value)[1] for s in self.secrets), default=0)

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def __repr__(self) -> str:  # never the values
        return f"Redactor({', '.join(s.name for s in self.secrets)})"

    def __or__(self, other: Redactor) -> Redactor:
        return Redactor((*self.secrets, *other.secrets))

    def text(self, text: str) -> str:
        """`text` with every secret, in any of its forms, replaced by its marker."""
        if not self.secrets or len(text) < self._shortest:
            return text
        for pattern, marker in self._patterns:
            text = pattern.sub(lambda _match: marker, text)  # noqa: B023 - used at once
        return text

    def value(self, value: Any, _depth: int = 0) -> Any:
        """A JSON-like value (a reply, an observation) with every string in it redacted, the
        keys of objects included; bytes as their text (UTF-8, undecodable bytes kept as
        they are); an integer whose digits hold a secret becomes the redacted text of them;
        other values unchanged (`fsm_agent.runtime.outcomes` redacts their preview)."""
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
            decoded = value.decode("utf-8", "surrogateescape")
            redacted = self.text(decoded)
            return value if redacted == decoded else redacted.encode("utf-8", "surrogateescape")
        if type(value) is int:
            return self._number(value)
        return value

    def _number(self, value: int) -> int | str:
        try:
            digits = str(value)
        except ValueError:  # more digits than Python prints: no secret is that long
            return value
        redacted = self.text(digits)
        return value if redacted == digits else redacted


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
