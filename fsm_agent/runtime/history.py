"""The run's notes for the model: an append-only log, shown to each model call as a read-only
view of the notes so far.

Each note is pickled as it is appended: every read of a view gives a fresh copy of it, so
nothing an adapter does to what it reads changes the run, and notes appended later never
show in a prompt already given (a view is the log's first `len(view)` notes). Every
`CHUNK` notes are compressed together (notes of one run repeat their keys and shapes: a
note then costs a few bytes to a few dozen, where a dict costs hundreds), so a long run's
history stays small; reading a view decompresses each chunk once. Handing a view to a model
call costs the same at the 10th step as at the 100,000th: nothing is copied.
"""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Iterator, Sequence
from typing import Any, overload

Note = dict[str, Any]
#: How many notes are compressed together.
CHUNK = 64


def _load(blob: bytes) -> Note:
    note: Note = pickle.loads(blob)  # noqa: S301 - only bytes this module pickled
    return note


def _unpack(chunk: bytes) -> tuple[bytes, ...]:
    blobs: tuple[bytes, ...] = pickle.loads(zlib.decompress(chunk))  # noqa: S301 - ours
    return blobs


class HistoryView(Sequence[Note]):
    """The first `len(self)` notes of a run's history, read-only; each read is a new copy."""

    __slots__ = ("_chunks", "_count", "_tail")

    def __init__(self, chunks: list[bytes], count: int, tail: tuple[bytes, ...]) -> None:
        self._chunks = chunks  # only ever appended to: the first `count` are this view's
        self._count = count
        self._tail = tail

    def __len__(self) -> int:
        return self._count * CHUNK + len(self._tail)

    @overload
    def __getitem__(self, index: int) -> Note: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Note, ...]: ...
    def __getitem__(self, index: int | slice) -> Note | tuple[Note, ...]:
        size = len(self)
        if isinstance(index, slice):
            return tuple(self)[index]
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError("history index out of range")
        chunk, at = divmod(index, CHUNK)
        if chunk < self._count:
            return _load(_unpack(self._chunks[chunk])[at])
        return _load(self._tail[at])

    def __iter__(self) -> Iterator[Note]:
        for n in range(self._count):
            for blob in _unpack(self._chunks[n]):
                yield _load(blob)
        for blob in self._tail:
            yield _load(blob)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, HistoryView | tuple | list):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment] # notes are dicts: no hash, as for a tuple of them

    def __repr__(self) -> str:
        return f"HistoryView({list(self)!r})"


class History:
    """A run's notes for the model, in order; only ever appended to."""

    __slots__ = ("_chunks", "_tail")

    def __init__(self, notes: Sequence[Note] = ()) -> None:
        self._chunks: list[bytes] = []
        self._tail: list[bytes] = []
        for note in notes:
            self.append(note)

    def append(self, note: Note) -> None:
        self._tail.append(pickle.dumps(note, pickle.HIGHEST_PROTOCOL))
        if len(self._tail) == CHUNK:  # a new list: a view keeps its own copy of the tail
            self._chunks.append(zlib.compress(pickle.dumps(tuple(self._tail), 5), 1))
            self._tail = []

    def __len__(self) -> int:
        return len(self._chunks) * CHUNK + len(self._tail)

    def view(self) -> HistoryView:
        """The notes so far, as a model call is shown them (at most `CHUNK` - 1 references
        are copied)."""
        return HistoryView(self._chunks, len(self._chunks), tuple(self._tail))

    def __iter__(self) -> Iterator[Note]:
        return iter(self.view())

    def __getitem__(self, index: int) -> Note:
        return self.view()[index]

    def __eq__(self, other: object) -> bool:
        return self.view() == (other.view() if isinstance(other, History) else other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"History({list(self)!r})"
