"""The witness: each run's head, signed and kept outside the journal, as the run goes.

A keyed chain stops someone without the key from editing, forging or resealing a run. It
cannot stop them from taking events away together with what anchors them: a halted run cut
back to its first event, with its record, seal and head removed and its status set back to
`running`, looks like a run killed early, and a run deleted whole leaves nothing to check.
Only something kept where the journal's editors cannot rewrite it shows that.

A witness is such a thing: a file of lines that every process writing runs with the chain
key appends to (`FSM_AGENT_WITNESS`, given like the key), one line per commit. Each line
names a run, the sequence number and hash of its head after that commit, and, once the run
has halted, its halt record's seal; it is signed with HMAC-SHA256 under the chain key (the
body framed by `_CONTEXT`, so no chain digest can pass for one), so a line cannot be forged
or edited without the key. `fsm-agent verify` reads it (`read_log`) and checks each run
against what it saw (`fsm_agent.journal.chain_witness`).

A line is appended after its commit, never before: an honest journal is always as far as
its witness or further (a writer stopped between the two leaves the journal one commit
ahead). The file is opened with O_APPEND and each line is one write(2) of a few hundred
bytes, so the processes of one host can share it; it is not fsync'd (a line lost to a power
cut makes the witness say less, never something false).
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from fsm_agent.errors import InvalidInputError
from fsm_agent.journal.chain_hash import key_id

WITNESS_ENV: Final = "FSM_AGENT_WITNESS"
WITNESS_VERSION: Final = 1
_CONTEXT: Final = b"fsm-agent/witness/1\n"
_FIELDS: Final = frozenset({"witness", "run_id", "seq", "head", "seal", "at", "key", "mac"})
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX16 = re.compile(r"[0-9a-f]{16}")


class WitnessError(InvalidInputError):
    """A witness cannot be used: no key to sign or check it with, a file that cannot be
    opened, or one that is not a witness. Names the file (`path`)."""

    def __init__(self, message: str, *, path: str) -> None:
        self.path = path
        super().__init__(f"witness {path}: {message}")


@attrs.frozen
class Sighting:
    """One witness line: run `run_id` had reached seq `seq` with head `head` (and, with
    `seal`, had halted with its record sealed so) at `at`; `where` is FILE:LINE."""

    run_id: str
    seq: int
    head: str
    seal: str | None
    at: str
    key_id: str
    where: str


def _body(fields: Mapping[str, Any]) -> bytes:
    text = json.dumps(dict(fields), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return text.encode("ascii")


def sign(fields: Mapping[str, Any], key: bytes) -> str:
    """The MAC of one line's fields (every field but `mac`) under `key`."""
    unsigned = {k: v for k, v in fields.items() if k != "mac"}
    return hmac.new(key, _CONTEXT + _body(unsigned), hashlib.sha256).hexdigest()


def line(run_id: str, seq: int, head: str, seal: str | None, key: bytes, at: str) -> bytes:
    """One signed witness line (ASCII JSON, sorted keys, a newline at its end)."""
    fields: dict[str, Any] = {"witness": WITNESS_VERSION, "run_id": run_id, "seq": seq,
                              "head": head, "seal": seal, "at": at, "key": key_id(key)}  # fmt: skip
    fields["mac"] = sign(fields, key)
    return _body(fields) + b"\n"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")


class WitnessWriter:
    """Appends a store's signed heads to one witness file (0600, created if need be)."""

    def __init__(self, path: str | os.PathLike[str], key: bytes) -> None:
        self.path = str(path)
        self._key = key
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        try:
            self._fd: int | None = os.open(self.path, flags, 0o600)
        except OSError as exc:
            raise WitnessError(
                f"cannot open it to append ({exc.strerror or exc})", path=self.path
            ) from exc

    def saw(self, run_id: str, seq: int, head: str, seal: str | None = None) -> None:
        """Append that `run_id` has reached `seq` with `head` (and halted, with `seal`).
        Raises OSError when the line could not be written whole."""
        if self._fd is None:
            raise OSError(f"the witness {self.path} is closed")
        data = line(run_id, seq, head, seal, self._key, _now())
        written = os.write(self._fd, data)
        if written != len(data):
            raise OSError(f"only {written} of {len(data)} bytes written")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def open_witness(path: str | os.PathLike[str] | None, key: bytes | None) -> WitnessWriter | None:
    """The witness at `path` opened to append, or None without a path. A witness is signed
    with the chain key: one without a key is refused."""
    if not path:
        return None
    if key is None:
        raise WitnessError(
            "a witness signs each head with the chain key, and none is given (set"
            " FSM_AGENT_CHAIN_KEY or FSM_AGENT_CHAIN_KEY_FILE)",
            path=str(path),
        )
    return WitnessWriter(path, key)


def writer_from_env(
    key: bytes | None, environ: Mapping[str, str] | None = None
) -> WitnessWriter | None:
    """The witness a writing store appends to by default (`FSM_AGENT_WITNESS`), or None."""
    return open_witness((os.environ if environ is None else environ).get(WITNESS_ENV), key)


@attrs.frozen
class Witness:
    """What one or more witness files saw, checked with one key (`key_id`): per run, the
    lines signed with it (`seen`), those that claim its id but whose MAC does not match
    (`forged`), and how many lines are signed with another key (`foreign`, not usable).
    No `sources`: no witness was given."""

    sources: tuple[str, ...] = ()
    key_id: str | None = None
    lines: int = 0
    seen: Mapping[str, tuple[Sighting, ...]] = attrs.field(factory=dict)
    forged: Mapping[str, tuple[Sighting, ...]] = attrs.field(factory=dict)
    foreign: Mapping[str, int] = attrs.field(factory=dict)
    #: an incomplete last line (a writer stopped in the middle of it), per file: ignored
    partial: tuple[str, ...] = ()

    @property
    def given(self) -> bool:
        return bool(self.sources)

    @property
    def name(self) -> str:
        return ", ".join(self.sources) if self.sources else "no witness"

    def describe(self) -> str:
        """`witness: FILE (N lines on R runs, key id K)`, as verify prints it first."""
        if not self.given:
            return "witness: none given"
        runs = len(set(self.seen) | set(self.forged))
        extra = [f"{n} line{'s' if n > 1 else ''} with another key"
                 for n in [sum(self.foreign.values())] if n]  # fmt: skip
        extra += [f"incomplete last line ignored: {p}" for p in self.partial]
        tail = "".join(f"; {x}" for x in extra)
        return (
            f"witness: {self.name} ({self.lines} line{'s' if self.lines != 1 else ''} on"
            f" {runs} run{'s' if runs != 1 else ''}, key id {self.key_id}{tail})"
        )


NO_WITNESS: Final = Witness()


def _sighting(data: Any, where: str) -> Sighting | str:
    """The sighting one parsed line holds, or why it is not a witness line."""
    if not isinstance(data, dict):
        return "not a JSON object"
    if set(data) != _FIELDS:
        missing, extra = sorted(_FIELDS - set(data)), sorted(set(data) - _FIELDS)
        return f"fields {missing} missing, {extra} not a witness line's"
    ok = (
        data["witness"] == WITNESS_VERSION
        and isinstance(data["run_id"], str)
        and type(data["seq"]) is int
        and data["seq"] >= 0
        and _hex(data["head"], _HEX64)
        and (data["seal"] is None or _hex(data["seal"], _HEX64))
        and isinstance(data["at"], str)
        and _hex(data["key"], _HEX16)
        and _hex(data["mac"], _HEX64)
    )
    if not ok:
        return "a field has the wrong type or form"
    return Sighting(
        data["run_id"], data["seq"], data["head"], data["seal"], data["at"], data["key"], where
    )


def _hex(value: Any, form: re.Pattern[str]) -> bool:
    return isinstance(value, str) and form.fullmatch(value) is not None


def read_log(
    paths: Iterable[str | os.PathLike[str]],
    key: bytes | None,
    *,
    run_id: str | None = None,
    missing_ok: bool = False,
) -> Witness:
    """What the witness files at `paths` saw, each line checked with `key` (only the lines
    of `run_id`, when given). Raises `WitnessError` without a key, for a file that cannot be
    read (unless `missing_ok` and it does not exist yet), and for a line that is not a
    witness line (save an incomplete last one, which is ignored and said)."""
    sources = tuple(str(p) for p in paths)
    if not sources:
        return NO_WITNESS
    if key is None:
        raise WitnessError(
            "a witness is checked with the chain key its lines are signed with: set"
            " FSM_AGENT_CHAIN_KEY or FSM_AGENT_CHAIN_KEY_FILE, or give --key-file",
            path=", ".join(sources),
        )
    mine = key_id(key)
    seen: dict[str, list[Sighting]] = {}
    forged: dict[str, list[Sighting]] = {}
    foreign: dict[str, int] = {}
    partial: list[str] = []
    count = 0
    needle = None if run_id is None else _body({"run_id": run_id})[1:-1]
    for source in sources:
        try:
            data = Path(source).read_bytes()
        except FileNotFoundError:
            if missing_ok:
                continue
            raise WitnessError("no such file", path=source) from None
        except OSError as exc:
            raise WitnessError(f"cannot read it ({exc.strerror or exc})", path=source) from exc
        rows = data.split(b"\n")
        for number, raw in enumerate(rows, 1):
            if not raw.strip():
                continue
            last = number == len(rows)  # no newline after it: a write cut short
            if needle is not None and needle not in raw and not last:
                continue
            where = f"{source}:{number}"
            try:
                parsed = _sighting(json.loads(raw), where)
            except (ValueError, RecursionError):
                parsed = "not JSON"
            if isinstance(parsed, str):
                if last:
                    partial.append(where)
                    continue
                raise WitnessError(
                    f"line {number} is not a witness line ({parsed}): is this a witness?",
                    path=source,
                )
            if run_id is not None and parsed.run_id != run_id:
                continue
            count += 1
            if parsed.key_id != mine:
                foreign[parsed.run_id] = foreign.get(parsed.run_id, 0) + 1
                continue
            fields = json.loads(raw)
            good = hmac.compare_digest(sign(fields, key), fields["mac"])
            (seen if good else forged).setdefault(parsed.run_id, []).append(parsed)
    return Witness(
        sources=sources,
        key_id=mine,
        lines=count,
        seen={r: tuple(s) for r, s in seen.items()},
        forged={r: tuple(s) for r, s in forged.items()},
        foreign=foreign,
        partial=tuple(partial),
    )
