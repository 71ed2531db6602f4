"""How text from a run leaves the process: into files, onto terminals, into hashes.

A live run keeps whatever text a model or a tool hands it, and a Python string can hold what
UTF-8 cannot encode: a lone surrogate (`"\\ud800"`, which is valid JSON as the escape
`\\ud800`). The journal keeps it (its JSON columns are ASCII, with escapes), so every way out
of the journal must be total over it too. This module is that one policy:

- **files** (`FILE_ENCODING`, `FILE_ERRORS`): UTF-8, with a lone surrogate written as its
  escape `\\udXXX`. In JSON text a surrogate can only sit inside a string, where that escape
  *is* the JSON for it, so a run file reads back to the text it was written from; in HTML
  or prose it shows what was there. Valid text is written byte for byte as before.
- **terminals** (`harden_streams`): stdout and stderr the same way, so a command prints the
  escape instead of dying on it; and on a terminal, control characters (an ESC sequence, a
  carriage return that overwrites a line, a bidi override) are shown as escapes too, so a
  hostile reply cannot redraw what a reviewer reads.
- **hashes** (`hash_bytes`): UTF-8 with surrogates passed through: the same bytes as plain
  UTF-8 for valid text (no existing hash changes) and distinct bytes for distinct text.
- **JSON sent to a peer** (`wire_text`, `wire_json`): strict UTF-8 JSON that any parser
  takes. Many refuse a lone surrogate even as an escape (a request holding one would fail
  on every later call of the run), so it is sent as the text of its escape.
- **the journal's own text columns** (`unencodable`): text the database cannot store as
  text (a task given on a command line with a byte that is not UTF-8, a run file's edited
  task) is refused up front saying where it is, never half-written.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from typing import Any, Final, TextIO

from fsm_agent.errors import InvalidInputError

#: How every file fsm-agent writes (records, run files, reports, diagrams) is encoded.
FILE_ENCODING: Final = "utf-8"
#: What becomes of a character UTF-8 cannot encode (a lone surrogate): its `\\udXXX` escape.
FILE_ERRORS: Final = "backslashreplace"

_SURROGATES = range(0xD800, 0xE000)
#: Two code points that UTF-16 would read as one character, and a surrogate left alone.
_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")
_LONE = re.compile("[\ud800-\udfff]")

#: On a terminal: C0 controls but tab and newline, DEL, C1 controls, and the bidi overrides
#: and isolates, each shown as its escape.
_CONTROLS: Final[dict[int, str]] = {
    **{c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c not in (9, 10)},
    **{c: f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))},
}


def hash_bytes(text: str) -> bytes:
    """`text` as it is hashed: its UTF-8 bytes (lone surrogates passed through); never
    raises, and gives plain UTF-8 for any valid text."""
    return text.encode("utf-8", "surrogatepass")


def text_sha256(text: str) -> str:
    """The sha256 of `text` (a machine declaration) as hex, over `hash_bytes`."""
    return hashlib.sha256(hash_bytes(text)).hexdigest()


def wire_text(value: Any) -> str:
    """`value` as JSON text for a remote peer (`json.dumps` defaults; what is not JSON sent as
    its `str`), with no lone surrogate: a pair held as two code points is joined into its
    character (as an ASCII escape would have sent it), and a lone one becomes the text of its
    escape (`\\ud800`, six characters)."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    if text.isascii():
        return text
    text = _PAIR.sub(
        lambda m: m.group().encode("utf-16-le", "surrogatepass").decode("utf-16-le"), text
    )
    return _LONE.sub(lambda m: f"\\\\u{ord(m.group()):04x}", text)


#: How deep `joined` walks (the deepest reply read is 64: `runtime.proposals`).
JOIN_DEPTH = 66


def joined(value: Any) -> Any:
    """`value` with every surrogate pair held as two code points joined into its character,
    in strings and dict keys at any depth (the same object when there is none). JSON text
    cannot tell the two apart (`"\\ud83d\\ude00"` reads back as one character), so a value
    journaled with a split pair would read back different — and sort its keys differently,
    which changes its canonical bytes and so its seal. Values that enter a run (a model's
    reply, a tool's result) are joined first (`runtime.outcomes.admit`). Each container is
    walked once (a cycle or a shared part costs nothing more), and not below `JOIN_DEPTH`
    levels: what is left is the reply's own checks' to refuse (`proposals.json_problem`)."""
    return _joined(value, 0, {})


def _joined(value: Any, depth: int, seen: dict[int, Any]) -> Any:
    if isinstance(value, str):
        if value.isascii() or not _PAIR.search(value):
            return value
        return _PAIR.sub(
            lambda m: m.group().encode("utf-16-le", "surrogatepass").decode("utf-16-le"), value
        )
    if depth > JOIN_DEPTH or not isinstance(value, dict | list | tuple):
        return value
    if id(value) in seen:
        return seen[id(value)]
    seen[id(value)] = value  # a cycle back to it finds it as it is
    out: Any = value
    if isinstance(value, dict):
        items = [(_joined(k, depth + 1, seen), _joined(v, depth + 1, seen))
                 for k, v in value.items()]  # fmt: skip
        if not all(a is k and b is v for (a, b), (k, v) in zip(items, value.items(), strict=True)):
            out = dict(items)
    else:
        parts = [_joined(v, depth + 1, seen) for v in value]
        if not all(a is b for a, b in zip(parts, value, strict=True)):
            out = parts if isinstance(value, list) else tuple(parts)
    seen[id(value)] = out
    return out


def wire_json(value: Any) -> bytes:
    """`value` as the UTF-8 bytes of a JSON request body (see `wire_text`)."""
    return wire_text(value).encode("utf-8")


def unencodable(text: str) -> str | None:
    """Why `text` cannot be stored as UTF-8 text (where its first lone surrogate is), or None.
    From a command line, such a character is a byte that is not UTF-8."""
    if text.isascii():
        return None
    for i, char in enumerate(text):
        if ord(char) in _SURROGATES:
            return (
                f"it holds {char!r} at position {i}, which is not valid Unicode text (a lone"
                " surrogate; on a command line, a byte that is not UTF-8)"
            )
    return None


def refuse_unencodable(what: str, text: str) -> None:
    """Raise `InvalidInputError` naming `what` when `text` cannot be journaled as text."""
    why = unencodable(text)
    if why is not None:
        raise InvalidInputError(f"{what} cannot be journaled: {why}")


class _Outlet:
    """stdout or stderr as a command writes to it: a reader that went away (a closed pipe,
    `| head -1`) or a stream that cannot be written changes nothing about the command — the
    text is dropped, and the descriptor is pointed at the null device so that the exit's
    own flush does not fail either; on a terminal, control characters are shown as escapes
    (see `_CONTROLS`). Everything else is the stream's own."""

    def __init__(self, stream: TextIO, escape: bool) -> None:
        self._stream = stream
        self._escape = escape
        #: True once a write or flush failed: the rest of the output goes nowhere
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                self._stream.write(text.translate(_CONTROLS) if self._escape else text)
            except (OSError, ValueError):
                self._lost()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self._lost()

    def _lost(self) -> None:
        self.gone = True
        try:
            fd = self._stream.fileno()
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, fd)
            os.close(null)
        except (OSError, ValueError, AttributeError):  # no descriptor: nothing to flush later
            return

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def harden_streams() -> None:
    """Put stdout and stderr under the policy: a lone surrogate is written as its escape,
    on a terminal control characters are too, and a reader that went away changes nothing
    (`_Outlet`). Idempotent; the CLI calls it before each command (and so before its
    `Error: …` line)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or isinstance(stream, _Outlet):
            continue
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", FILE_ERRORS) != FILE_ERRORS:
            try:
                reconfigure(errors=FILE_ERRORS)
            except (ValueError, OSError):  # a closed or detached stream: leave it as it is
                continue
        isatty = getattr(stream, "isatty", None)
        try:
            on_terminal = bool(isatty()) if isatty is not None else False
        except (ValueError, OSError):
            on_terminal = False
        setattr(sys, name, _Outlet(stream, escape=on_terminal))
